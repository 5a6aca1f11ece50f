"""Helpers for the provider's operators on the real node (the KWOK tier's helpers are reused
where they fit: connections, task contexts, label listings, waits)."""

from __future__ import annotations

import json
import re
import shlex
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from k8s_integration._tfk import cluster_name, create_claim, pods, task_context, wait_for  # noqa: F401
from k8s_integration._tfk import spec as kwok_spec
from kubernetes import client

from airflow_tfk.core import naming

from . import node as nodemod

CONN_ID = "tfk_k8s"
TF_CONFIG_MARK = "TFK_TEST_TF_CONFIG="


def recording(argv: list[str]) -> list[str]:
    """``argv`` behind a shell that first prints the task's TF_CONFIG as the process saw it
    (after the kubelet's $(VAR) expansion), so a test can read it from the real pod log."""
    return ["sh", "-c", f'echo "{TF_CONFIG_MARK}$TF_CONFIG"; exec "$@"', "sh", *argv]


def spec(namespace: str, mode: str, workers: int, ps: int = 0, **extra: Any) -> dict[str, Any]:
    """The KWOK tier's spec of the digits app, as a real pod runs it: the node's image (no
    registry), the TF_CONFIG recording, and TensorFlow held to one thread per pod."""
    on_node = {
        "image": nodemod.TRAIN_IMAGE,
        "image_pull_policy": "Never",
        "command": recording(["python", "-m", "airflow_tfk.runtime.examples.digits_app"]),
        "env": {"TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"},
    }
    return kwok_spec(namespace, mode, workers, ps, **{**on_node, **extra})


def fresh_context() -> dict[str, Any]:
    """The task context of a run of its own (a new run id, so a new cluster name)."""
    return task_context(f"manual__{uuid.uuid4().hex[:8]}")


def run_with_models_volume(local_volumes: Any, namespace: str) -> tuple[dict[str, Any], str, Path]:
    """A fresh run's context, its cluster name, and the host directory behind the local
    PersistentVolume its models claim (``<name>-models``) will bind to."""
    ctx = fresh_context()
    name = cluster_name(ctx)
    return ctx, name, local_volumes.provide(namespace, f"{name}-models")


def make_op(spec_data: dict[str, Any], **kwargs: Any):
    from airflow_tfk.operators.training import TFTrainingOperator

    # Real pods have real logs: progress is on (the KWOK tier turns it off).
    kwargs.setdefault("progress_interval", 2)
    kwargs.setdefault("kubernetes_conn_id", CONN_ID)
    return TFTrainingOperator(task_id="train", backend="kubernetes", cluster_spec=spec_data, **kwargs)


def pod_log(api: client.ApiClient, namespace: str, pod: str) -> str:
    # The raw body: this client version returns the repr of the bytes otherwise.
    resp = client.CoreV1Api(api).read_namespaced_pod_log(pod, namespace, _preload_content=False)
    return resp.data.decode()


def recorded_tf_configs(api: client.ApiClient, namespace: str, cluster: str) -> dict[str, dict[str, Any]]:
    """``{"worker-0": TF_CONFIG, ...}`` as printed by :func:`recording` in each pod's log."""
    out = {}
    for p in pods(api, namespace, cluster):
        role = p.metadata.labels[naming.LABEL_ROLE]
        text = pod_log(api, namespace, p.metadata.name)
        for line in text.splitlines():
            if line.startswith(TF_CONFIG_MARK):
                cfg = json.loads(line[len(TF_CONFIG_MARK) :])
                out[f"{role}-{cfg['task']['index']}"] = cfg
    return out


def local_tf_configs(spec_data: dict[str, Any], ctx: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The TF_CONFIG the local backend gives every task of the same spec (and the same
    Airflow identity), read from the tasks' own output. The command only prints it: the
    address map does not depend on the command."""
    from airflow_tfk.backends.local.backend import LocalBackend
    from airflow_tfk.core.naming import RunIdentity
    from airflow_tfk.spec.cluster import TFClusterSpec

    ti = ctx["ti"]
    identity = RunIdentity(ti.dag_id, ti.task_id, ti.run_id, ti.map_index)
    data = dict(spec_data, name=cluster_name(ctx), legacy_tf1_flags=False)
    data["command"] = ["sh", "-c", f'echo "{TF_CONFIG_MARK}$TF_CONFIG"']
    for role in ("worker", "ps", "chief"):
        if role in data:
            data[role] = {
                k: v for k, v in data[role].items() if k not in ("command", "args", "node_selector")
            }
    data.pop("args", None)
    data.pop("storage", None)
    local = TFClusterSpec.from_dict(data)
    with tempfile.TemporaryDirectory(prefix="tfk-node-local-") as root:
        backend = LocalBackend(root)
        ref = backend.create(local, identity)
        try:
            tasks = [(r, i) for r, s in local.roles().items() for i in range(s.replicas)]
            out: dict[str, dict[str, Any]] = {}

            def all_printed() -> bool:
                for role, i in tasks:
                    for line in backend.logs(ref, role, i).splitlines():
                        if line.startswith(TF_CONFIG_MARK):
                            out[f"{role}-{i}"] = json.loads(line[len(TF_CONFIG_MARK) :])
                return len(out) == len(tasks)

            wait_for("local TF_CONFIGs", all_printed, 60)
            return out
        finally:
            backend.delete(ref)


def by_position(cfg: dict[str, Any]) -> dict[str, Any]:
    """TF_CONFIG with each address replaced by its (role, position) - what must be equal
    between backends; the addresses themselves are DNS names on one, ports on the other."""
    return {
        "cluster": {
            role: [f"{role}[{i}]" for i in range(len(hosts))] for role, hosts in cfg["cluster"].items()
        },
        "task": cfg["task"],
    }


def dns_addresses_ok(cfg: dict[str, Any], cluster: str, namespace: str, port: int = 2222) -> bool:
    for role, hosts in cfg["cluster"].items():
        for i, h in enumerate(hosts):
            want = f"{cluster}-{role}-{i}.{cluster}-{role}.{namespace}.svc:{port}"
            if not re.fullmatch(
                re.escape(want) + r"|" + re.escape(want.replace(".svc:", ".svc.cluster.local:")), h
            ):
                return False
    return True


def progress_lines(text: str) -> list[str]:
    return re.findall(r"\[[a-z]+-\d+\] step \d+/\d+ \(\d+\.\d%\).*ETA.*", text)


def container_processes_gone(node: nodemod.Node, timeout: float = 60) -> float:
    """Seconds until no process is left in the node's pod cgroups (the pause sandboxes too)."""
    t0 = time.monotonic()
    wait_for("no container process on the node", lambda: not node.container_processes(), timeout)
    return time.monotonic() - t0


def shell(cmd: str) -> list[str]:
    return ["sh", "-c", cmd]


def py(code: str) -> list[str]:
    return ["python", "-c", code]


__all__ = ["shlex"]
