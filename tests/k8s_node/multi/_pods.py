"""Small probe pods for the multi-node tests: a TCP/HTTP server and clients that print what
they reached as JSON lines, on the tier's image (Python only), pinned to a node, and
admitted by the ``restricted`` Pod Security Standard of the test namespaces."""

from __future__ import annotations

import json
import uuid
from typing import Any

from kubernetes import client

from k8s_node import _tfk
from k8s_node import node as nodemod

#: Answers every GET with its pod's name, on the port given as its argument.
SERVER = """\
import http.server, socket, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = socket.gethostname().encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("", int(sys.argv[1])), H).serve_forever()
"""

#: GETs each URL of argv[1] (comma-separated) argv[2] times, a new connection each time,
#: argv[4] seconds apart; prints one JSON line per attempt: the answer or the error.
FETCH = """\
import json, sys, time, urllib.request
for url in sys.argv[1].split(","):
    for _ in range(int(sys.argv[2])):
        try:
            with urllib.request.urlopen(url, timeout=float(sys.argv[3])) as r:
                print(json.dumps({"url": url, "answer": r.read().decode()}), flush=True)
        except OSError as e:
            print(json.dumps({"url": url, "error": repr(e)}), flush=True)
        time.sleep(float(sys.argv[4]))
"""


def _security() -> client.V1SecurityContext:
    return client.V1SecurityContext(
        allow_privilege_escalation=False,
        run_as_non_root=True,
        run_as_user=1000,
        capabilities=client.V1Capabilities(drop=["ALL"]),
        seccomp_profile=client.V1SeccompProfile(type="RuntimeDefault"),
    )


def start(
    api: client.ApiClient,
    namespace: str,
    argv: list[str],
    *,
    node: str,
    labels: dict[str, str] | None = None,
    port: int | None = None,
    prefix: str = "probe",
    claim: tuple[str, str] | None = None,
) -> str:
    """A pod running ``python -c`` ``argv`` on ``node``; with ``port``, ready once it listens;
    with ``claim`` (claim name, mount path), that claim mounted read-write."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    probe = None
    if port is not None:
        probe = client.V1Probe(tcp_socket=client.V1TCPSocketAction(port=port), period_seconds=1)
    mounts, volumes = None, None
    if claim is not None:
        mounts = [client.V1VolumeMount(name="ctl", mount_path=claim[1])]
        volumes = [
            client.V1Volume(
                name="ctl",
                persistent_volume_claim=client.V1PersistentVolumeClaimVolumeSource(claim_name=claim[0]),
            )
        ]
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels or {}),
        spec=client.V1PodSpec(
            restart_policy="Never",
            node_name=node,
            termination_grace_period_seconds=0,
            volumes=volumes,
            containers=[
                client.V1Container(
                    name="probe",
                    image=nodemod.TRAIN_IMAGE,
                    image_pull_policy="Never",
                    command=["python", "-c", *argv],
                    readiness_probe=probe,
                    security_context=_security(),
                    volume_mounts=mounts,
                )
            ],
        ),
    )
    client.CoreV1Api(api).create_namespaced_pod(namespace, pod)
    return name


def server(api: client.ApiClient, namespace: str, node: str, port: int, labels: dict[str, str]) -> str:
    return start(api, namespace, [SERVER, str(port)], node=node, labels=labels, port=port, prefix="srv")


def ready_ip(api: client.ApiClient, namespace: str, pod: str, timeout: float = 90) -> str:
    core = client.CoreV1Api(api)

    def ready() -> str | None:
        p = core.read_namespaced_pod(pod, namespace)
        ok = any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        return p.status.pod_ip if ok else None

    return _tfk.wait_for(f"pod {pod} ready", ready, timeout)


def fetches(
    api: client.ApiClient,
    namespace: str,
    node: str,
    urls: list[str],
    times: int,
    labels: dict[str, str] | None = None,
    timeout: float = 3,
    pause: float = 0,
) -> list[dict[str, Any]]:
    """Run a client pod on ``node`` GETting ``urls``; its JSON lines once it has ended."""
    argv = [FETCH, ",".join(urls), str(times), str(timeout), str(pause)]
    pod = start(api, namespace, argv, node=node, labels=labels)
    core = client.CoreV1Api(api)
    limit = 120 + len(urls) * times * (timeout + pause)
    _tfk.wait_for(
        f"client {pod} to end",
        lambda: core.read_namespaced_pod(pod, namespace).status.phase in ("Succeeded", "Failed"),
        limit,
    )
    text = _tfk.pod_log(api, namespace, pod)
    assert core.read_namespaced_pod(pod, namespace).status.phase == "Succeeded", text[-3000:]
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]
