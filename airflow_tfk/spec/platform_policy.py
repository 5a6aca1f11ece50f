"""The platform policy: what a training's final pod templates may ask for, whatever its spec,
its training file, its Params or a template override say.

Only the platform team sets it (the provider's section of Airflow's configuration, read by
:meth:`PlatformPolicy.from_config`); no spec field, training file, Param or ``conf`` value
reaches it. It is checked on the FINAL pod templates, after every patch, sidecar and
override (:func:`check_manifests`), so no way of writing a pod gets around it:

- the Pod Security Standards at the policy's level, rule for rule as the API server's
  PodSecurity admission implements them (``k8s.io/pod-security-admission/policy``,
  v0.37.2: every ``check_*.go`` with its versions and overrides). :func:`pod_security_detail`
  gives the text the API server would refuse a pod with, so a test can compare the two;
- the platform's own rules beyond them: images from allowed registries, host paths (none
  by default), added capabilities, ``nodeName``, host ports, service-account tokens, what
  a ``template_patch`` may touch (:func:`check_template_patch`), and limits per training
  (pods, cpu and memory per pod, duration).

Every violation is returned, each naming its field (``worker.template.spec.containers[0].
securityContext.privileged``) and its rule (``pod-security/privileged``,
``platform/host-paths``); :func:`raise_for` turns them into one
:class:`~airflow_tfk.core.errors.SpecErrors`. Pure: the standard library and the project's
errors only (``airflow_tfk.core.errors`` becomes ``airflow_tfk.core.errors`` in the new layout).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from decimal import Decimal, InvalidOperation
from typing import Any

# ``airflow_tfk.core.errors`` in the new layout
from airflow_tfk.core.errors import SpecError, SpecErrors
from airflow_tfk.spec.pod_security import (
    LATEST_VERSION,
    ContainerView,
    Level,
    PodView,
    Violation,
    as_list,
    as_map,
    as_text,
    check_pod_security,
    host_ports,
    parse_version,
    pod_security_detail,
    pod_volumes,
)

__all__ = [
    "LATEST_VERSION",
    "Level",
    "PlatformPolicy",
    "PolicyConfigError",
    "Violation",
    "check_manifests",
    "check_pod_security",
    "check_pod_template",
    "check_template_patch",
    "namespace_labels",
    "pod_security_detail",
    "raise_for",
]

#: the pod-template label that names a training's role (``airflow_tfk.core.naming.LABEL_ROLE``;
#: a test holds the two equal: this module imports nothing of the project but its errors)
ROLE_LABEL = "tfk.airflow.apache.org/role"
NAMESPACE_LABEL = "pod-security.kubernetes.io/enforce"
NAMESPACE_VERSION_LABEL = "pod-security.kubernetes.io/enforce-version"


class PolicyConfigError(ValueError):
    """The platform policy's configuration is invalid; ``option`` names the setting."""

    def __init__(self, option: str, problem: str) -> None:
        self.option = option
        super().__init__(f"{option}: {problem}")


