"""The local backend plays the kubelet: each task's argv and environment come from the
pod the Kubernetes backend would create (``render``), not from a second copy of that logic.

For each role the rendered pod template gives the container's ``command``, ``args`` and
``env``; this module expands them as the kubelet does - dependent ``$(VAR)`` references
to variables defined earlier, ``$$`` to ``$``, unknown references left as they are, the
downward-API task index - after putting in what differs on one machine: the address map
(127.0.0.1 ports instead of DNS names, also inside the legacy ``--ps_hosts`` flags) and
the volume directories instead of the mount paths, and the task's own scratch
directory instead of the pod's scratch ``emptyDir`` (``$TMPDIR``).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from typing import Any

from airflow_tfk.backends.local.host import _PYTHONS
from airflow_tfk.core import naming
from airflow_tfk.core.errors import SpecError
from airflow_tfk.spec.admission import Layout
from airflow_tfk.spec.cluster import TFClusterSpec
from airflow_tfk.spec.pod_patch import MAIN_CONTAINER

_REF = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")
_VOLUME_ENV = {"TFK_DATA_DIR": "data", "TFK_LOG_DIR": "logs", "TFK_MODEL_DIR": "models"}
# The emptyDir every rendered pod mounts as its $TMPDIR (templates/_macros.yaml.j2). Its
# mount path does not exist on this machine: left as it is, Python's tempfile would fall
# back to the shared /tmp, where TensorFlow's autograph files of a killed task stay for good.
SCRATCH_VOLUME = "tfk-scratch"
# The emptyDir a pod's $HOME points at (its root filesystem is read-only). A local task
# keeps the user's own home instead: the caches there (Keras datasets, pip) are the point.
HOME_VOLUME = "tfk-home"


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion of one string (``k8s.io/kubernetes/third_party/
    forked/golang/expansion``): ``$$`` is ``$``; ``$(NAME)`` of a defined NAME is its value;
    anything else is left as written."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _REF.sub(sub, text)


def container_env(env_list: list[dict[str, Any]], fields: Mapping[str, str]) -> dict[str, str]:
    """A container's environment as the kubelet builds it, in order: each value may use
    the variables defined before it; ``valueFrom.fieldRef`` reads ``fields``."""
    out: dict[str, str] = {}
    for item in env_list:
        if "value" in item:
            out[item["name"]] = expand(str(item["value"]), out)
        else:
            path = item["valueFrom"]["fieldRef"]["fieldPath"]
            out[item["name"]] = fields[path]
    return out


def pod_fields(index: int) -> dict[str, str]:
    """The downward-API fields the templates read for the task index (a Job's pods carry both)."""
    return {
        "metadata.annotations['batch.kubernetes.io/job-completion-index']": str(index),
    }


def role_containers(manifests: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """role -> the container of its pod template (the Jobs, or the JobSet's replicated Jobs)."""
    templates = []
    for m in manifests:
        if m["kind"] == "Job":
            templates.append(m["spec"]["template"])
        elif m["kind"] == "JobSet":
            templates += [rj["template"]["spec"]["template"] for rj in m["spec"]["replicatedJobs"]]
    return {
        t["metadata"]["labels"][naming.LABEL_ROLE]: next(
            c for c in t["spec"]["containers"] if c["name"] == MAIN_CONTAINER
        )
        for t in templates
    }


def refuse_cluster_references(spec: TFClusterSpec) -> None:
    """The pod rules a local task cannot honour without being wrong: its environment from
    Secrets and ConfigMaps, which exist only in a Kubernetes cluster (a task started without
    them would fail later, and less clearly). Scheduling rules, extra volumes, sidecars and
    init containers concern the cluster's pods alone; here they change nothing."""
    sections = [("pod", spec.pod), *((f"{r}.pod", rs.pod) for r, rs in spec.roles().items())]
    for where, rules in sections:
        for field in ("env_from", "env_value_from"):
            if getattr(rules, field):
                raise SpecError(
                    f"{where}.{field}",
                    "reads Secrets or ConfigMaps, which the local backend does not have: "
                    "use the kubernetes backend, or env for a local run",
                )


def local_setup(
    spec: TFClusterSpec,
    container: dict[str, Any],
    index: int,
    local_cluster: Mapping[str, list[str]],
    volumes: Mapping[str, str],
    scratch: str,
    metrics_port: int | None = None,
) -> tuple[list[str], dict[str, str]]:
    """(argv, env) of task ``index`` of the role whose rendered ``container`` is given,
    on this machine: the pod's, with local addresses and volume directories,
    ``scratch`` (the task's own directory) wherever the pod names its scratch mount, and
    the task's own ``metrics_port`` instead of the one every pod shares."""
    jobset = spec.layout is Layout.JOBSET
    kube_addresses = {
        naming.task_address(spec.name, role, i, spec.namespace_name, spec.port, jobset): address
        for role, addresses in local_cluster.items()
        for i, address in enumerate(addresses)
    }
    scratch_mounts = [
        m["mountPath"] for m in container.get("volumeMounts") or [] if m.get("name") == SCRATCH_VOLUME
    ]
    home_mounts = {
        m["mountPath"] for m in container.get("volumeMounts") or [] if m.get("name") == HOME_VOLUME
    }
    env_list = []
    for item in container.get("env") or []:
        name = item["name"]
        if name == "HOME" and item.get("value") in home_mounts:
            continue
        if name == "TFK_CLUSTER":
            item = {"name": name, "value": json.dumps(dict(local_cluster), separators=(",", ":"))}
        elif name == "TFK_METRICS_PORT" and metrics_port is not None:
            item = {"name": name, "value": str(metrics_port)}
        elif name in _VOLUME_ENV:
            if _VOLUME_ENV[name] not in volumes:
                continue
            item = {"name": name, "value": volumes[_VOLUME_ENV[name]]}
        elif "value" in item:
            item = {"name": name, "value": _remount(str(item["value"]), scratch_mounts, scratch)}
        env_list.append(item)
    env = container_env(env_list, pod_fields(index))
    argv = [
        expand(_localise(a, kube_addresses), env)
        for a in [*container["command"], *(container.get("args") or [])]
    ]
    return argv, env


_LAUNCH = ["-m", "airflow_tfk.runtime.launch"]


def local_argv(pod_argv: list[str], executable: str, launched: bool) -> list[str]:
    """The pod's argv with its executables as this machine resolved them: ``executable``
    for the spec's command; when the provider put the command behind the runtime's
    launcher (``launched``: ``<python> -m airflow_tfk.runtime.launch -- CMD ...``), this
    interpreter runs the launcher (it has airflow_tfk) and ``executable`` is CMD's. In a
    launcher command the author wrote, a bare ``python`` after ``--`` is this interpreter
    too, as it is before it."""
    if launched:
        cut = pod_argv.index("--") + 1  # the launcher's own words end at the first "--"
        return [sys.executable, *pod_argv[1:cut], executable, *pod_argv[cut + 1 :]]
    argv = [executable, *pod_argv[1:]]
    if argv[1:3] == _LAUNCH and "--" in argv:
        inner = argv.index("--") + 1
        if inner < len(argv) and argv[inner] in _PYTHONS:
            argv[inner] = sys.executable
    return argv


def _remount(value: str, mount_paths: list[str], local: str) -> str:
    """``value`` with a leading mount path (the path itself or a path under it) replaced
    by ``local``, the directory that stands in for that mount here."""
    for path in mount_paths:
        if value == path or value.startswith(path.rstrip("/") + "/"):
            return local + value[len(path.rstrip("/")) :]
    return value


def _localise(arg: str, addresses: Mapping[str, str]) -> str:
    """The legacy ``--ps_hosts=a,b`` flags name DNS addresses: use the local ones."""
    if not arg.startswith(("--ps_hosts=", "--worker_hosts=")):
        return arg
    flag, _, hosts = arg.partition("=")
    return f"{flag}={','.join(addresses.get(h, h) for h in hosts.split(','))}"
