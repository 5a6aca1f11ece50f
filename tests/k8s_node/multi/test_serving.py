"""The provider's serving on two real nodes, reached through its ClusterIP Service.

A publish makes the serving Deployment with 2 replicas (its topology spread puts one on each
node); a client pod on the first node, admitted by the serving NetworkPolicy's
``allow_from``, calls the Service by its DNS name, a new connection per request, so
kube-proxy picks a replica each time. It alternates the model's default ``:predict`` and its
``stable`` label, retries a failed request once, and writes one JSON line per request into
a claim the test reads. Three phases under that load:

1. a fixed number of requests: each replica's own request counter (TF Serving's
   ``:tensorflow:serving:request_count``, read through the API server's pod proxy) shows
   both answered, and together exactly that many;
2. one replica deleted: no request is lost once retried, while the Deployment replaces it,
   and none is answered 404 (the replacement joins the Service only once its readiness
   probe sees the ``stable`` version loaded);
3. version 2 published: no answer of version 2 before the publish promotes it, and none
   on the ``stable`` label before every replica has it.

A pod without the client's labels gets no answer from the Service (kube-router enforces
the serving policy). It runs with the tier, in CI too: about 70 s on a quiet machine, 2-4 min
under load (three pods importing TensorFlow).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from kubernetes import client

from airflow_tfk.serving.kubernetes import KubernetesServing, pod_proxy_path
from airflow_tfk.serving.publish import publish
from airflow_tfk.serving.spec import ServingSpec
from k8s_node import _serving, _tfk
from k8s_node import cluster as clustermod
from k8s_node import node as nodemod
from tests import prometheus_text

from . import _pods

pytestmark = pytest.mark.k8s_node
CLIENT_LABELS = {"app": "serving-client"}
PHASE_1 = 40
CTL = "/ctl"

#: argv: Service URL, control directory, phase-1 request count. Writes requests.jsonl there;
#: after phase 1 it writes "phase1" and waits for "go"; it ends when "stop" appears.
CLIENT = """\
import json, os, sys, time, urllib.error, urllib.request
base, ctl, first = sys.argv[1], sys.argv[2], int(sys.argv[3])
paths = json.loads(sys.argv[4])
body = json.dumps(json.loads(sys.argv[5])).encode()
def call(path):
    req = urllib.request.Request(base + paths[path], data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read()).get("predictions")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")[:200]
    except OSError as e:
        return -1, repr(e)[:200]
# The policy admits a new pod once its controller has seen it: wait for 8 answers in a row
# (so both replicas' nodes, almost surely) before the counted requests start.
t0, ok = time.time(), 0
while ok < 8 and time.time() - t0 < 60:
    try:
        with urllib.request.urlopen(base + paths["default"].rsplit(":", 1)[0], timeout=3):
            ok += 1
    except OSError:
        ok = 0
        time.sleep(0.2)
with open(os.path.join(ctl, "admitted"), "w") as f:
    f.write(str(time.time() - t0))
out = open(os.path.join(ctl, "requests.jsonl"), "a", buffering=1)
i = 0
while not os.path.exists(os.path.join(ctl, "stop")):
    if i == first:
        open(os.path.join(ctl, "phase1"), "w").close()
        while not os.path.exists(os.path.join(ctl, "go")):
            time.sleep(0.05)
    path = "default" if i % 2 == 0 else "stable"
    rec = {"i": i, "path": path, "t": time.time()}
    rec["status"], rec["answer"] = call(path)
    if rec["status"] != 200:
        time.sleep(0.2)
        rec["retry_t"] = time.time()
        rec["retry_status"], rec["retry_answer"] = call(path)
    out.write(json.dumps(rec) + "\\n")
    i += 1
    time.sleep(0.02)
"""


def _answered(rec: dict) -> tuple[float, int | None] | None:
    """(when, version) of the request's answer after at most one retry; None: lost."""
    if rec["status"] == 200:
        return rec["t"], _serving.version_of(rec["answer"])
    if rec.get("retry_status") == 200:
        return rec["retry_t"], _serving.version_of(rec["retry_answer"])
    return None


def _requests(ctl: Path) -> list[dict]:
    path = ctl / "requests.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _served_count(api, namespace: str, pod: str, spec: ServingSpec) -> int:
    """Requests to the model (any path) that this replica answered OK, by its own counter."""
    resp = api.call_api(
        pod_proxy_path(namespace, pod, spec.rest_port, spec.monitoring_path),
        "GET",
        auth_settings=["BearerToken"],
        _preload_content=False,
        _return_http_data_only=True,
    )
    family = prometheus_text.parse(resp.data.decode())[":tensorflow:serving:request_count"]
    return int(
        sum(
            s.value
            for s in family.samples
            if s.labels.get("model_name") == _serving.MODEL and s.labels.get("status") == "OK"
        )
    )


def _serving_pods(api, namespace: str, spec: ServingSpec) -> dict[str, str]:
    """Ready serving pod (one that serves the ``stable`` version) -> its node."""
    ready = _serving.ready_pod_ips(api, namespace, spec.resource)
    core = client.CoreV1Api(api)
    return {p: core.read_namespaced_pod(p, namespace).spec.node_name for p in ready}