# -- the platform's rules beyond Pod Security ---------------------------------------------
_QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]{1,3})?$"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def parse_quantity(value: Any) -> Decimal:
    """A Kubernetes quantity (``500m``, ``2``, ``1.5Gi``, ``1e3``) as a number; ValueError
    for anything else."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"{value!r} is not a quantity")
    text = str(value) if not isinstance(value, str) else value
    m = _QUANTITY.match(text) if len(text) <= 64 else None
    if m is None:
        raise ValueError(f"{value!r} is not a quantity")
    try:
        number = Decimal(m.group(1))
    except InvalidOperation:
        raise ValueError(f"{value!r} is not a quantity") from None
    suffix = m.group(2) or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix[:1] in ("e", "E"):
        return number.scaleb(int(suffix[1:]))
    return number.scaleb(_DECIMAL[suffix])


def normalize_image(image: str) -> str:
    """The fully qualified name a container runtime pulls (``python:3`` is
    ``docker.io/library/python:3``, ``org/x`` is ``docker.io/org/x``)."""
    first, sep, _ = image.partition("/")
    if not sep:
        return f"docker.io/library/{image}"
    if "." in first or ":" in first or first == "localhost":
        return image
    return f"docker.io/{image}"


def _normalize_prefix(prefix: str) -> str:
    # a bare host (registry.internal, localhost:5000) stays a host; a bare word is a
    # Docker Hub library repository, as in an image's name
    first = prefix.split("/", 1)[0]
    if "." in first or ":" in first or first == "localhost":
        return prefix
    return f"docker.io/{prefix}" if "/" in prefix else f"docker.io/library/{prefix}"


def _image_allowed(image: str, prefixes: Sequence[str]) -> bool:
    name = normalize_image(image)
    for prefix in map(_normalize_prefix, prefixes):
        if prefix.endswith(("/", ":", "@")):
            if name.startswith(prefix):
                return True
            continue
        # a bare registry host ends at "/"; a repository also at its tag or digest
        ends = ("/", ":", "@") if "/" in prefix else ("/",)
        if name == prefix or any(name.startswith(prefix + e) for e in ends):
            return True
    return False


def normalize_host_path(path: str) -> str | None:
    """``path`` with empty and ``.`` components dropped (``//tfk//home/`` is
    ``/tfk/home``); None when it is not absolute or climbs with ``..``."""
    if not path.startswith("/"):
        return None
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        return None
    return "/" + "/".join(parts)


def _host_path_allowed(path: str, allowed: Sequence[str]) -> bool:
    norm = normalize_host_path(path)
    if norm is None:
        return False
    for root in allowed:
        base = normalize_host_path(root)
        if base is not None and (base == "/" or norm == base or norm.startswith(base + "/")):
            return True
    return False


def _capability(name: Any) -> str:
    # container runtimes take SYS_ADMIN, sys_admin and CAP_SYS_ADMIN alike
    text = as_text(name).upper()
    return text[4:] if text.startswith("CAP_") else text


def _platform_images(pod: PodView, policy: PlatformPolicy) -> Iterator[tuple[str, str, str]]:
    if not policy.allowed_image_prefixes:
        return
    for c in pod.containers:
        image = c.body.get("image")
        if not isinstance(image, str) or not _image_allowed(image, policy.allowed_image_prefixes):
            yield (
                f"{c.path}.image",
                "images",
                f"{image!r} is not from an allowed registry ({', '.join(policy.allowed_image_prefixes)})",
            )


def _platform_volumes(pod: PodView, policy: PlatformPolicy) -> Iterator[tuple[str, str, str]]:
    for path, v in pod_volumes(pod):
        host = v.get("hostPath")
        if host is not None:
            where = as_map(host).get("path")
            if not isinstance(where, str) or not _host_path_allowed(where, policy.allowed_host_paths):
                allowed = ", ".join(policy.allowed_host_paths) or "none"
                yield (
                    f"{path}.hostPath.path",
                    "host-paths",
                    f"{where!r} is not an allowed host path ({allowed})",
                )
        if policy.allow_service_account_token:
            continue
        for j, source in enumerate(as_list(as_map(v.get("projected")).get("sources"))):
            if as_map(source).get("serviceAccountToken") is not None:
                yield (
                    f"{path}.projected.sources[{j}].serviceAccountToken",
                    "service-account-token",
                    "a service-account token must not be mounted",
                )


def _platform_containers(pod: PodView, policy: PlatformPolicy) -> Iterator[tuple[str, str, str]]:
    allowed = {_capability(c) for c in policy.allowed_capabilities}
    for c in pod.containers:
        caps = as_map((c.security or {}).get("capabilities"))
        for j, cap in enumerate(as_list(caps.get("add"))):
            if _capability(cap) not in allowed:
                shown = ", ".join(policy.allowed_capabilities) or "none"
                yield (
                    f"{c.path}.securityContext.capabilities.add[{j}]",
                    "capabilities",
                    f"{as_text(cap)!r} is not a capability the platform allows adding ({shown})",
                )
    if not policy.allow_host_ports:
        for _, path, host in host_ports(pod):
            yield path, "host-ports", f"host port {host!r} is forbidden (use a Service)"


def _platform_pod(pod: PodView, policy: PlatformPolicy) -> Iterator[tuple[str, str, str]]:
    if not policy.allow_node_name and pod.spec.get("nodeName") not in (None, ""):
        yield (
            "spec.nodeName",
            "node-name",
            "is forbidden: pods go through the scheduler, the gang and the queue",
        )
    if not policy.allow_service_account_token and pod.spec.get("automountServiceAccountToken") is not False:
        yield (
            "spec.automountServiceAccountToken",
            "service-account-token",
            "must be false: a training's pods get no API token",
        )


def check_pod_template(
    template: Mapping[str, Any], policy: PlatformPolicy, *, where: str = ""
) -> list[Violation]:
    """Every violation of ``policy`` in one final pod template (or Pod): its Pod Security
    level, then the platform's pod rules."""
    out = check_pod_security(template, policy.pod_security_level, policy.pod_security_version, where=where)
    pod = PodView.of(template)
    prefix = f"{where}." if where else ""
    for rules in (_platform_pod, _platform_images, _platform_containers, _platform_volumes):
        out += [Violation(prefix + path, f"platform/{rule}", msg) for path, rule, msg in rules(pod, policy)]
    out += _pod_resources(pod, policy, prefix)
    return out


