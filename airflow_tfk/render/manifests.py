"""Render a :class:`~airflow_tfk.spec.cluster.TFClusterSpec` into Kubernetes manifests.

The layout lives in Jinja2 templates (``templates/`` in the repository, installed as
``airflow_tfk/_templates``); this module only prepares plain data for them, renders them
in a sandbox and parses the result. It is a leaf: nothing in ``airflow_tfk/__init__.py``
imports it, so DAG parsing never pays for Jinja2 or YAML.

Why the result is safe whatever the spec contains: the templates render in the sandbox of
:mod:`airflow_tfk.render.templating` (values printed only through ``tojson``, YAML-exact, ``$(VAR)``
escaped), and each object is its own document, parsed alone with the safe loader (a second
document is an error) and checked against the kind and name it was meant to be.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from airflow_tfk.core import naming
from airflow_tfk.core.constants import POD_SECURITY_LEVEL, PodSecurityLevel
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.protocol.exit_codes import EXIT_PREEMPTED
from airflow_tfk.render.pod_semantics import check_pod_semantics
from airflow_tfk.render.pods import patch_pod_templates, pod_context
from airflow_tfk.render.templating import (
    RenderError,
    k8s_escape,
    template_dirs,
    template_environment,
    yaml_loader,
)
from airflow_tfk.spec.admission import KUEUE_QUEUE_LABEL, POD_GROUP_API_VERSION, GangScheduling, Layout
from airflow_tfk.spec.cluster import ROLES, Mode, TFClusterSpec
from airflow_tfk.spec.launch_plan import (
    FULL_CLUSTER_MAX_BYTES,
    LAUNCH_MODULE,
    compact_cluster,
    launcher_writes_tf1_flags,
    provider_adds_launcher,
    task_command,
)
from airflow_tfk.spec.pods import role_rules

__all__ = [
    "FULL_CLUSTER_MAX_BYTES",
    "RenderError",
    "render",
    "runs_through_launcher",
    "task_command",
    "to_yaml_stream",
]

CONTAINER_NAME = "tensorflow"
PORT_NAME = "grpc"
TEMPLATES = {
    "Namespace": "namespace.yaml.j2",
    "NetworkPolicy": "networkpolicy.yaml.j2",
    "PersistentVolumeClaim": "pvc.yaml.j2",
    "Service": "service.yaml.j2",
    "Job": "job.yaml.j2",
    "JobSet": "jobset.yaml.j2",
    "PodGroup": "podgroup.yaml.j2",
}
_NAMESPACED = {"NetworkPolicy", "PersistentVolumeClaim", "Service", "Job", "JobSet", "PodGroup"}
# etcd's default request limit is 1.5 MiB; leave room for status and managedFields.
MAX_OBJECT_BYTES = 1_000_000
_VOLUME_ENV = {"data": "TFK_DATA_DIR", "logs": "TFK_LOG_DIR", "models": "TFK_MODEL_DIR"}


@functools.lru_cache(maxsize=16)
def _templates(dirs: tuple[Path, ...]) -> dict[str, Any]:
    """Compiled templates per lookup path; compiling is the slow part of rendering."""
    env = template_environment(dirs)
    return {kind: env.get_template(name) for kind, name in TEMPLATES.items()}


# -- the data the templates see ---------------------------------------------------------
def _labels(
    spec: TFClusterSpec, component: str, role: str | None, identity: RunIdentity | None
) -> dict[str, str]:
    labels = {
        "app.kubernetes.io/name": "tensorflow",
        "app.kubernetes.io/instance": spec.name,
        "app.kubernetes.io/managed-by": naming.MANAGED_BY,
        "app.kubernetes.io/component": component,
        naming.LABEL_CLUSTER: spec.name,
    }
    if role is not None:
        labels[naming.LABEL_ROLE] = role
    if identity is not None:
        labels.update(identity.labels())
    # The spec rejects user labels under the platform's prefixes, so none is shadowed.
    labels.update(spec.labels)
    return labels


def _addresses(spec: TFClusterSpec) -> dict[str, list[str]]:
    ns = spec.namespace_name
    jobset = spec.layout is Layout.JOBSET
    return {
        role: [naming.task_address(spec.name, role, i, ns, spec.port, jobset) for i in range(rs.replicas)]
        for role, rs in spec.cluster_roles().items()
    }


def cluster_env(spec: TFClusterSpec, addresses: Mapping[str, list[str]] | None) -> tuple[str, bool]:
    """``TFK_CLUSTER`` of every pod, and whether Kubernetes can build ``TF_CONFIG`` from it
    (the full map) or the runtime must (the compact one)."""
    if addresses is not None and not compact_cluster(spec):
        return json.dumps(addresses, separators=(",", ":")), True
    ns = spec.namespace_name
    jobset = spec.layout is Layout.JOBSET  # JobSet's pod names differ: <N>-<role>-0-<i>.<N>
    compact = {
        role: {
            "pattern": naming.task_address(spec.name, role, "{i}", ns, spec.port, jobset),  # type: ignore[arg-type]
            "count": rs.replicas,
        }
        for role, rs in spec.cluster_roles().items()
    }
    return json.dumps(compact, separators=(",", ":")), False


#: what a task's Python runs before a TF1 between-graph script: the runtime's launcher
LAUNCH_PREFIX = ("-m", LAUNCH_MODULE, "--")


def runs_through_launcher(spec: TFClusterSpec, role: str) -> bool:
    """Whether the role's command is put behind the runtime's launcher: in a
    ``between_graph`` cluster with ``legacy_tf1_flags``, unless it already runs it.

    Such scripts build their sessions without ``device_filters``, and then a worker that
    starts after its peers exited waits for them forever; the launcher's start-up shim
    (``runtime/tf1_shim``) gives those sessions the filters, so the script needs no edit.
    """
    return provider_adds_launcher(spec, role)


def _env_list(env: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"name": k, "value": k8s_escape(v)} for k, v in env.items()]


def _role_context(
    spec: TFClusterSpec,
    role: str,
    identity: RunIdentity | None,
    addresses: Mapping[str, list[str]] | None,
    pod_annotations: Mapping[str, str],
) -> dict[str, Any]:
    rs = spec.roles()[role]
    command = task_command(spec, role)
    args = [k8s_escape(a) for a in (rs.args if rs.args is not None else spec.args)]
    if spec.legacy_tf1_flags and not launcher_writes_tf1_flags(spec, role):
        # These rely on expansion on purpose, and hold only validated DNS names.
        for flag, hosts_role in (("--ps_hosts", "ps"), ("--worker_hosts", "worker")):
            if addresses is not None and hosts_role in addresses:
                args.append(f"{flag}={','.join(addresses[hosts_role])}")
        args += ["--job_name=$(TFK_ROLE)", "--task_index=$(TFK_INDEX)"]
    resources: dict[str, dict[str, str]] = {}
    if rs.resources.requests:
        resources["requests"] = rs.resources.requests
    if rs.resources.limits:
        resources["limits"] = rs.resources.limits
    labels = _labels(spec, role, role, identity)
    selector = {naming.LABEL_CLUSTER: spec.name, naming.LABEL_ROLE: role}
    pod = pod_context(spec, role, selector)
    return {
        "name": role,
        # the objects Kueue admits carry its queue label; their pods do not need it
        "workload_labels": {**labels, **_queue_labels(spec)},
        "resource_name": naming.role_resource_name(spec.name, role),
        "replicas": rs.replicas,
        "labels": labels,
        "selector": selector,
        # the user's pod labels cannot shadow these: the spec refuses the platform's prefixes
        "pod_labels": {**pod["labels"], **labels},
        "pod_annotations": {**pod["annotations"], **pod_annotations},
        "pod": pod,
        "command": [k8s_escape(c) for c in command],
        "args": args,
        "env": _env_list({**spec.env, **rs.env}),
        "resources": resources,
        "node_selector": dict(rs.node_selector),
        "tolerations": [t.to_k8s() for t in rs.tolerations],
    }


def cluster_pod_selector(spec: TFClusterSpec) -> dict[str, str]:
    """Labels every pod of the cluster carries, and only its pods: what the cluster's
    NetworkPolicy selects and admits."""
    return {naming.LABEL_CLUSTER: spec.name, "app.kubernetes.io/managed-by": naming.MANAGED_BY}


def _queue_labels(spec: TFClusterSpec) -> dict[str, str]:
    return {KUEUE_QUEUE_LABEL: spec.queue_name} if spec.queue_name is not None else {}


def decisive_role(spec: TFClusterSpec) -> str:
    """The role whose success is the cluster's: the chief coordinates in
    ``parameter_server`` mode; otherwise every worker must finish."""
    return "chief" if spec.mode is Mode.PARAMETER_SERVER else "worker"


def _jobset_context(
    spec: TFClusterSpec, identity: RunIdentity | None, roles: dict[str, Any]
) -> dict[str, Any]:
    return {
        "labels": {**_labels(spec, "jobset", None, identity), **_queue_labels(spec)},
        "decisive_role": decisive_role(spec),
        # The retention, as the Jobs of the other layout have it: the JobSet's Jobs and
        # pods (the kept logs) go with it, and the sweeper removes what outlives them.
        "ttl_seconds": spec.ttl_seconds_after_finished,
        "roles": [roles[r] for r in ROLES if r in roles],
    }


def _gang_context(spec: TFClusterSpec, identity: RunIdentity | None) -> dict[str, Any] | None:
    """The cluster's PodGroup, or None. Its minCount is every task, the evaluator's too:
    the provider fails a training whose task stays unschedulable, so a training that
    started without room for one of its tasks would only hold the others' nodes until
    then."""
    if spec.gang_scheduling is not GangScheduling.NATIVE:
        return None
    return {
        "api_version": POD_GROUP_API_VERSION,
        "name": naming.pod_group_name(spec.name),
        "labels": _labels(spec, "pod-group", None, identity),
        "min_count": spec.task_count(),
    }


def _network_policy_context(spec: TFClusterSpec, identity: RunIdentity | None) -> dict[str, Any]:
    from airflow_tfk.spec.network import Egress

    policy = spec.network_policy
    restricted = policy.egress is Egress.RESTRICTED
    return {
        "name": naming.network_policy_name(spec.name),
        "labels": _labels(spec, "network-policy", None, identity),
        "pod_selector": cluster_pod_selector(spec),
        "policy_types": ["Ingress", "Egress"] if restricted else ["Ingress"],
        "restricted": restricted,
        "egress_to": [
            {"to": p.to_k8s(), "ports": [{"protocol": "TCP", "port": n} for n in p.ports]}
            for p in policy.egress_to
        ],
        "dns_to": [p.to_k8s() for p in policy.dns_peers()],
        "metrics_from": [p.to_k8s() for p in policy.metrics_from],
    }


def _context(spec: TFClusterSpec, identity: RunIdentity | None) -> dict[str, Any]:
    # The full map only when a pod carries it (or the legacy flags list it).
    literal_flags = spec.legacy_tf1_flags and not all(
        launcher_writes_tf1_flags(spec, r) for r in spec.roles()
    )
    addresses = _addresses(spec) if not compact_cluster(spec) or literal_flags else None
    cluster_json, tf_config_in_pod = cluster_env(spec, addresses)
    annotations = {
        **(identity.annotations() if identity is not None else {}),
        naming.ANNOTATION_SPEC_HASH: spec.fingerprint(),
        **(
            {naming.ANNOTATION_MAX_DURATION: str(spec.max_duration_seconds)}
            if spec.max_duration_seconds is not None
            else {}
        ),
    }
    volumes = []
    for name, vol in spec.storage.volumes().items():
        volumes.append(
            {
                "name": name,
                "claim_name": vol.claim or f"{spec.name}-{name}",
                "new": vol.claim is None,
                "size": vol.size,
                "storage_class": vol.storage_class or spec.storage.storage_class,
                "access_mode": vol.access_mode.value,
                "mount_path": f"{spec.storage.MOUNT_ROOT}/{name}",
                "env": _VOLUME_ENV[name],
            }
        )
    pod_annotations = {
        **annotations,
        **(
            {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": str(spec.metrics_port),
                "prometheus.io/path": spec.metrics_path,
            }
            if spec.metrics_port is not None
            else {}
        ),
    }
    ctx: dict[str, Any] = {
        "name": spec.name,
        "namespace": spec.namespace_name,
        "namespace_per_training": spec.namespace_per_training,
        "mode": spec.mode.value,
        "port": spec.port,
        "port_name": PORT_NAME,
        "container_name": CONTAINER_NAME,
        "image": spec.image,
        "image_pull_policy": spec.image_pull_policy,
        "image_pull_secrets": [{"name": s} for s in spec.image_pull_secrets],
        "service_account": spec.service_account,
        "max_duration_seconds": spec.max_duration_seconds,
        "ttl_seconds_after_finished": spec.ttl_seconds_after_finished,
        "retries_per_index": spec.retries_per_index,
        "permanent_exit_codes": list(spec.permanent_exit_codes),
        "preempted_exit_code": EXIT_PREEMPTED,
        "termination_grace_seconds": spec.termination_grace_seconds,
        "max_lost_workers": spec.max_lost_workers,
        "cluster_json": cluster_json,
        "tf_config_in_pod": tf_config_in_pod,
        "annotations": annotations,
        "metrics_port": spec.metrics_port,
        "metrics_path": spec.metrics_path,
        # the de-facto Prometheus convention; a scrape config keyed on them finds the pods
        "pod_annotations": pod_annotations,
        "namespace_labels": _labels(spec, "namespace", None, identity),
        "storage_labels": _labels(spec, "storage", None, identity),
        "volumes": volumes,
        "roles": {
            role: _role_context(spec, role, identity, addresses, pod_annotations) for role in spec.roles()
        },
        "network_policy": _network_policy_context(spec, identity),
        "queue_name": spec.queue_name,
        "gang": _gang_context(spec, identity),
    }
    if spec.layout is Layout.JOBSET:
        ctx["jobset"] = _jobset_context(spec, identity, ctx["roles"])
    return ctx


def _plan(spec: TFClusterSpec, ctx: Mapping[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(kind, name, extra template variables) of every object, dependencies first."""
    plan: list[tuple[str, str, dict[str, Any]]] = []
    if spec.namespace_per_training:
        plan.append(("Namespace", spec.namespace_name, {}))
    if spec.network_policy.enabled:
        # Before anything that makes pods: no task is ever reachable unprotected.
        plan.append(("NetworkPolicy", ctx["network_policy"]["name"], {"np": ctx["network_policy"]}))
    for vol in ctx["volumes"]:
        if vol["new"]:
            plan.append(("PersistentVolumeClaim", vol["claim_name"], {"v": vol}))
    roles = ctx["roles"]
    if spec.layout is Layout.JOBSET:
        # JobSet makes its own headless Service, Jobs and pods
        plan.append(("JobSet", spec.name, {}))
        return plan
    for role in ROLES:
        if role in roles:
            plan.append(("Service", roles[role]["resource_name"], {"r": roles[role]}))
    if ctx["gang"] is not None:
        plan.append(("PodGroup", ctx["gang"]["name"], {"g": ctx["gang"]}))
    # Every role is an Indexed Job, the PS included, so every pod has the cluster-side
    # deadline (activeDeadlineSeconds), which a StatefulSet cannot carry; the PS Job
    # comes first so the servers start before the tasks that connect to them.
    for role in sorted(roles, key=lambda r: (r != "ps", ROLES.index(r))):
        plan.append(("Job", roles[role]["resource_name"], {"r": roles[role]}))
    return plan


