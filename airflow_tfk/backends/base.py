"""What every backend offers. Only backends have side effects.

A backend runs a :class:`TFClusterSpec` somewhere (Kubernetes, local processes) and
reports on it in the shared status model. Operators, the sensor and the trigger talk to
this interface only, so they work unchanged whichever backend is selected.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import time
from dataclasses import asdict, dataclass
from typing import Any

from airflow_tfk.core import naming
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.core.status import Activity, ClusterStatus
from airflow_tfk.core.usage import TaskUsage
from airflow_tfk.spec.admission import Layout
from airflow_tfk.spec.cluster import TFClusterSpec


@dataclass(frozen=True)
class ClusterRef:
    """Where a cluster lives; small and serialisable (XCom, trigger kwargs)."""

    name: str
    namespace: str

    @property
    def label_selector(self) -> str:
        return f"{naming.LABEL_CLUSTER}={self.name},{naming.MANAGED_SELECTOR}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "label_selector": self.label_selector}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClusterRef:
        return cls(name=data["name"], namespace=data["namespace"])


@dataclass(frozen=True)
class ClusterOwner:
    """Who a live cluster belongs to, as the cluster itself records it.

    ``identity`` is the exact (dag, task, run, map index) of the creating task instance, or
    None for a cluster created outside Airflow; ``spec_hash`` is the
    :meth:`TFClusterSpec.fingerprint` it was created from (None when it carries none).
    """

    identity: RunIdentity | None
    spec_hash: str | None
    created_at: float | None = None  # epoch seconds
    max_duration_seconds: int | None = None

    @property
    def deadline(self) -> float | None:
        """When the cluster-side deadline passes (None: no deadline or age unknown)."""
        if self.created_at is None or self.max_duration_seconds is None:
            return None
        return self.created_at + self.max_duration_seconds

    def describe(self) -> str:
        if self.identity is None:
            return "no Airflow task instance (created outside Airflow)"
        i = self.identity
        mapped = f", map index {i.map_index}" if i.map_index >= 0 else ""
        return f"dag {i.dag_id!r}, task {i.task_id!r}, run {i.run_id!r}{mapped}"


@dataclass(frozen=True)
class RunExport:
    """A model version a task of one run reported exporting (its ``{"tfk": "export"}``
    log line), found before the run's tasks go away so a failed run's versions can be set
    aside afterwards.

    ``path`` is the directory as the task saw it. On Kubernetes ``claim`` is the
    PersistentVolumeClaim that holds it, mounted at ``mount_path`` in the task's pod, and
    ``image`` the image that mounted it (what the set-aside Job runs).
    """

    path: str
    claim: str | None = None
    mount_path: str | None = None
    image: str | None = None


class Backend(abc.ABC):
    """Runs clusters. Every method is idempotent: calling it twice is harmless.

    ``config()`` returns the keyword arguments that rebuild an equivalent backend in
    another process (the triggerer), through :func:`airflow_tfk.backends.get_backend`.
    """

    kind: str

    @abc.abstractmethod
    def config(self) -> dict[str, Any]: ...

    @abc.abstractmethod
    def create(self, spec: TFClusterSpec, identity: RunIdentity | None = None) -> ClusterRef:
        """Create every object of the cluster; re-creating an existing cluster changes nothing."""

    def preflight(self, spec: TFClusterSpec, identity: RunIdentity | None = None) -> None:
        """What only this backend can check before :meth:`create` (the commands and ports
        of this machine; the rendered objects), raising with nothing created. ``create``
        checks again; this lets the lifecycle say "creating" only once it will."""
        return None

    @abc.abstractmethod
    def owner(self, ref: ClusterRef) -> ClusterOwner | None:
        """Who the live cluster ``ref`` belongs to (None: no such cluster).

        Read from what the cluster carries (annotations on Kubernetes, the state record
        locally), so the lifecycle can refuse to reattach to, or delete, a cluster of
        another task instance.
        """

    @abc.abstractmethod
    def exists(self, ref: ClusterRef) -> bool:
        """Is any object with the cluster's labels left?"""

    @abc.abstractmethod
    def status(self, ref: ClusterRef) -> ClusterStatus: ...

    def watcher(self, ref: ClusterRef) -> contextlib.AbstractAsyncContextManager[ClusterWatcher]:
        """The async reads of one wait on ``ref`` (see :class:`ClusterWatcher`), open for
        the whole wait. Backends with a change feed return their own."""
        return contextlib.nullcontext(ClusterWatcher(self, ref))

    poll_interval: float = 2.0

    @abc.abstractmethod
    def logs(self, ref: ClusterRef, role: str, index: int, tail_lines: int | None = None) -> str:
        """Log of one task ('' when it has none yet)."""

    def task_activity(self, ref: ClusterRef, role: str, index: int) -> Activity:
        """A running task's life signs, for naming the silent task of a stalled training:
        when it last wrote to its log, and whether its process is stopped. Asked only once
        the progress has stood still past the bound; the default knows nothing."""
        return Activity()

    def usage(self, ref: ClusterRef) -> list[TaskUsage]:
        """Each task's run so far (how long, what it requested), read while its tasks are
        there: a task still running counts until now. The default knows nothing."""
        return []

    @abc.abstractmethod
    def delete_roles(self, ref: ClusterRef, roles: list[str]) -> None:
        """Delete the tasks of these roles (e.g. the PS after success)."""

    def ends_roles_after_success(self, layout: Layout) -> str | None:
        """Who ends the roles still running once a training of ``layout`` succeeded, when
        the cluster does it itself (then the clean-up deletes nothing: there is nothing
        left for it to delete); None when the clean-up must delete them."""
        return None

    @abc.abstractmethod
    def delete(self, ref: ClusterRef, reason: str = "") -> None:
        """Delete everything that carries the cluster's labels.

        ``reason`` is kept where a watcher of the cluster can read it afterwards
        (``ClusterStatus.deleted_reason``), so a run killed by a newer one says so.
        """

    def run_exports(self, ref: ClusterRef) -> list[RunExport]:
        """The model versions the run's tasks reported exporting. Read while the tasks
        (and their logs) are still there: before :meth:`delete`."""
        return []

    def discard_exports(self, ref: ClusterRef, exports: list[RunExport]) -> list[str]:
        """Make ``exports`` (a failed run's versions, from :meth:`run_exports`)
        unpublishable; returns the paths set aside. Called after :meth:`delete`, so no
        task of the run can export anything more."""
        return []

    async def adelete(self, ref: ClusterRef, reason: str = "") -> None:
        await asyncio.to_thread(self.delete, ref, reason)

    def queue_message(self, ref: ClusterRef) -> str | None:
        """Why the cluster is still queued (Kueue's pending reason), or None."""
        return None

    def capacity_snapshot(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
        """Nodes and their non-terminal pods, for the capacity pre-check
        (:mod:`airflow_tfk.spec.capacity`); None where the backend has no nodes to compare."""
        return None

    def clusters(self, namespace: str | None) -> list[ClusterRef]:
        """Every cluster this project made that is not deleted (the sweeper's input)."""
        return self.find(namespace, {})

    @abc.abstractmethod
    def find(self, namespace: str | None, labels: dict[str, str]) -> list[ClusterRef]:
        """Live clusters whose objects carry all of ``labels`` (``namespace`` None: any).

        Used to find earlier runs of the same training (dag-id and task-id labels).
        """


class ClusterWatcher:
    """What a wait reads from a backend, as async calls: the statuses as they change, the
    progress task's log, a task's life signs, Kueue's reason.

    This one polls :meth:`Backend.status` every ``poll_interval`` seconds and runs the
    backend's blocking reads in threads, so the triggerer's event loop never blocks on
    them; the Kubernetes backend answers from one pod watch and its async client.
    """

    def __init__(self, backend: Backend, ref: ClusterRef) -> None:
        self.backend = backend
        self.ref = ref
        self._last: ClusterStatus | None = None
        self._polled = -float("inf")  # monotonic time of the last poll

    async def status(self) -> ClusterStatus:
        """The cluster as it is now."""
        return await asyncio.to_thread(self.backend.status, self.ref)

    async def next(self, timeout: float) -> ClusterStatus | None:
        """The next status that differs from the last one returned (the first call: the
        current one), or None when ``timeout`` seconds pass first."""
        end = time.monotonic() + timeout
        while True:
            wait = self._polled + self.backend.poll_interval - time.monotonic()
            if wait > 0:
                if time.monotonic() + wait > end:
                    await asyncio.sleep(max(0.0, end - time.monotonic()))
                    return None
                await asyncio.sleep(wait)
            self._polled = time.monotonic()
            status = await self.status()
            if status != self._last:
                self._last = status
                return status
            if time.monotonic() >= end:
                return None

    async def logs(self, role: str, index: int, tail_lines: int | None = None) -> str:
        return await asyncio.to_thread(self.backend.logs, self.ref, role, index, tail_lines)

    async def task_activity(self, role: str, index: int) -> Activity:
        return await asyncio.to_thread(self.backend.task_activity, self.ref, role, index)

    async def queue_message(self) -> str | None:
        return await asyncio.to_thread(self.backend.queue_message, self.ref)
