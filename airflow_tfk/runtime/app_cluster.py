"""A training task's place in its cluster: its ``tf.distribute.Server``, serving forever on
the tasks that never exit, waiting for the other tasks, and where its summaries and
metrics go. A mixin of :class:`~airflow_tfk.runtime.app.TrainingApp`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_tfk.runtime import cluster as _cluster
from airflow_tfk.runtime.exits import log
from airflow_tfk.runtime.loops import server_inter_op_threads

if TYPE_CHECKING:
    from airflow_tfk.runtime.flags import PlatformFlags
    from airflow_tfk.runtime.notice import Notice


class ClusterTask:
    if TYPE_CHECKING:  # TrainingApp's (declared only, so nothing is shadowed)
        flags: PlatformFlags
        task: _cluster.TaskInfo | None
        mode: str
        notice: Notice | None
        step: int

        @property
        def is_chief(self) -> bool: ...

    def _metrics(self) -> Any:
        """The task's Prometheus metrics, served on ``--tfk_metrics_port`` (else None)."""
        if not self.flags.metrics_port:
            return None
        from airflow_tfk.runtime import metrics

        role, index = ("local", "0") if self.task is None else (self.task.role, str(self.task.index))
        labels = {"role": role, "index": index, "cluster": os.environ.get("TFK_CLUSTER_NAME", "")}
        exported = metrics.TrainingMetrics(labels, self.flags.steps, self.flags.batch_size)
        metrics.serve(exported, self.flags.metrics_port, self.flags.metrics_path)
        return exported

    def _summary_dir(self) -> str | None:
        if not self.flags.log_dir or not self.is_chief:
            return None
        return self.summary_dir_for("local" if self.task is None else self.task.role)

    def summary_dir_for(self, role: str) -> str:
        """``<log dir>/<cluster or model name>/<role>-<index>``: TensorBoard shows each
        task of a training as its own run."""
        assert self.flags.log_dir
        name = os.environ.get("TFK_CLUSTER_NAME") or self.flags.model_name or "train"
        task = role if self.task is None else f"{role}-{self.task.index}"
        return os.path.join(self.flags.log_dir, name, task)

    def server(self) -> Any:
        """This task's ``tf.distribute.Server`` (started)."""
        import tensorflow as tf

        info = self.task
        assert info is not None
        config = None
        threads = server_inter_op_threads(self.mode, info.role)
        if threads is not None:
            log(
                f"{info.role}:{info.index}: {threads} inter-op threads for the server "
                "(a parameter_server task with one never runs the coordinator's steps)"
            )
            config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=threads)
        return tf.distribute.Server(
            tf.train.ClusterSpec(info.cluster),
            job_name=info.role,
            task_index=info.index,
            protocol="grpc",
            config=config,
            start=True,
        )

    def _serve_forever(self) -> None:
        """ps (and parameter_server workers): serve until killed. By design: the
        provider deletes these tasks once training has succeeded."""
        assert self.task is not None
        server = self.server()
        log(f"{self.task.role}:{self.task.index} serving at {self.task.address}")
        server.join()

    def wait_for(self, roles: Sequence[str], tcp: bool = True) -> None:
        """Wait (``--tfk_cluster_wait`` at most) until the tasks of ``roles`` are reachable;
        a notice (SIGTERM) ends the wait at once: :class:`~.notice.Preempted`."""
        from airflow_tfk.runtime.notice import Preempted

        assert self.task is not None
        notice = self.notice
        if notice is None:
            _cluster.wait_for_cluster(self.task, roles=roles, tcp=tcp, timeout=self.flags.cluster_wait)
            return
        try:
            _cluster.wait_for_cluster(
                self.task,
                roles=roles,
                tcp=tcp,
                timeout=self.flags.cluster_wait,
                sleep=notice.wait,
                stop=lambda: notice.received,
            )
        except _cluster.ClusterWaitStopped as exc:
            log(f"on notice: {exc}")
            raise Preempted(self.step, False) from None
