"""The rules of :class:`~airflow_tfk.spec.cluster.TFClusterSpec` that join several fields (its
own fields are checked from their declarations). Each rule is run through
:meth:`~airflow_tfk.spec.decl.Errors.run`, naming the fields it reads, so it is skipped
when one of them is already wrong and every error of a spec is still reported at once.
Pure: no Kubernetes client.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from airflow_tfk.core import naming
from airflow_tfk.core.errors import SpecError
from airflow_tfk.spec.admission import Layout, gang_rules
from airflow_tfk.spec.decl import Errors
from airflow_tfk.spec.pods import pod_rules_rules
from airflow_tfk.spec.roles import ROLES, AccessMode, Mode

if TYPE_CHECKING:
    from airflow_tfk.spec.cluster import TFClusterSpec

MAX_ENV_BYTES = 256 * 1024


def cluster_rules(spec: TFClusterSpec, errors: Errors) -> None:
    """Run every rule of ``spec`` that joins fields, collecting their errors in ``errors``."""

    def run(rule: Callable[[TFClusterSpec], None], *needs: str) -> None:
        errors.run(functools.partial(rule, spec), *needs)

    run(_namespace, "name", "namespace", "namespace_per_training")
    run(_own_namespace, "namespace_per_training", "storage", "queue_name", "cluster_queue")
    run(_env, "env", *(f"{r}.env" for r in ROLES))
    run(_mode_roles, "mode", *ROLES, "storage")
    run(_lost_workers, "max_lost_workers", "mode", "worker")
    run(_metrics, "metrics_port", "port", "network_policy")
    run(_generated_names, "name", "layout", "storage", *ROLES)
    run(
        _exec_sizes,
        *("name", "namespace", "layout", "port", "command", "args", "env", "legacy_tf1_flags"),
        *("metrics_port", "metrics_path", "storage", "mode", *ROLES),
    )
    run(_gang, "gang_scheduling", "layout", "queue_name")
    pod_rules_rules(spec, errors)


def _exec_sizes(spec: TFClusterSpec) -> None:
    from airflow_tfk.spec.launch_plan import check_exec_sizes, check_exec_totals, check_launched_programs

    check_launched_programs(spec)
    check_exec_sizes(spec)
    check_exec_totals(spec)


def _gang(spec: TFClusterSpec) -> None:
    gang_rules(spec.gang_scheduling, spec.layout, spec.queue_name)


def _namespace(spec: TFClusterSpec) -> None:
    # checked as created: with namespace_per_training that is '<namespace>-<name>'
    if not naming.is_dns1123_label(spec.namespace_name):
        raise SpecError(
            "namespace",
            "must be a DNS-1123 label (the per-training namespace is '<namespace>-<name>')",
            spec.namespace_name,
        )


def _own_namespace(spec: TFClusterSpec) -> None:
    """What a training's own namespace can hold. Pull secrets, the ServiceAccount and
    the LocalQueue are copied into it (or made) when it is created; an existing claim
    cannot be: a PVC is bound to its PV one-to-one, so the PV would have to leave the
    claim (and the namespace) that holds it, which may be another training's or the
    data's owner's. A claim of the training's own (``size:``) is made in it."""
    if spec.cluster_queue is not None and not (spec.namespace_per_training and spec.queue_name):
        raise SpecError(
            "cluster_queue",
            "needs namespace_per_training and queue_name: it is what the LocalQueue made "
            "in the training's own namespace points at",
            spec.cluster_queue,
        )
    if not spec.namespace_per_training:
        return
    for vol, volume in spec.storage.volumes().items():
        if volume.claim is not None:
            raise SpecError(
                f"storage.{vol}.claim",
                "cannot be used with namespace_per_training: a claim lives in its own "
                f"namespace ({spec.namespace}) and binds its volume to it alone; give "
                f"storage.{vol}.size for a claim made in the training's namespace, or set "
                "namespace_per_training: false",
                volume.claim,
            )