def test_serving_on_two_nodes_through_its_service(
    k8s_nodes2, node_api, node_ns, node_conn, local_volumes
) -> None:
    first, second = clustermod.node_name(0), clustermod.node_name(1)
    store = local_volumes.provide(node_ns, "tfk-models")
    _tfk.create_claim(node_api, node_ns, "tfk-models", storage_class="tfk-local")
    ctl = local_volumes.provide(node_ns, "client-ctl")
    _tfk.create_claim(node_api, node_ns, "client-ctl", storage_class="tfk-local")
    subprocess.run(
        [sys.executable, "-c", _serving.MAKE_MODELS, str(store)], cwd=nodemod.REPO, check=True, timeout=600
    )
    # The API server dials pods from the fabric's address; the client pod by its labels.
    spec = _serving.two_replicas(
        node_ns,
        {"api_server_cidrs": [f"{clustermod.FABRIC_IP}/32"], "allow_from": [{"pod_labels": CLIENT_LABELS}]},
    )
    target = KubernetesServing(spec, conn_id=node_conn)
    t0 = time.monotonic()
    publish(target, 1, emit=print)
    took = {"publish 1": time.monotonic() - t0}
    placed = _serving_pods(node_api, node_ns, spec)
    assert sorted(placed.values()) == [first, second], placed

    url = f"http://{spec.resource}.{node_ns}.svc:{spec.rest_port}"
    argv = [CLIENT, url, CTL, str(PHASE_1), json.dumps(_serving.PATHS), json.dumps(_serving.SAMPLE)]
    loader = _pods.start(
        node_api, node_ns, argv, node=first, labels=CLIENT_LABELS, prefix="load", claim=("client-ctl", CTL)
    )
    _tfk.wait_for("the client's first phase", lambda: (ctl / "phase1").exists(), 180)
    counts = {p: _served_count(node_api, node_ns, p, spec) for p in placed}
    phase1 = [_answered(r) for r in _requests(ctl)]
    assert len(phase1) == PHASE_1 and all(a and a[1] == 1 for a in phase1), phase1
    # Both replicas answered, and their own counters add up to exactly the client's requests.
    assert all(counts.values()) and sum(counts.values()) == PHASE_1, counts
    outsider = _pods.fetches(node_api, node_ns, second, [f"{url}{_serving.PATHS['default']}"], 2, timeout=3)
    assert outsider and all("error" in g for g in outsider), outsider

    marks: dict[str, float] = {}
    (ctl / "go").touch()
    _tfk.wait_for("load before the deletion", lambda: len(_requests(ctl)) >= PHASE_1 + 20, 60)
    victim = next(p for p, n in placed.items() if n == second)
    marks["deleted"] = time.time()
    client.CoreV1Api(node_api).delete_namespaced_pod(victim, node_ns)

    def replaced() -> bool:
        now = _serving_pods(node_api, node_ns, spec)
        return len(now) == 2 and victim not in now

    _tfk.wait_for("the replacement replica ready", replaced, 240)
    marks["replaced"] = time.time()
    time.sleep(2)

    def emit(line: str) -> None:
        if line.startswith(f"promoting {_serving.MODEL} version 2"):
            marks["promoting"] = time.time()
        if "AVAILABLE on every replica" in line:
            marks["everywhere"] = time.time()
        print(line)

    t1 = time.monotonic()
    result = publish(target, 2, emit=emit)
    took["publish 2 under load"] = time.monotonic() - t1
    marks["published"] = time.time()
    time.sleep(spec.poll_seconds * 3)  # the label reaches every replica's config poll
    (ctl / "stop").touch()
    core = client.CoreV1Api(node_api)
    _tfk.wait_for(
        "the client to end",
        lambda: core.read_namespaced_pod(loader, node_ns).status.phase in ("Succeeded", "Failed"),
        60,
    )
    assert core.read_namespaced_pod(loader, node_ns).status.phase == "Succeeded", _tfk.pod_log(
        node_api, node_ns, loader
    )
    assert (result.version, result.previous_version) == (2, 1), result

    recs = _requests(ctl)[PHASE_1:]
    lost = [r for r in recs if _answered(r) is None]
    retried = [r for r in recs if r["status"] != 200]
    # a replica not yet serving the model would answer 404 Servable not found
    not_found = [r for r in recs if 404 in (r["status"], r.get("retry_status"))]
    during = [r for r in recs if marks["deleted"] <= r["t"] <= marks["replaced"]]
    answers = [(r, _answered(r)) for r in recs]
    early = [r for r, a in answers if a and a[1] == 2 and a[0] < marks["promoting"]]
    early_stable = [
        r for r, a in answers if a and a[1] == 2 and r["path"] == "stable" and a[0] < marks["everywhere"]
    ]
    after = Counter(r["path"] for r, a in answers if a and a[1] == 2 and a[0] > marks["published"])
    by_version = Counter((r["path"], a[1] if a else "lost") for r, a in answers)
    admitted = float((ctl / "admitted").read_text())
    print(
        f"serving on 2 nodes {placed}: the client admitted after {admitted:.1f} s; "
        f"phase 1 {PHASE_1} requests, per replica {counts}; "
        f"then {len(recs)} requests, {len(during)} while a replica was deleted and replaced "
        f"({marks['replaced'] - marks['deleted']:.1f} s), {len(retried)} retried "
        f"({[(r['status'], str(r['answer'])[:60]) for r in retried[:3]]}), {len(not_found)} answered 404, "
        f"{len(lost)} lost; "
        f"by (path, version): {dict(by_version)}; version 2 before promotion: {len(early)}, on 'stable' "
        f"before every replica had it: {len(early_stable)}; "
        + ", ".join(f"{k} {v:.1f} s" for k, v in took.items())
    )
    assert lost == [], lost[:5]
    assert not_found == [], not_found[:5]
    assert during, "no request while a replica was replaced"
    assert early == [], early[:5]
    assert early_stable == [], early_stable[:5]
    assert after["default"] and after["stable"], by_version