# -- resources per pod ---------------------------------------------------------------------
def _limit(c: ContainerView, resource: str) -> Decimal | None:
    value = as_map(as_map(c.body.get("resources")).get("limits")).get(resource)
    if value is None:
        return None
    try:
        return parse_quantity(value)
    except ValueError:
        return None


def _effective_limit(pod: PodView, resource: str, prefix: str) -> tuple[Decimal | None, str]:
    """The most the pod may use of ``resource`` (its pod-level limit, else KEP-753's
    effective value over regular containers, sidecars and init containers), and the field
    to name; None when some container has no limit."""
    pod_level = as_map(as_map(pod.spec.get("resources")).get("limits")).get(resource)
    if pod_level is not None:
        try:
            return parse_quantity(pod_level), f"{prefix}spec.resources.limits.{resource}"
        except ValueError:
            return None, f"{prefix}spec.resources.limits.{resource}"
    regular = Decimal(0)
    init_peak = Decimal(0)
    sidecars = Decimal(0)
    for c in pod.containers:
        if c.kind == "ephemeralContainers":
            continue
        value = _limit(c, resource)
        if value is None:
            return None, f"{prefix}{c.path}.resources.limits.{resource}"
        if c.kind == "containers":
            regular += value
        elif c.body.get("restartPolicy") == "Always":  # a native sidecar runs beside the rest
            sidecars += value
        else:
            init_peak = max(init_peak, value + sidecars)
    return max(regular + sidecars, init_peak), f"{prefix}spec.containers[*].resources.limits.{resource}"


def _pod_resources(pod: PodView, policy: PlatformPolicy, prefix: str) -> list[Violation]:
    out = []
    for resource, bound in (("cpu", policy.max_pod_cpu), ("memory", policy.max_pod_memory)):
        if bound is None:
            continue
        value, path = _effective_limit(pod, resource, prefix)
        if value is None:
            out.append(
                Violation(
                    path,
                    f"platform/max-pod-{resource}",
                    f"needs a valid limit: the platform allows {bound} per pod",
                )
            )
        elif value > parse_quantity(bound):
            out.append(
                Violation(
                    path, f"platform/max-pod-{resource}", f"the pod may use {value} {resource}, over {bound}"
                )
            )
    return out


# -- template patches ----------------------------------------------------------------------
#: what a template_patch may not touch unless the policy lets it: security contexts and
#: every field that widens what a pod may reach (host namespaces, identity, node, OS)
SECURITY_POD_FIELDS = (
    "securityContext",
    "hostPID",
    "hostIPC",
    "hostNetwork",
    "hostUsers",
    "shareProcessNamespace",
    "automountServiceAccountToken",
    "serviceAccountName",
    "serviceAccount",
    "nodeName",
    "os",
    "runtimeClassName",
    "volumes",
    "initContainers",
    "ephemeralContainers",
    "resources",
)
SECURITY_CONTAINER_FIELDS = ("securityContext", "ports", "resources")


