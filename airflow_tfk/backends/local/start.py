"""Starting a local cluster: each task's process configuration from the pod the
Kubernetes backend would create (argv, env, volumes, retries, deadline), written to disk
with the cluster's state, then one supervisor per task.

The pods come from :func:`airflow_tfk.render.manifests.render`, so both backends run the same argv
and environment; only the addresses (127.0.0.1 ports) and the volumes (directories)
differ. A mixin of :class:`~airflow_tfk.backends.local.backend.LocalBackend`.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.local import pod as _local_pod
from airflow_tfk.backends.local import records as records
from airflow_tfk.backends.local.files import LOCALHOST, MARKER_ENV, MINIMAL_ENV, TASK_ENV, _private_dir
from airflow_tfk.backends.local.host import METRICS_PORT_KEY
from airflow_tfk.backends.local.records import PRIVATE_FILE, ClusterState, TaskConfig, TaskEntry
from airflow_tfk.core import naming
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.protocol.exit_codes import EXIT_PREEMPTED
from airflow_tfk.spec.cluster import TFClusterSpec

# The backend's lines, under the backend's name (one logger to turn up for all of it).
log = logging.getLogger("airflow_tfk.backends.local.backend")


class LocalStart:
    kind: str
    env_allowlist: tuple[str, ...]
    inherit_env: bool
    kill_grace_seconds: float | None
    restart_backoff_seconds: float

    if TYPE_CHECKING:  # LocalBackend's and LocalProcesses' (declared only, so nothing is shadowed)

        def cluster_dir(self, ref: ClusterRef) -> Path: ...

        def claim_path(self, namespace: str, claim: str) -> Path: ...

        def _marker(self, ref: ClusterRef) -> str: ...

        def _launch(
            self, ref: ClusterRef, cdir: Path, tasks: Sequence[TaskEntry]
        ) -> tuple[TaskEntry, ...]: ...

    def _task_env(
        self, spec: TFClusterSpec, role: str, index: int, pod_env: dict[str, str], preload: str | None
    ) -> dict[str, str]:
        """What the process gets: the allow-listed part of this environment, then the pod's
        environment (kubelet-expanded), then the tags that find the process again."""
        allowed = self.env_allowlist if self.inherit_env else MINIMAL_ENV
        env = {
            k: os.environ[k]
            for k in allowed
            if k in os.environ and not (k.startswith(("TFK_", "AIRFLOW")) or k == "TF_CONFIG")
        }
        env["PYTHONUNBUFFERED"] = "1"  # progress lines reach the log as they are printed
        env.update(pod_env)
        if self.kill_grace_seconds is not None:  # the supervisor's grace, not the pod's
            env["TFK_TERMINATION_GRACE_SECONDS"] = f"{self.kill_grace_seconds:g}"
        env[MARKER_ENV] = self._marker(ClusterRef(spec.name, spec.namespace_name))
        env[TASK_ENV] = f"{role}-{index}"
        if preload is not None:
            env["LD_PRELOAD"] = preload
        return env

    def _start(
        self,
        ref: ClusterRef,
        spec: TFClusterSpec,
        identity: RunIdentity | None,
        commands: dict[str, list[str]],
        ports: dict[str, int],
        workdir: str,
        preload: str | None = None,
    ) -> None:
        cdir = self.cluster_dir(ref)
        _private_dir(cdir / "logs")
        volumes: dict[str, str] = {}
        for vol, vspec in spec.storage.volumes().items():
            vdir = self.claim_path(ref.namespace, vspec.claim) if vspec.claim else cdir / "volumes" / vol
            _private_dir(vdir)
            volumes[vol] = str(vdir)
        cluster = {
            role: [f"{LOCALHOST}:{ports[f'{role}-{i}']}" for i in range(rs.replicas)]
            for role, rs in spec.cluster_roles().items()
        }
        # One source of truth: the pods the Kubernetes backend would create.
        from airflow_tfk.render.manifests import render, runs_through_launcher

        containers = _local_pod.role_containers(render(spec, identity))
        created_at = time.time()
        deadline = created_at + spec.max_duration_seconds if spec.max_duration_seconds is not None else None
        tasks: list[TaskEntry] = []
        for role, rspec in spec.roles().items():
            for index in range(rspec.replicas):
                name = f"{role}-{index}"
                tdir = cdir / "tasks" / name
                _private_dir(tdir)
                scratch = cdir / "scratch" / name
                _private_dir(scratch)
                metrics_port = ports.get(f"{METRICS_PORT_KEY}{name}")
                pod_argv, pod_env = _local_pod.local_setup(
                    spec, containers[role], index, cluster, volumes, str(scratch), metrics_port
                )
                if metrics_port is not None:
                    log.info("local backend: %s serves its metrics at %s:%d", name, LOCALHOST, metrics_port)
                # The executables as this machine resolved them (python -> this interpreter).
                argv = _local_pod.local_argv(pod_argv, commands[role][0], runs_through_launcher(spec, role))
                task = TaskConfig(
                    role=role,
                    index=index,
                    argv=argv,
                    cwd=workdir,
                    env=self._task_env(spec, role, index, pod_env, preload),
                    log=str(cdir / "logs" / f"{name}.log"),
                    retries=spec.retries_per_index,
                    permanent_exit_codes=list(spec.permanent_exit_codes),
                    free_retry_exit_codes=[EXIT_PREEMPTED],
                    max_duration_seconds=spec.max_duration_seconds,
                    deadline=deadline,
                    kill_grace_seconds=(
                        spec.termination_grace_seconds
                        if self.kill_grace_seconds is None
                        else self.kill_grace_seconds
                    ),
                    restart_backoff_seconds=self.restart_backoff_seconds,
                    scratch=str(scratch),
                )
                records.write(tdir / "task.json", task)
                os.close(os.open(cdir / "logs" / f"{name}.log", os.O_CREAT | os.O_WRONLY, PRIVATE_FILE))
                tasks.append(TaskEntry(role, index, ports.get(name)))
        state = ClusterState(
            kind=self.kind,
            uid=uuid.uuid4().hex,
            name=ref.name,
            namespace=ref.namespace,
            created_at=created_at,
            spec=spec.to_dict(),
            spec_hash=spec.fingerprint(),
            labels=self._labels(spec, identity),
            identity=identity.to_dict() if identity is not None else None,
            cluster=cluster,
            volumes=volumes,
            workdir=workdir,
            tasks=tuple(tasks),
        )
        # Written before the supervisors start, so a failed start finds what to stop.
        records.write(cdir / "state.json", state)
        records.write(cdir / "state.json", replace(state, tasks=self._launch(ref, cdir, state.tasks)))
        log.info(
            "local backend: started %s/%s (%d tasks) under %s", ref.namespace, ref.name, len(tasks), cdir
        )

    @staticmethod
    def _labels(spec: TFClusterSpec, identity: RunIdentity | None) -> dict[str, str]:
        """The labels every Kubernetes object of this cluster would carry (for :meth:`find`)."""
        labels = {
            "app.kubernetes.io/name": "tensorflow",
            "app.kubernetes.io/instance": spec.name,
            "app.kubernetes.io/managed-by": naming.MANAGED_BY,
            naming.LABEL_CLUSTER: spec.name,
        }
        if identity is not None:
            labels.update(identity.labels())
        labels.update(spec.labels)
        return labels