def _env(spec: TFClusterSpec) -> None:
    # Every pod carries the env: far below the API server's object size limit, checked
    # here so an oversized env fails in microseconds, not after rendering it.
    total = sum(len(k) + len(v) for k, v in spec.env.items())
    if total > MAX_ENV_BYTES:
        raise SpecError("env", f"totals {total} characters, over the {MAX_ENV_BYTES} a pod may carry")
    for where, env in (("env", spec.env), *((f"{r}.env", rs.env) for r, rs in spec.roles().items())):
        reserved = sorted(k for k in env if k.startswith("TFK_") or k == "TF_CONFIG")
        if reserved:
            raise SpecError(f"{where}.{reserved[0]}", "is reserved for the platform")


def _mode_roles(spec: TFClusterSpec) -> None:
    mode = spec.mode
    if mode is Mode.PARAMETER_SERVER:
        if spec.chief is None:
            raise SpecError(
                "chief", "is required when mode is parameter_server (the chief coordinates training)"
            )
        if spec.ps is None:
            raise SpecError("ps", "is required when mode is parameter_server")
        _shared_checkpoints(spec)
    elif mode is Mode.BETWEEN_GRAPH:
        if spec.ps is None:
            raise SpecError("ps", "is required when mode is between_graph")
    elif mode is Mode.ALL_REDUCE and spec.ps is not None:
        raise SpecError("ps", "must be omitted when mode is all_reduce (there are no parameter servers)")


def _shared_checkpoints(spec: TFClusterSpec) -> None:
    models = spec.storage.models
    # Found on a real node: the chief's checkpoint save runs on the PS (SaveV2 on
    # /job:ps), so the checkpoint directory ($TFK_MODEL_DIR) must be one volume that
    # the chief and every PS mount; a per-pod (ReadWriteOnce) claim fails the first save.
    if models is not None and models.claim is None and models.access_mode is not AccessMode.RWX:
        raise SpecError(
            "storage.models.access_mode",
            "must be ReadWriteMany when mode is parameter_server: the parameter servers "
            "write the chief's checkpoints, so the chief and every PS share the models volume",
            models.access_mode.value,
        )


def _lost_workers(spec: TFClusterSpec) -> None:
    if not spec.max_lost_workers:
        return
    if spec.mode is not Mode.PARAMETER_SERVER:
        raise SpecError(
            "max_lost_workers",
            "applies to parameter_server mode only (the other modes need every worker)",
            spec.max_lost_workers,
        )
    if spec.max_lost_workers >= spec.worker.replicas:
        raise SpecError(
            "max_lost_workers",
            f"must be less than worker.replicas ({spec.worker.replicas}): one worker must be left",
            spec.max_lost_workers,
        )


def _metrics(spec: TFClusterSpec) -> None:
    if spec.metrics_port is not None and spec.metrics_port == spec.port:
        raise SpecError("metrics_port", f"must differ from port ({spec.port})", spec.metrics_port)
    if spec.network_policy.metrics_from and spec.metrics_port is None:
        raise SpecError("network_policy.metrics_from", "needs metrics_port (the port it admits scrapers to)")


def _generated_names(spec: TFClusterSpec) -> None:
    """Check the longest name that will be generated, not just the one given."""
    for role, role_spec in spec.roles().items():
        longest = naming.task_hostname(spec.name, role, role_spec.replicas - 1, spec.layout is Layout.JOBSET)
        if len(longest) > naming.DNS1123_LABEL_MAX:
            raise SpecError(
                "name",
                f"is too long: task hostname '{longest}' would exceed {naming.DNS1123_LABEL_MAX} characters",
                spec.name,
            )
    for vol in spec.storage.volumes():
        pvc = f"{spec.name}-{vol}"
        if not naming.is_dns1123_subdomain(pvc):
            raise SpecError("name", f"gives an invalid PVC name '{pvc}'", spec.name)