def check_template_patch(patch: Mapping[str, Any], policy: PlatformPolicy, *, where: str) -> list[Violation]:
    """Every security setting ``patch`` (a strategic merge patch of a pod template) sets,
    removes or replaces, unless the policy lets a patch touch them. ``where`` is the
    patch's spec field, e.g. ``worker.pod.template_patch``."""
    if policy.template_patch_may_set_security:
        return []
    out = []
    spec = as_map(as_map(patch).get("spec"))
    rule = "platform/template-patch-security"
    for key in SECURITY_POD_FIELDS:
        if key in spec:
            out.append(
                Violation(f"{where}.spec.{key}", rule, "a template patch may not touch security settings")
            )
    for i, c in enumerate(as_list(spec.get("containers"))):
        for key in SECURITY_CONTAINER_FIELDS:
            if key in as_map(c):
                out.append(
                    Violation(
                        f"{where}.spec.containers[{i}].{key}",
                        rule,
                        "a template patch may not touch security settings",
                    )
                )
    return out


# -- whole trainings -----------------------------------------------------------------------
@dataclass(frozen=True)
class _Workload:
    where: str  # the role (a training's Job) or Kind/name
    job: Mapping[str, Any] | None  # a Job's spec, for its pods and duration
    template: Mapping[str, Any]
    copies: int  # Jobs of this template (a JobSet's replicatedJob replicas)


def _role(template: Mapping[str, Any], fallback: str) -> str:
    role = as_map(as_map(template.get("metadata")).get("labels")).get(ROLE_LABEL)
    return role if isinstance(role, str) and role else fallback


def _workloads(doc: Mapping[str, Any]) -> Iterator[_Workload]:
    kind, spec = as_text(doc.get("kind")), as_map(doc.get("spec"))
    name = f"{kind}/{as_text(as_map(doc.get('metadata')).get('name'))}"
    if kind == "Job":
        template = as_map(spec.get("template"))
        yield _Workload(_role(template, f"{name}.spec"), spec, template, 1)
    elif kind == "JobSet":
        for i, rj in enumerate(as_list(spec.get("replicatedJobs"))):
            job = as_map(as_map(as_map(rj).get("template")).get("spec"))
            template = as_map(job.get("template"))
            copies = as_map(rj).get("replicas", 1)
            yield _Workload(
                _role(template, f"{name}.spec.replicatedJobs[{i}].template.spec"),
                job,
                template,
                copies if type(copies) is int else 1,
            )
    elif kind == "CronJob":
        job = as_map(as_map(spec.get("jobTemplate")).get("spec"))
        yield _Workload(f"{name}.spec.jobTemplate.spec", job, as_map(job.get("template")), 1)
    elif kind in ("Deployment", "StatefulSet", "ReplicaSet", "DaemonSet", "ReplicationController"):
        yield _Workload(f"{name}.spec", None, as_map(spec.get("template")), 1)
    elif kind in ("Pod", "PodTemplate"):
        yield _Workload(name, None, doc if kind == "Pod" else as_map(doc.get("template")), 1)


def _pods_of(job: Mapping[str, Any]) -> int:
    counts = [v for v in (job.get("parallelism"), job.get("completions")) if type(v) is int]
    return max(counts) if counts else 1


def _duration(w: _Workload, policy: PlatformPolicy) -> list[Violation]:
    if policy.max_duration_seconds is None or w.job is None:
        return []
    deadline = w.job.get("activeDeadlineSeconds")
    if type(deadline) is int and 0 < deadline <= policy.max_duration_seconds:
        return []
    return [
        Violation(
            f"{w.where}.activeDeadlineSeconds",
            "platform/max-duration",
            f"must be set and at most {policy.max_duration_seconds} s "
            f"(set max_duration_seconds); got {deadline!r}",
        )
    ]


