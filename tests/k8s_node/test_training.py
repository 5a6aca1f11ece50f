"""Real TensorFlow in real pods on the real node, through TFTrainingOperator.

Each mode trains, its pods find each other by headless-Service names through CoreDNS, and
the TF_CONFIG each process saw (after the kubelet expanded ``$(TFK_CLUSTER)`` and the
downward-API index) equals, address for address by position, what the local backend gives
the same task of the same spec.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import uuid

import pytest
from airflow.sdk.exceptions import TaskDeferred
from kubernetes import client

from airflow_tfk.core import naming
from tests import prometheus_text

from . import _scrape, _tfk
from . import node as nodemod

pytestmark = pytest.mark.k8s_node
TF1_SCRIPT = f"{nodemod.POD_SRC}/airflow_tfk/runtime/examples/tf1_between_graph.py"


def _assert_tf_configs(node_api, ns: str, spec_data: dict, ctx: dict, want_tasks: set[str]) -> None:
    name = _tfk.cluster_name(ctx)
    k8s = _tfk.recorded_tf_configs(node_api, ns, name)
    assert set(k8s) >= want_tasks, k8s
    local = _tfk.local_tf_configs(spec_data, ctx)
    for task in want_tasks:
        assert _tfk.by_position(k8s[task]) == _tfk.by_position(local[task]), task
        assert _tfk.dns_addresses_ok(k8s[task], name, ns), k8s[task]


def test_all_reduce_trains_in_real_pods(k8s_node, node_api, node_ns, node_conn, capfd) -> None:
    """...and Prometheus scrapes it: a scraper pod with the labels ``metrics_from`` admits
    reads each worker's metrics port through the cluster's NetworkPolicy, in the text
    format, with a rising step counter."""
    ctx = _tfk.fresh_context()
    name = _tfk.cluster_name(ctx)
    spec_data = _tfk.spec(
        node_ns,
        "all_reduce",
        workers=2,
        args=["--tfk_steps", "60", "--tfk_checkpoint_every", "0"],
        metrics_port=METRICS_PORT,
        network_policy={"metrics_from": [{"pod_labels": SCRAPER}]},
    )
    hosts = _scrape.targets(name, node_ns, "worker", 2)
    scraper = _scrape.start(node_api, node_ns, SCRAPER, hosts, METRICS_PORT, 300)
    outsider = _scrape.start(node_api, node_ns, {"app": "not-admitted"}, hosts, METRICS_PORT, 300)
    t0 = time.monotonic()
    result = _tfk.make_op(spec_data).execute(ctx)
    took = time.monotonic() - t0
    assert result["outcome"] == "succeeded", result
    out = capfd.readouterr().out
    # Progress (step/total/%/ETA) in the task log comes from the pods' real logs.
    assert _tfk.progress_lines(out), out[-3000:]
    _assert_tf_configs(node_api, node_ns, spec_data, ctx, {"worker-0", "worker-1"})
    for p in _tfk.pods(node_api, node_ns, name):
        assert p.status.phase == "Succeeded", (p.metadata.name, p.status.phase)
        assert p.spec.node_name == nodemod.NODE_NAME
    print(f"all_reduce 2 workers, 60 steps on the real node: {took:.1f}s")
    t1 = time.monotonic()
    _assert_scraped(node_api, node_ns, name, scraper, outsider, hosts)
    print(f"scrapes read and judged {time.monotonic() - t1:.1f}s after the training")


METRICS_PORT = 9090
SCRAPER = {"app.kubernetes.io/name": "prometheus"}


def _assert_scraped(node_api, ns: str, name: str, scraper: str, outsider: str, hosts: list[str]) -> None:
    got = _scrape.scrapes(node_api, ns, scraper)
    for i, host in enumerate(hosts):
        seen = [s for s in got if s["target"] == host and "body" in s]
        assert all(s["type"].startswith("text/plain; version=0.0.4") for s in seen), seen
        steps = []
        for s in seen:
            families = prometheus_text.parse(s["body"])  # strict: a bad line fails here
            assert families["tfk_training_steps_total"].type == "counter"
            steps.append(
                prometheus_text.value(
                    families, "tfk_training_steps_total", role="worker", index=str(i), cluster=name
                )
            )
        # Scraped at least twice while training, and the counter rose between scrapes.
        errors = [s for s in got if s["target"] == host and "error" in s]
        assert len(steps) >= 2 and steps == sorted(steps) and steps[-1] > steps[0], (host, steps, errors)
        print(f"scraped {host}: steps {steps}")

    # The policy on paper: the metrics port admits the scraper's labels and no other pod;
    # the TF port stays closed to the scraper.
    policy = _scrape.cluster_policy(node_api, ns, name)
    worker = _tfk.pods(node_api, ns, name, "worker")[0].metadata.labels
    assert _scrape.admits(policy, worker, SCRAPER, True, METRICS_PORT)
    assert not _scrape.admits(policy, worker, {"app": "not-admitted"}, True, METRICS_PORT)
    assert not _scrape.admits(policy, worker, SCRAPER, True, 2222)
    # This node has no network-policy plugin (CNI bridge): the pod the policy does not
    # admit gets in too. Said, not hidden; where a plugin enforces it, nothing gets through.
    leaked = [s for s in _scrape.scrapes(node_api, ns, outsider) if "body" in s]
    print(
        "NetworkPolicy not enforced on this node: a pod it does not admit scraped too"
        if leaked
        else "NetworkPolicy enforced: the pod it does not admit got nothing"
    )


def test_between_graph_tf1_script_with_legacy_flags_and_a_late_ps(
    k8s_node, node_api, node_ns, node_conn, capfd
) -> None:
    """An unmodified TF1 script that reads only --ps_hosts --worker_hosts --job_name
    --task_index, at the issue's shape (3 workers + 2 PS; bench/bench_tf1_node.py makes 5
    runs); the PS pods are scheduled only after every worker pod runs (a node label they
    wait for), so the workers must find them by name once they appear."""
    ctx = _tfk.fresh_context()
    name = _tfk.cluster_name(ctx)
    gate = f"tfk.test/ps-{uuid.uuid4().hex[:6]}"
    spec_data = _tfk.spec(
        node_ns,
        "between_graph",
        workers=3,
        ps=2,
        # The bare command a TF1 user has (behind the test's TF_CONFIG recorder): the
        # provider appends the legacy flags and puts it behind the launcher, whose shim
        # gives the sessions device filters. Before, this hung: one worker waited forever
        # for a peer that had exited.
        command=_tfk.recording(["python", TF1_SCRIPT]),
        legacy_tf1_flags=True,
        args=["--train_steps", "120", "--progress_every", "20"],
    )
    spec_data["ps"] = {"replicas": 2, "node_selector": {gate: "true"}}
    core = client.CoreV1Api(node_api)
    released: dict[str, float] = {}

    def release_ps_when_workers_run() -> None:
        def workers_running() -> bool:
            ws = _tfk.pods(node_api, node_ns, name, "worker")
            return len(ws) == 3 and all(p.status.phase == "Running" for p in ws)

        _tfk.wait_for("every worker pod Running", workers_running, 240, every=0.5)
        ps = _tfk.pods(node_api, node_ns, name, "ps")
        assert len(ps) == 2 and all(p.status.phase == "Pending" for p in ps), "the PS pods wait for the label"
        core.patch_node(nodemod.NODE_NAME, {"metadata": {"labels": {gate: "true"}}})
        released["at"] = time.monotonic()

    t = threading.Thread(target=release_ps_when_workers_run, daemon=True)
    t.start()
    try:
        result = _tfk.make_op(spec_data).execute(ctx)
    finally:
        t.join(5)
        core.patch_node(nodemod.NODE_NAME, {"metadata": {"labels": {gate: None}}})
    assert "at" in released, "the PS was never released"
    assert result["outcome"] == "succeeded", result
    out = capfd.readouterr().out
    assert _tfk.progress_lines(out), out[-3000:]
    # The PS log was copied into the task log before the PS was deleted.
    assert "----- log of ps-0" in out
    ps_part = out.split("----- log of ps-0", 1)[1].split("----- end of ps-0", 1)[0]
    assert _tfk.TF_CONFIG_MARK in ps_part
    # ... and the PS is gone (its Job deleted), the workers' Job stays.
    _tfk.wait_for("PS pods deleted", lambda: not _tfk.pods(node_api, node_ns, name, naming_ps()), 60)
    _assert_tf_configs(node_api, node_ns, spec_data, ctx, {"worker-0", "worker-1", "worker-2"})
    for w in _tfk.pods(node_api, node_ns, name, "worker"):
        assert w.spec.containers[0].command[:4] == ["python", "-m", "airflow_tfk.runtime.launch", "--"]
        log = _tfk.pod_log(node_api, node_ns, w.metadata.name)
        assert '"tfk": "metrics"' in log or "accuracy" in log, log[-2000:]


def _execute(op, ctx: dict) -> dict:
    """``op.execute``; when it defers, the trigger runs to its event (rebuilt from its
    serialized form, as the triggerer does) and ``execute_complete`` finishes."""
    try:
        return op.execute(ctx)
    except TaskDeferred as deferred:
        _path, kwargs = deferred.trigger.serialize()
        trigger = type(deferred.trigger)(**kwargs)

        async def first_event() -> dict:
            async for event in trigger.run():
                return event.payload
            raise AssertionError("the trigger ended without an event")

        event = asyncio.run(first_event())
        return getattr(op, deferred.method_name)(ctx, event, **(deferred.kwargs or {}))


def naming_ps() -> str:
    return "ps"


@pytest.mark.parametrize("deferrable", [False, True], ids=["blocking", "deferred"])
def test_parameter_server_trainingapp_with_shared_models_volume(
    k8s_node, node_api, node_ns, node_conn, local_volumes, capfd, caplog, deferrable
) -> None:
    """TF2 ParameterServerStrategy: the chief's checkpoints are written by the PS, into the
    models claim both mount (a local PersistentVolume); the SavedModel lands there too.

    The pods set TF_NUM_INTEROP_THREADS=1 (:func:`_tfk.spec`): this hung after step 0
    until the runtime gave parameter_server servers two inter-op threads."""
    ctx, name, models = _tfk.run_with_models_volume(local_volumes, node_ns)
    spec_data = _tfk.spec(
        node_ns,
        "parameter_server",
        workers=1,
        ps=1,
        args=["--tfk_steps", "30", "--tfk_checkpoint_every", "10"],
        storage={"models": {"size": "1Gi", "storage_class": "tfk-local"}},
    )
    for role in ("chief", "ps", "worker"):  # a request, so the usage counts core-seconds
        spec_data[role] = {**spec_data.get(role, {}), "resources": {"cpu": "100m"}}
    caplog.set_level(logging.INFO)  # the trigger reports progress through its logger
    t0 = time.time()
    result = _execute(_tfk.make_op(spec_data, cleanup="all", deferrable=deferrable), ctx)
    wall = time.time() - t0
    assert result["outcome"] == "succeeded", result
    # What the pods held, from the kubelet's container times (deferred: read by the
    # triggerer before it deleted the PS): every task, each for at most the whole run.
    usage = result["usage"]
    assert usage["tasks"] >= 3 and set(usage["per_role"]) == {"chief", "ps", "worker"}, usage
    for role, figures in usage["per_role"].items():
        assert 0 < figures["seconds"] <= wall + 1, (role, figures, wall)
        assert figures["core_seconds"] == pytest.approx(figures["seconds"] * 0.1, abs=0.01)
    out = capfd.readouterr().out + caplog.text
    assert _tfk.progress_lines(out), out[-3000:]
    # The PS log, copied into the task log before the delete, shows the raised pool.
    assert "----- log of ps-0" in out, out[-3000:]
    ps_part = out.split("----- log of ps-0", 1)[1].split("----- end of ps-0", 1)[0]
    assert "2 inter-op threads for the server" in ps_part, ps_part[-2000:]
    # ... and the TF_CONFIG the PS saw, as the kubelet expanded it, is the local backend's.
    seen = [ln.split(_tfk.TF_CONFIG_MARK, 1)[1] for ln in ps_part.splitlines() if _tfk.TF_CONFIG_MARK in ln]
    assert seen, ps_part[-2000:]
    ps_cfg = json.loads(seen[0])
    local = _tfk.local_tf_configs(spec_data, ctx)["ps-0"]
    assert _tfk.by_position(ps_cfg) == _tfk.by_position(local), (ps_cfg, local)
    assert _tfk.dns_addresses_ok(ps_cfg, name, node_ns), ps_cfg
    ckpts = list(models.rglob("checkpoint"))
    assert ckpts, f"no checkpoint under the models volume: {sorted(p.name for p in models.rglob('*'))[:40]}"
    assert list(models.rglob("saved_model.pb")), "no SavedModel exported"
    _tfk.wait_for("cluster deleted", lambda: not _tfk.pods(node_api, node_ns, name), 60)


def test_pods_get_a_real_cluster_dns_answer(k8s_node, node_api, node_ns) -> None:
    """Sanity of the node itself: Ready, and CoreDNS (the kubelet's clusterDNS) answers
    for a Service of this cluster from inside a pod."""
    core = client.CoreV1Api(node_api)
    n = core.read_node(nodemod.NODE_NAME)
    assert any(c.type == "Ready" and c.status == "True" for c in n.status.conditions)
    # The versions the node was built with (tests/k8s/node/build.sh writes BUILDINFO).
    built = dict(line.split(" ", 1) for line in (k8s_node.node_dir / "BUILDINFO").read_text().splitlines())
    assert n.status.node_info.kubelet_version == built["k8s.io/kubernetes"]
    containerd = built["github.com/containerd/containerd/v2"].removeprefix("v")
    assert n.status.node_info.container_runtime_version == f"containerd://{containerd}"
    assert naming.LABEL_CLUSTER  # the provider's labels are importable without a cluster
