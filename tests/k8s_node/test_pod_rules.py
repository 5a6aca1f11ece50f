"""Pods that follow the cluster's rules, on the real node: a training whose pods take a
Secret through ``envFrom``, a memory ``/dev/shm``, a sidecar, a priority class and a pod
template patch trains to success through TFTrainingOperator, and each setting is seen in
the running pod: in the pod read back from the API, and by the task itself, which writes
what it sees (the Secret's variable, the filesystem behind /dev/shm, the patched
/etc/hosts) to its log before it trains. No exec into the container.
"""

from __future__ import annotations

import time
import uuid

import pytest
from kubernetes import client

from . import _tfk
from . import node as nodemod

pytestmark = pytest.mark.k8s_node
SEES = "TFK_TEST_SEES"
# What the task reports before it trains: one line each, so a missing one is plain.
REPORT = (
    f'echo "{SEES} token=$TFK_TEST_TOKEN"; '
    f'echo "{SEES} shm=$(grep " /dev/shm " /proc/mounts)"; '
    f'echo "{SEES} hosts=$(grep tfk-patched /etc/hosts)"; '
    'exec "$@"'
)


def test_pod_rules_are_seen_in_the_running_pod(k8s_node, node_api, node_ns, node_conn, capfd) -> None:
    core = client.CoreV1Api(node_api)
    token = uuid.uuid4().hex
    core.create_namespaced_secret(
        node_ns, {"metadata": {"name": "tfk-test-secret"}, "stringData": {"TFK_TEST_TOKEN": token}}
    )
    priority = f"tfk-test-{uuid.uuid4().hex[:6]}"
    client.SchedulingV1Api(node_api).create_priority_class({"metadata": {"name": priority}, "value": 4242})
    ctx = _tfk.fresh_context()
    name = _tfk.cluster_name(ctx)
    spec_data = _tfk.spec(
        node_ns,
        "all_reduce",
        workers=1,
        command=["sh", "-c", REPORT, "sh", "python", "-m", "airflow_tfk.runtime.examples.digits_app"],
        args=["--tfk_steps", "10", "--tfk_checkpoint_every", "0"],
        pod={
            "env_from": [{"secretRef": {"name": "tfk-test-secret"}}],
            "shm_size": "64Mi",
            "priority_class": priority,
            "sidecars": [
                {
                    "name": "agent",
                    "image": nodemod.TRAIN_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", "echo agent-up; exec sleep 3600"],
                }
            ],
        },
    )
    spec_data["worker"]["pod"] = {
        "template_patch": {
            "spec": {"hostAliases": [{"ip": "10.1.2.3", "hostnames": ["tfk-patched.example"]}]}
        }
    }
    t0 = time.monotonic()
    try:
        result = _tfk.make_op(spec_data).execute(ctx)
    finally:
        client.SchedulingV1Api(node_api).delete_priority_class(priority)
    took = time.monotonic() - t0
    assert result["outcome"] == "succeeded", result
    capfd.readouterr()
    (pod,) = _tfk.pods(node_api, node_ns, name, "worker")
    # the pod as the API server admitted it
    assert pod.status.phase == "Succeeded"
    assert pod.spec.priority_class_name == priority and pod.spec.priority == 4242
    assert [h.hostnames for h in pod.spec.host_aliases] == [["tfk-patched.example"]]
    (agent,) = pod.status.init_container_statuses
    assert agent.name == "agent" and agent.started is not None, agent
    # the sidecar ran beside the task, and was stopped when it ended (else no Succeeded)
    agent_log = client.CoreV1Api(node_api).read_namespaced_pod_log(
        pod.metadata.name, node_ns, container="agent", _preload_content=False
    )
    assert "agent-up" in agent_log.data.decode()
    # ... and inside the container, as the task saw it
    seen = {
        line.split("=", 1)[0].split()[-1]: line.split("=", 1)[1]
        for line in _tfk.pod_log(node_api, node_ns, pod.metadata.name).splitlines()
        if line.startswith(SEES)
    }
    assert seen["token"] == token  # from the Secret, through envFrom
    assert seen["shm"].split()[:3] == ["tmpfs", "/dev/shm", "tmpfs"], seen["shm"]
    assert "size=65536k" in seen["shm"], seen["shm"]  # the memory emptyDir's sizeLimit
    assert seen["hosts"].split() == ["10.1.2.3", "tfk-patched.example"], seen["hosts"]
    # no credential in plain text: the Job names the Secret, never its value
    job = client.BatchV1Api(node_api).read_namespaced_job(f"{name}-worker", node_ns)
    assert token not in str(job.to_dict())
    print(f"pod rules on the real node (1 worker, 10 steps): {took:.1f}s")