# -- public API -----------------------------------------------------------------------
def render(
    spec: TFClusterSpec,
    identity: RunIdentity | None = None,
    template_dir: str | Path | None = None,
    *,
    pod_security_level: PodSecurityLevel = POD_SECURITY_LEVEL,
) -> list[dict[str, Any]]:
    """Manifests of the whole cluster, in apply order (Namespace, NetworkPolicy, PVCs,
    Services, the PodGroup of a gang, the PS Job, the other Jobs).

    :param spec: the validated cluster spec.
    :param identity: the Airflow task instance that owns the cluster (labels and
        annotations); optional.
    :param template_dir: a directory whose files override the built-in templates of the
        same name (``job.yaml.j2``, ``_macros.yaml.j2``...).
    :param pod_security_level: the Pod Security level a per-training namespace enforces
        (its ``pod-security.kubernetes.io/*`` labels, set whatever the template says).
    :raises RenderError: a template produced something other than the expected object.
    """
    import yaml

    if not isinstance(spec, TFClusterSpec):
        raise TypeError(f"render() needs a TFClusterSpec, got {type(spec).__name__}")
    from jinja2 import TemplateError

    if template_dir is None:
        template_dir = spec.template_dir
    try:
        templates = _templates(tuple(template_dirs(template_dir)))
    except TemplateError as exc:  # a user's template that does not parse, or is missing
        raise RenderError(f"{_template_name(exc)}: {exc}") from None
    except (RecursionError, MemoryError, ArithmeticError, TypeError, ValueError) as exc:
        # Jinja folds constant expressions while compiling, e.g. 10 ** 100000.
        raise RenderError(f"a template failed to compile: {exc!r}"[:1000]) from None
    loader = yaml_loader()
    ctx = _context(spec, identity)
    ctx["pod_security_labels"] = naming.pod_security_labels(pod_security_level)
    patches = {role: role_rules(spec, role)["patches"] for role in spec.roles()}
    manifests = []
    for kind, name, extra in _plan(spec, ctx):
        try:
            text = templates[kind].render(c=ctx, **extra)
        except TemplateError as exc:
            raise RenderError(f"{TEMPLATES[kind]} failed to render {kind} {name}: {exc}") from None
        except (RecursionError, MemoryError, ArithmeticError, TypeError, ValueError) as exc:
            raise RenderError(f"{TEMPLATES[kind]} failed to render {kind} {name}: {exc!r}"[:1000]) from None
        if len(text) > MAX_OBJECT_BYTES:
            raise _too_big(kind, name, len(text))
        try:
            doc = yaml.load(text, Loader=loader)  # a safe loader
        except yaml.YAMLError as exc:
            raise RenderError(f"{TEMPLATES[kind]} rendered invalid YAML for {name}: {exc}") from None
        _check(doc, kind, name, spec.namespace_name)
        if kind == "Namespace":
            # not the template's to weaken: a user's namespace template keeps its other labels
            doc["metadata"]["labels"] = {
                **(doc["metadata"].get("labels") or {}),
                **ctx["pod_security_labels"],
            }
        patch_pod_templates(doc, patches)
        manifests.append(doc)
    if _uses_pod_rules(spec):
        from airflow_tfk.render.pod_schema import check_pod_rules

        check_pod_rules(spec, manifests)
    check_pod_semantics(spec, manifests)
    return manifests


