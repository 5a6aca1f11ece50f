"""An unmodified TF1 script of a 5,000-worker training starts on a real kubelet and sees
every host: the pod carries the compact cluster (a few hundred bytes, where the full flags
were 219 kB and Linux refuses one argument of 128 KiB), and the runtime's launcher runs the
script in its own process with the full ``--worker_hosts`` and ``TF_CONFIG``.

Only one worker pod is created - the last index, from the rendered worker Job's own pod
template - since what is proven is what one process receives, not 5,000 of them."""

from __future__ import annotations

import hashlib
import json
import time
import uuid

import pytest
from kubernetes import client

from airflow_tfk.core import naming
from airflow_tfk.protocol.exec_limits import MAX_STRING_CHARS
from airflow_tfk.render.manifests import render
from airflow_tfk.spec.cluster import TFClusterSpec

from . import _tfk
from . import node as nodemod

pytestmark = pytest.mark.k8s_node
SCRIPT = f"{nodemod.POD_SRC}/tests/runtime/tf1_hosts_script.py"
WORKERS, PS = 5000, 8
INDEX = WORKERS - 1


def _digest(hosts: list[str]) -> str:
    return hashlib.sha256(",".join(hosts).encode()).hexdigest()


def _worker_pod(spec: TFClusterSpec, index: int) -> dict:
    """One pod of the rendered worker Job, as the Job controller would make it for ``index``."""
    job = next(
        m
        for m in render(spec)
        if m["kind"] == "Job" and m["metadata"]["labels"][naming.LABEL_ROLE] == "worker"
    )
    template = job["spec"]["template"]
    meta = template["metadata"]
    annotations = {**meta.get("annotations", {}), "batch.kubernetes.io/job-completion-index": str(index)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job['metadata']['name']}-{index}",
            "namespace": spec.namespace_name,
            "labels": meta["labels"],
            "annotations": annotations,
        },
        "spec": {**template["spec"], "hostname": f"{job['metadata']['name']}-{index}"},
    }


def test_tf1_script_of_5000_workers_starts_and_sees_every_host(k8s_node, node_api, node_ns) -> None:
    name = f"tf1s-{uuid.uuid4().hex[:6]}"
    spec = TFClusterSpec.from_dict(
        {
            "name": name,
            "namespace": node_ns,
            "image": nodemod.TRAIN_IMAGE,
            "image_pull_policy": "Never",
            "mode": "between_graph",
            "legacy_tf1_flags": True,
            "command": ["python", SCRIPT],
            "args": ["--user_flag", "kept"],
            "worker": {"replicas": WORKERS},
            "ps": {"replicas": PS},
        }
    )
    pod = _worker_pod(spec, INDEX)
    container = pod["spec"]["containers"][0]
    pod_strings = [*container["command"], *container.get("args", [])]
    pod_strings += [f"{e['name']}={e.get('value', '')}" for e in container["env"]]
    print(
        f"worker pod of {WORKERS} workers: argv+env {sum(len(s) + 1 for s in pod_strings):,} bytes, "
        f"longest string {max(len(s) for s in pod_strings):,}"
    )
    assert max(len(s) for s in pod_strings) < 1000

    workers = [naming.task_address(name, "worker", i, node_ns, spec.port) for i in range(WORKERS)]
    ps = [naming.task_address(name, "ps", i, node_ns, spec.port) for i in range(PS)]
    flag = f"--worker_hosts={','.join(workers)}"
    assert len(flag) > MAX_STRING_CHARS, "the flag must be one no exec could carry"

    core = client.CoreV1Api(node_api)
    t0 = time.monotonic()
    core.create_namespaced_pod(node_ns, pod)
    core.create_namespaced_pod(node_ns, _literal_flags_pod(pod, ps, workers))
    pod_name = pod["metadata"]["name"]

    def finished() -> str | None:
        phase = core.read_namespaced_pod(pod_name, node_ns).status.phase
        return phase if phase in ("Succeeded", "Failed") else None

    phase = _tfk.wait_for("the worker pod finished", finished, 120, every=0.3)
    took = time.monotonic() - t0
    log = _tfk.pod_log(node_api, node_ns, pod_name)
    assert phase == "Succeeded", log[-3000:]
    line = next((x for x in log.splitlines() if x.startswith("TF1HOSTS ")), None)
    assert line is not None, log[-3000:]
    seen = json.loads(line.split(" ", 1)[1])

    assert (seen["workers"], seen["worker_sha"]) == (WORKERS, _digest(workers))
    assert (seen["ps"], seen["ps_sha"]) == (PS, _digest(ps))
    assert (seen["job_name"], seen["task_index"]) == ("worker", INDEX)
    assert seen["rest"] == ["--user_flag", "kept"] and seen["argv0"] == SCRIPT
    # TF_CONFIG of 5,000 workers too, in the script's process; its children still start.
    assert (seen["tf_config_workers"], seen["tf_config_worker_sha"]) == (WORKERS, _digest(workers))
    assert seen["tf_config_chars"] > MAX_STRING_CHARS
    assert seen["child_exit"] == 0
    assert "in this process" in log
    # The control: the same pod with the flags written into its args, as they were, does
    # not start on this kubelet - the limit the launcher works around is the node's own.
    refused = _tfk.wait_for(
        "the literal-flags pod refused", lambda: _start_error(core, node_ns), 60, every=0.3
    )
    assert "argument list too long" in refused, refused
    print(f"the same pod with the flags in its args: {refused[-160:]}")
    print(
        f"TF1 worker {INDEX} of {WORKERS}: Succeeded {took:.1f}s after create, saw {seen['workers']} "
        f"workers, {seen['ps']} PS, TF_CONFIG {seen['tf_config_chars']:,} characters"
    )


LITERAL = "literal"


def _literal_flags_pod(pod: dict, ps: list[str], workers: list[str]) -> dict:
    """The pod as it was rendered with the host flags in its args."""
    container = {**pod["spec"]["containers"][0]}
    container["command"] = ["python", "-m", "airflow_tfk.runtime.launch", "--", "python", SCRIPT]
    container["args"] = [
        "--user_flag",
        "kept",
        f"--ps_hosts={','.join(ps)}",
        f"--worker_hosts={','.join(workers)}",
        "--job_name=$(TFK_ROLE)",
        "--task_index=$(TFK_INDEX)",
    ]
    meta = {**pod["metadata"], "name": f"{pod['metadata']['name']}-{LITERAL}"}
    return {**pod, "metadata": meta, "spec": {**pod["spec"], "containers": [container]}}


def _start_error(core: client.CoreV1Api, namespace: str) -> str | None:
    """The message the kubelet gives for the literal-flags pod's container, once it has one."""
    pods = core.list_namespaced_pod(namespace).items
    mine = next((p for p in pods if p.metadata.name.endswith(f"-{LITERAL}")), None)
    for status in (mine.status.container_statuses or []) if mine is not None else []:
        for state in (status.state.terminated, status.state.waiting):
            if state is not None and state.message:
                return str(state.message)
    return None