def check_manifests(manifests: Sequence[Mapping[str, Any]], policy: PlatformPolicy) -> list[Violation]:
    """Every violation of ``policy`` in a training's rendered manifests (after every patch):
    each pod template of each Job, JobSet or other workload, and the training's limits
    (pods in all, duration). The fields are named from the role
    (``worker.template.spec...``, ``worker.activeDeadlineSeconds``) or the object
    (``Deployment/x.spec.template.spec...``)."""
    out: list[Violation] = []
    pods: list[tuple[str, int]] = []
    for doc in manifests:
        for w in _workloads(as_map(doc)):
            where = f"{w.where}.template" if as_text(doc.get("kind")) not in ("Pod",) else w.where
            out += check_pod_template(w.template, policy, where=where)
            out += _duration(w, policy)
            if w.job is not None and as_text(doc.get("kind")) in ("Job", "JobSet"):
                pods.append((w.where, _pods_of(w.job) * w.copies))
    total = sum(n for _, n in pods)
    if policy.max_replicas is not None and total > policy.max_replicas:
        each = ", ".join(f"{role} {n}" for role, n in pods)
        out.append(
            Violation(
                "replicas",
                "platform/max-replicas",
                f"{total} pods in all ({each}), over {policy.max_replicas}",
            )
        )
    return out


def raise_for(violations: Sequence[Violation]) -> None:
    """Raise every violation at once, as :class:`SpecErrors` (the CLI and the operators
    print each with its field); nothing when there is none."""
    if violations:
        raise SpecErrors([SpecError(v.field, f"{v.message} [platform policy: {v.rule}]") for v in violations])


def namespace_labels(policy: PlatformPolicy) -> dict[str, str]:
    """The labels a namespace the provider creates carries, so the API server enforces the
    policy's level even on a cluster without a Pod Security default."""
    return {
        NAMESPACE_LABEL: policy.pod_security_level.value,
        NAMESPACE_VERSION_LABEL: policy.pod_security_version,
    }


# -- the policy ----------------------------------------------------------------------------
def _quantity_or_none(value: str | None, option: str) -> None:
    if value is None:
        return
    try:
        if parse_quantity(value) <= 0:
            raise ValueError
    except ValueError:
        raise PolicyConfigError(
            option, f"must be a positive Kubernetes quantity such as 8 or 32Gi (got {value!r})"
        ) from None