def _uses_pod_rules(spec: TFClusterSpec) -> bool:
    return not spec.pod.is_empty() or any(not rs.pod.is_empty() for rs in spec.roles().values())


def _template_name(exc: Exception) -> str:
    return str(getattr(exc, "filename", None) or getattr(exc, "name", None) or "template")


def _too_big(kind: str, name: str, size: int) -> Exception:
    from airflow_tfk.core.errors import SpecError

    return SpecError(
        "spec",
        f"the {kind} {name} would be {size} bytes, over the {MAX_OBJECT_BYTES}-byte limit of a "
        "Kubernetes object (etcd stores at most 1.5 MiB); use fewer or shorter-named tasks, "
        "or a smaller env",
    )


def _check(doc: Any, kind: str, name: str, namespace: str) -> None:
    where = f"{TEMPLATES[kind]} (expected {kind} {name!r})"
    if not isinstance(doc, dict):
        raise RenderError(f"{where}: rendered {type(doc).__name__}, not a mapping")
    meta = doc.get("metadata")
    if doc.get("kind") != kind or not isinstance(meta, dict) or meta.get("name") != name:
        got_name = meta.get("name") if isinstance(meta, dict) else None
        raise RenderError(f"{where}: rendered {doc.get('kind')} {got_name!r}")
    if not isinstance(doc.get("apiVersion"), str):
        raise RenderError(f"{where}: has no apiVersion")
    if kind in _NAMESPACED and meta.get("namespace") != namespace:
        raise RenderError(f"{where}: namespace is {meta.get('namespace')!r}, not {namespace!r}")


def to_yaml_stream(manifests: Iterable[Mapping[str, Any]]) -> str:
    """A multi-document YAML stream for ``kubectl apply -f -``."""
    import yaml

    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return "".join(
        "---\n" + yaml.dump(dict(m), Dumper=dumper, sort_keys=False, allow_unicode=True, width=1 << 16)
        for m in manifests
    )
