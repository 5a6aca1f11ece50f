"""`ClusterHandle`: what one task tells the next about a running cluster (the XCom value).

Everything a sensor, trigger or cleanup task needs, in plain JSON: where the cluster is,
which backend runs it, and how to judge it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from airflow_tfk.backends.base import Backend, ClusterRef
from airflow_tfk.core.constants import PS_GRACE_SECONDS
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.spec.admission import Layout
from airflow_tfk.spec.cluster import Mode, TFClusterSpec


@dataclass(frozen=True)
class ClusterHandle:
    ref: ClusterRef
    backend_kind: str
    backend_config: dict[str, Any] = field(default_factory=dict)
    mode: Mode = Mode.BETWEEN_GRAPH
    replicas: dict[str, int] = field(default_factory=dict)
    ps_grace_seconds: int = PS_GRACE_SECONDS
    # The task instance that created the cluster: a later delete (a teardown task, on_kill)
    # checks the cluster still belongs to it. None: created outside Airflow.
    owner: RunIdentity | None = None
    # False for a handle without an ``owner`` key (written by hand, e.g. a sensor's
    # ``cluster`` argument): there is nothing to check the cluster's owner against.
    owner_known: bool = True
    # What the clean-up after success may find: a JobSet ends the leftover roles itself.
    # A handle that names no layout (written by hand) has the default one, ``jobs``.
    layout: Layout = Layout.JOBS
    # parameter_server: workers that may fail for good before the training fails
    max_lost_workers: int = 0
    # The backend this handle talks through, built once: every step of a wait or of an
    # end (status, logs, exports, delete) shares one backend, so one Kubernetes hook.
    _backend: Backend | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def for_spec(
        cls, spec: TFClusterSpec, backend: Backend, owner: RunIdentity | None = None
    ) -> ClusterHandle:
        handle = cls(
            ClusterRef(spec.name, spec.namespace_name),
            backend.kind,
            backend.config(),
            spec.mode,
            {r: s.replicas for r, s in spec.roles().items()},
            spec.ps_grace_seconds,
            owner,
            layout=spec.layout,
            max_lost_workers=spec.max_lost_workers,
        )
        return handle.using(backend)

    @classmethod
    def for_ref(
        cls,
        ref: ClusterRef,
        backend: Backend,
        owner: RunIdentity | None,
        mode: Mode = Mode.BETWEEN_GRAPH,
        replicas: dict[str, int] | None = None,
    ) -> ClusterHandle:
        """A handle for a cluster whose spec is not at hand (an earlier run, an orphan),
        owned by ``owner`` as the cluster itself records it."""
        return cls(ref, backend.kind, backend.config(), mode, dict(replicas or {}), owner=owner).using(
            backend
        )

    def using(self, backend: Backend) -> ClusterHandle:
        """This handle, talking through ``backend`` (one of its kind and config)."""
        object.__setattr__(self, "_backend", backend)
        return self

    def backend(self) -> Backend:
        backend = self._backend
        if backend is None:
            from airflow_tfk.backends import get_backend

            # frozen: the cache is not part of the value (compare=False, not in to_dict)
            backend = get_backend(self.backend_kind, **self.backend_config)
            object.__setattr__(self, "_backend", backend)
        return backend

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.ref.to_dict(),
            "backend": self.backend_kind,
            "backend_config": self.backend_config,
            "mode": Mode(self.mode).value,
            "replicas": dict(self.replicas),
            "ps_grace_seconds": self.ps_grace_seconds,
            "owner": self.owner.to_dict() if self.owner is not None else None,
            "layout": Layout(self.layout).value,
            "max_lost_workers": self.max_lost_workers,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClusterHandle:
        if isinstance(data, ClusterHandle):
            return data
        if not isinstance(data, dict) or "name" not in data or "backend" not in data:
            raise ValueError(f"cluster: expected the XCom of a create-cluster task, got {data!r}")
        return cls(
            ClusterRef.from_dict(data),
            data["backend"],
            dict(data.get("backend_config") or {}),
            Mode(data.get("mode", Mode.BETWEEN_GRAPH)),
            dict(data.get("replicas") or {}),
            int(data.get("ps_grace_seconds", PS_GRACE_SECONDS)),
            RunIdentity.from_dict(data["owner"]) if data.get("owner") else None,
            "owner" in data,
            Layout(data.get("layout", Layout.JOBS)),
            int(data.get("max_lost_workers") or 0),
        )