@dataclass(frozen=True)
class PlatformPolicy:
    """What every training's pods must meet. Set by the platform team only: built by
    :meth:`from_config` from the provider's Airflow configuration section, never from a
    spec, a training file, Params or ``conf``.

    :param pod_security_level: the Pod Security Standard every pod meets (``restricted``).
    :param pod_security_version: its version, ``latest`` or ``v1.N`` (as the namespace label).
    :param allowed_image_prefixes: registries or repositories images must come from,
        compared with the fully qualified name (``docker.io/library/python:3``); empty: any.
    :param allowed_host_paths: host directories a ``hostPath`` volume may name (and what is
        under them); empty: none. Pod Security baseline and restricted refuse every
        ``hostPath`` anyway: this matters at ``privileged`` only.
    :param allowed_capabilities: capabilities a container may add; empty: none.
    :param allow_node_name: whether a pod may name its node (skipping the scheduler).
    :param allow_host_ports: whether a container may take a port of its node.
    :param allow_service_account_token: whether a pod may mount an API token
        (``automountServiceAccountToken``, projected ``serviceAccountToken``).
    :param template_patch_may_set_security: whether a ``template_patch`` may touch the
        security settings (:data:`SECURITY_POD_FIELDS`, :data:`SECURITY_CONTAINER_FIELDS`).
    :param max_replicas: pods of one training in all; None: no bound.
    :param max_pod_cpu: the cpu limit of one pod (every container's, sidecars and init
        containers included); None: no bound. With a bound, every container needs a limit.
    :param max_pod_memory: the same for memory.
    :param max_duration_seconds: the longest a training may run (its Jobs'
        ``activeDeadlineSeconds``, which must then be set); None: no bound.
    """

    pod_security_level: Level = Level.RESTRICTED
    pod_security_version: str = "latest"
    allowed_image_prefixes: tuple[str, ...] = ()
    allowed_host_paths: tuple[str, ...] = ()
    allowed_capabilities: tuple[str, ...] = ()
    allow_node_name: bool = False
    allow_host_ports: bool = False
    allow_service_account_token: bool = False
    template_patch_may_set_security: bool = False
    max_replicas: int | None = None
    max_pod_cpu: str | None = None
    max_pod_memory: str | None = None
    max_duration_seconds: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.pod_security_level, Level):
            raise PolicyConfigError("pod_security_level", "must be a Level")
        try:
            parse_version(self.pod_security_version)
        except (TypeError, ValueError) as exc:
            raise PolicyConfigError("pod_security_version", str(exc)) from None
        for name in ("allowed_image_prefixes", "allowed_host_paths", "allowed_capabilities"):
            value = getattr(self, name)
            if not isinstance(value, tuple) or not all(isinstance(v, str) and v for v in value):
                raise PolicyConfigError(name, "must be a tuple of non-empty strings")
        for path in self.allowed_host_paths:
            if normalize_host_path(path) is None:
                raise PolicyConfigError(
                    "allowed_host_paths", f"{path!r} is not an absolute path without '..'"
                )
        for name in (
            "allow_node_name",
            "allow_host_ports",
            "allow_service_account_token",
            "template_patch_may_set_security",
        ):
            if not isinstance(getattr(self, name), bool):
                raise PolicyConfigError(name, "must be true or false")
        for name in ("max_replicas", "max_duration_seconds"):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value <= 0):
                raise PolicyConfigError(name, f"must be a positive integer (got {value!r})")
        _quantity_or_none(self.max_pod_cpu, "max_pod_cpu")
        _quantity_or_none(self.max_pod_memory, "max_pod_memory")

    @classmethod
    def from_config(cls, section: Mapping[str, Any], *, name: str = "tfk_policy") -> PlatformPolicy:
        """The policy of a configuration section (``conf.getsection(name)``, or any mapping
        of option to text): lists comma-separated, booleans ``true``/``false``, an empty
        value the default. An option this class does not know is an error (a typo would
        otherwise leave the platform unguarded)."""
        known = {f.name: f for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, raw in section.items():
            option = f"[{name}] {key}"
            if key not in known:
                raise PolicyConfigError(
                    option, f"is not an option of the platform policy ({', '.join(known)})"
                )
            if raw is None or (isinstance(raw, str) and not raw.strip()):
                continue
            values[key] = _option(key, raw, option)
        try:
            return cls(**values)
        except PolicyConfigError as exc:
            raise PolicyConfigError(f"[{name}] {exc.option}", str(exc).split(": ", 1)[1]) from None


def _option(key: str, raw: Any, option: str) -> Any:
    text = raw.strip() if isinstance(raw, str) else raw
    if key == "pod_security_level":
        try:
            return Level(str(text).lower())
        except ValueError:
            raise PolicyConfigError(option, "must be privileged, baseline or restricted") from None
    if key == "pod_security_version":
        return str(text)
    if key.startswith("allowed_"):
        items = text if isinstance(text, (list, tuple)) else str(text).split(",")
        return tuple(str(i).strip() for i in items if str(i).strip())
    if key.startswith(("allow_", "template_patch_")):
        if isinstance(text, bool):
            return text
        if str(text).lower() in ("true", "false"):
            return str(text).lower() == "true"
        raise PolicyConfigError(option, "must be true or false")
    if key in ("max_replicas", "max_duration_seconds"):
        if isinstance(text, int) and not isinstance(text, bool):
            return text
        if isinstance(text, str) and text.isdigit():
            return int(text)
        raise PolicyConfigError(option, f"must be a positive integer (got {raw!r})")
    return str(text)
