"""A TEST DOUBLE of the Kubernetes API server, at the HTTP level.

NOT a Kubernetes API server: a small ``ThreadingHTTPServer`` that implements just what
``airflow_tfk.backends.kubernetes.backend`` uses, so the REAL ``kubernetes`` /
``kubernetes_asyncio`` clients and the cncf provider's ``KubernetesHook`` /
``AsyncKubernetesHook`` can be driven against it through an ordinary Airflow connection.
What a real API server does is tested against one (tests/k8s_integration, KWOK nodes);
this double is kept for what that cannot do: injected HTTP faults, an expired watch
(410), request counts, pod logs, and pod states KWOK does not produce.

Implemented:

- server-side apply (``PATCH`` ``application/apply-patch+yaml``, ``fieldManager``
  required): creates (201) or updates (200); an apply that changes nothing leaves the
  ``resourceVersion`` alone, like the real server;
- GET of one object; list with ``labelSelector`` (``k=v``, ``k!=v``, ``k``), ``limit`` and ``continue``;
- watch (``watch=true``) streaming JSON lines from a ``resourceVersion``, with
  ``timeoutSeconds``; an expired version gets an ``ERROR`` event with code 410;
- DELETE of one object and DeleteCollection, with ``propagationPolicy`` (a Job's default
  is ``Orphan``, as on the real server);
- pod logs (``tailLines``, ``limitBytes``);
- a crude Job controller: an Indexed Job gets one pod per completion index, with the
  labels/annotations the real controller sets, and its status counts its pods (active,
  ready, failed, completedIndexes) as they change;
- ``fieldSelector=status.phase=<phase>`` on pod lists;
- test controls to set pod states (running, succeeded, failed with an exit code,
  OOMKilled, waiting reasons such as ImagePullBackOff, unschedulable), retry a Job
  index, inject faults (status + Retry-After), count requests.

No authentication, admission, defaulting, validation or real garbage collector.
"""

from __future__ import annotations

import bisect
import copy
import json
import re
import secrets
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from airflow_tfk.kube.api import BY_KIND

# plural -> (apiVersion, kind, namespaced): the kinds the provider's API layer knows
ANN_INDEX = "batch.kubernetes.io/job-completion-index"
KINDS = {k.plural: (k.api_version, k.kind, k.namespaced) for k in BY_KIND.values()}
NO_COLLECTION_DELETE = {k.plural for k in BY_KIND.values() if not k.collection_delete}
SERVER_META = (
    "uid",
    "creationTimestamp",
    "resourceVersion",
    "generation",
    "managedFields",
    "deletionTimestamp",
    "ownerReferences",
)

_ROUTE = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?(?P<log>/log)?$"
)
_NS_ITEM = re.compile(r"^/api/v1/namespaces/(?P<name>[^/]+)$")


def now_iso(ago: float = 0.0) -> str:
    return datetime.fromtimestamp(time.time() - ago, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def match_selector(labels: dict[str, str], selector: str | None) -> bool:
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = term.split("=", 1)
            if labels.get(k.strip().rstrip("=")) != v.strip().lstrip("="):
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    verb: str
    plural: str | None
    status: int = 0


@dataclass
class Fault:
    method: str
    pattern: re.Pattern[str]
    status: int
    remaining: int
    retry_after: str | None = None


@dataclass
class _Event:
    rv: int
    plural: str
    namespace: str
    type: str
    obj: dict[str, Any] = field(repr=False)


class KubeApiDouble:
    """The double: start it, point a kubeconfig at :attr:`url`, drive it from tests."""

    def __init__(self) -> None:
        self.pages: dict[str, tuple[list[dict[str, Any]], str]] = {}  # continue token -> rest of a list
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.logs: dict[tuple[str, str], str] = {}
        self.log_times: dict[tuple[str, str], float] = {}  # when each pod last wrote
        self.events: list[_Event] = []
        self.event_rvs: list[int] = []
        # (namespace, cluster, role, index) -> {pod name: creation rv}, for test controls
        self.pods_by_task: dict[tuple[str, str, str, int], dict[str, int]] = {}
        self.rv = 0
        self.compacted_rv = 0
        self.requests: list[Request] = []
        self.faults: list[Fault] = []
        self.closing = False
        self._server: ThreadingHTTPServer | None = None
        self._put(
            "namespaces",
            "",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}},
            emit=False,
        )

    # -- lifecycle --------------------------------------------------------------------
    def _handler(self) -> type[_Handler]:
        """The request handler class (a subclass may serve more paths)."""
        return _Handler

    def start(self) -> KubeApiDouble:
        double = self

        class Handler(self._handler()):  # type: ignore[misc]
            api = double

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True, name="k8s-double").start()
        return self

    def stop(self) -> None:
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def kubeconfig(self, path: str) -> str:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "double",
            "clusters": [{"name": "double", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": "test-token"}}],
            "contexts": [{"name": "double", "context": {"cluster": "double", "user": "tester"}}],
        }
        with open(path, "w") as fh:
            yaml.safe_dump(config, fh)
        return path

    # -- request accounting -------------------------------------------------------------
    def mark(self) -> int:
        with self.lock:
            return len(self.requests)

    def count(
        self, verb: str | None = None, plural: str | None = None, since: int = 0, method: str | None = None
    ) -> int:
        with self.lock:
            return sum(
                1
                for r in self.requests[since:]
                if (verb is None or r.verb == verb)
                and (plural is None or r.plural == plural)
                and (method is None or r.method == method)
            )

    def summary(self, since: int = 0) -> dict[str, int]:
        out: dict[str, int] = {}
        with self.lock:
            for r in self.requests[since:]:
                key = f"{r.verb} {r.plural}"
                out[key] = out.get(key, 0) + 1
        return out

    def inject(
        self, method: str, path_regex: str, status: int, times: int = 1, retry_after: str | None = None
    ) -> None:
        """The next ``times`` matching requests answer ``status`` (with Retry-After)."""
        with self.lock:
            self.faults.append(Fault(method, re.compile(path_regex), status, times, retry_after))

    # -- store ------------------------------------------------------------------------
    def _emit(self, kind: str, plural: str, obj: dict[str, Any]) -> None:
        ns = obj["metadata"].get("namespace", "")
        self.events.append(_Event(self.rv, plural, ns, kind, copy.deepcopy(obj)))
        self.event_rvs.append(self.rv)
        self.cond.notify_all()

    def _bump(self, obj: dict[str, Any]) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)

    def _put(self, plural: str, ns: str, obj: dict[str, Any], emit: bool = True) -> dict:
        with self.cond:
            meta = obj.setdefault("metadata", {})
            existed = (plural, ns, meta["name"]) in self.objects
            if not existed:
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("creationTimestamp", now_iso())
                meta.setdefault("generation", 1)
            if ns:
                meta["namespace"] = ns
            self._bump(obj)
            self.objects[(plural, ns, meta["name"])] = obj
            if plural == "pods" and not existed:
                self.pods_by_task.setdefault(_task_of(ns, obj), {})[meta["name"]] = self.rv
            if emit:
                self._emit("MODIFIED" if existed else "ADDED", plural, obj)
            if plural == "pods":
                self._count_job_pods(ns, obj)
            return obj

    def _count_job_pods(self, ns: str, pod: dict[str, Any]) -> None:
        """The owner Job's status, from its pods (as the Job controller counts them)."""
        owner = next(
            (r for r in pod["metadata"].get("ownerReferences") or [] if r.get("kind") == "Job"), None
        )
        job = self.objects.get(("jobs", ns, owner["name"])) if owner else None
        if job is None:
            return
        pods = [
            o
            for (p, n, _), o in self.objects.items()
            if p == "pods"
            and n == ns
            and any(r.get("uid") == owner["uid"] for r in o["metadata"].get("ownerReferences") or [])
        ]
        phases = [(o.get("status") or {}).get("phase") for o in pods]
        done = sorted(
            {
                int(o["metadata"]["annotations"][ANN_INDEX])
                for o, ph in zip(pods, phases, strict=True)
                if ph == "Succeeded"
            }
        )
        ready = sum(
            1
            for o in pods
            if any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (o.get("status") or {}).get("conditions") or []
            )
        )
        status = {
            **(job.get("status") or {}),
            "active": sum(ph not in ("Succeeded", "Failed") for ph in phases),
            "ready": ready,
            "failed": phases.count("Failed"),
            "succeeded": len(done),
            "completedIndexes": ",".join(map(str, done)),
        }
        if status != job.get("status"):
            job["status"] = status
            self._bump(job)
            self._emit("MODIFIED", "jobs", job)

    def _remove(self, plural: str, ns: str, name: str, propagation: str | None) -> dict | None:
        with self.cond:
            obj = self.objects.pop((plural, ns, name), None)
            if obj is None:
                return None
            if plural == "pods":
                self.pods_by_task.get(_task_of(ns, obj), {}).pop(name, None)
            self._bump(obj)
            self._emit("DELETED", plural, obj)
            if plural == "pods":
                self._count_job_pods(ns, obj)
            if propagation is None:
                propagation = "Orphan" if plural == "jobs" else "Background"
            uid = obj["metadata"]["uid"]
            if propagation != "Orphan":
                for key, dep in list(self.objects.items()):
                    refs = dep["metadata"].get("ownerReferences") or []
                    if any(r.get("uid") == uid for r in refs):
                        self._remove(key[0], key[1], key[2], propagation)
            return obj

    def get(self, plural: str, name: str, namespace: str = "default") -> dict | None:
        with self.lock:
            ns = namespace if KINDS[plural][2] else ""
            obj = self.objects.get((plural, ns, name))
            return copy.deepcopy(obj) if obj else None

    def list(self, plural: str, selector: str | None = None, namespace: str | None = "default") -> list[dict]:
        """Copies of the objects of a kind matching ``selector`` (``namespace`` None: all)."""
        with self.lock:
            return [
                copy.deepcopy(o)
                for (p, ns, _), o in sorted(self.objects.items())
                if p == plural
                and (namespace is None or not KINDS[p][2] or ns == namespace)
                and match_selector(o["metadata"].get("labels") or {}, selector)
            ]

    def labelled(self, selector: str) -> list[str]:
        """``kind/name`` of every object (any kind, any namespace) matching ``selector``."""
        with self.lock:
            return sorted(
                f"{KINDS[p][1]}/{n}"
                for (p, _, n), o in self.objects.items()
                if match_selector(o["metadata"].get("labels") or {}, selector)
            )

    def compact(self) -> None:
        """Writes elsewhere, then etcd compaction: watches resuming from a resourceVersion
        before now get 410 Gone."""
        with self.cond:
            self.rv += 1
            self.compacted_rv = self.rv
            self.events.clear()
            self.event_rvs.clear()

    # -- controllers ------------------------------------------------------------------
    def _control(self, plural: str, obj: dict[str, Any]) -> None:
        if plural == "jobs":
            spec = obj.get("spec") or {}
            for index in range(int(spec.get("completions") or 1)):
                self._job_pod(obj, index, failures=0)

    def _pod_from(
        self,
        owner: dict[str, Any],
        kind: str,
        name: str,
        labels: dict[str, str],
        annotations: dict[str, str],
        extra_spec: dict[str, Any],
    ) -> dict[str, Any]:
        template = copy.deepcopy((owner.get("spec") or {}).get("template") or {})
        meta = template.get("metadata") or {}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "labels": {**(meta.get("labels") or {}), **labels},
                "annotations": {**(meta.get("annotations") or {}), **annotations},
                "ownerReferences": [
                    {
                        "apiVersion": owner["apiVersion"],
                        "kind": kind,
                        "name": owner["metadata"]["name"],
                        "uid": owner["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {**(template.get("spec") or {}), **extra_spec},
            "status": {"phase": "Pending", "conditions": []},
        }
        return self._put("pods", owner["metadata"]["namespace"], pod)

    def _job_pod(self, job: dict[str, Any], index: int, failures: int) -> dict[str, Any]:
        name = job["metadata"]["name"]
        annotations = {"batch.kubernetes.io/job-completion-index": str(index)}
        if (job.get("spec") or {}).get("backoffLimitPerIndex") is not None:
            annotations["batch.kubernetes.io/job-index-failure-count"] = str(failures)
        labels = {
            "batch.kubernetes.io/job-completion-index": str(index),
            "batch.kubernetes.io/job-name": name,
            "job-name": name,
            "batch.kubernetes.io/controller-uid": job["metadata"]["uid"],
        }
        subdomain = (job["spec"].get("template", {}).get("spec") or {}).get("subdomain")
        extra = {"hostname": f"{name}-{index}"}
        if subdomain:
            extra["subdomain"] = subdomain
        return self._pod_from(
            job, "Job", f"{name}-{index}-{secrets.token_hex(3)[:5]}", labels, annotations, extra
        )

    # -- test controls: pods ------------------------------------------------------------
    def pod_name(self, cluster: str, role: str, index: int, namespace: str = "default") -> str:
        """Name of the newest pod of task ``role-index``."""
        with self.lock:
            names = self.pods_by_task.get((namespace, cluster, role, index)) or {}
            assert names, f"no pod for {cluster} {role}-{index}"
            return max(names, key=lambda n: names[n])

    def set_pod_status(self, name: str, status: dict[str, Any], namespace: str = "default") -> None:
        with self.cond:
            pod = self.objects[("pods", namespace, name)]
            pod["status"] = status
            self._put("pods", namespace, pod)

    def _container(self, name: str, namespace: str) -> str:
        pod = self.objects[("pods", namespace, name)]
        containers = (pod.get("spec") or {}).get("containers") or [{"name": "tensorflow"}]
        return containers[0].get("name", "tensorflow")

    def _scheduled(self, ago: float = 0.0) -> dict[str, Any]:
        return {"type": "PodScheduled", "status": "True", "lastTransitionTime": now_iso(ago)}

    def set_running(self, name: str, namespace: str = "default") -> None:
        c = self._container(name, namespace)
        self.set_pod_status(
            name,
            {
                "phase": "Running",
                "startTime": now_iso(),
                "conditions": [self._scheduled(), {"type": "Ready", "status": "True"}],
                "containerStatuses": [
                    {
                        "name": c,
                        "ready": True,
                        "restartCount": 0,
                        "state": {"running": {"startedAt": now_iso()}},
                    }
                ],
            },
            namespace,
        )

    def set_terminated(
        self,
        name: str,
        exit_code: int,
        reason: str,
        message: str = "",
        namespace: str = "default",
        pod_reason: str | None = None,
        conditions: list[dict[str, Any]] | None = None,
    ) -> None:
        c = self._container(name, namespace)
        status: dict[str, Any] = {
            "phase": "Succeeded" if exit_code == 0 else "Failed",
            "conditions": [self._scheduled()] + list(conditions or []),
            "containerStatuses": [
                {
                    "name": c,
                    "ready": False,
                    "restartCount": 0,
                    "state": {
                        "terminated": {
                            "exitCode": exit_code,
                            "reason": reason,
                            "message": message,
                            "finishedAt": now_iso(),
                        }
                    },
                }
            ],
        }
        if pod_reason:
            status["reason"] = pod_reason
        self.set_pod_status(name, status, namespace)

    def set_succeeded(self, name: str, namespace: str = "default") -> None:
        self.set_terminated(name, 0, "Completed", namespace=namespace)

    def set_failed(
        self, name: str, exit_code: int = 1, message: str = "", namespace: str = "default"
    ) -> None:
        self.set_terminated(name, exit_code, "Error", message, namespace)

    def set_oom_killed(self, name: str, namespace: str = "default") -> None:
        self.set_terminated(name, 137, "OOMKilled", namespace=namespace)

    def set_waiting(
        self,
        name: str,
        reason: str = "ImagePullBackOff",
        message: str = "",
        ago: float = 0.0,
        namespace: str = "default",
        last_exit: int | None = None,
    ) -> None:
        """A scheduled pod whose container waits (``ago``: scheduled that long ago)."""
        c = self._container(name, namespace)
        cs: dict[str, Any] = {
            "name": c,
            "ready": False,
            "restartCount": 0,
            "state": {"waiting": {"reason": reason, "message": message}},
        }
        if last_exit is not None:
            cs["restartCount"] = 3
            cs["lastState"] = {"terminated": {"exitCode": last_exit, "reason": "Error"}}
        self.set_pod_status(
            name,
            {
                "phase": "Running" if reason == "CrashLoopBackOff" else "Pending",
                "conditions": [self._scheduled(ago)],
                "containerStatuses": [cs],
            },
            namespace,
        )

    def set_unschedulable(
        self,
        name: str,
        message: str = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        ago: float = 0.0,
        namespace: str = "default",
    ) -> None:
        self.set_pod_status(
            name,
            {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": message,
                        "lastTransitionTime": now_iso(ago),
                    }
                ],
            },
            namespace,
        )

    def set_log(self, name: str, text: str, namespace: str = "default", at: float | None = None) -> None:
        """The pod's log; ``at``: the kubelet's time of its lines (``timestamps=true``)."""
        with self.lock:
            self.logs[(namespace, name)] = text
            self.log_times[(namespace, name)] = time.time() if at is None else at

    def delete_pod(self, name: str, namespace: str = "default") -> None:
        self._remove("pods", namespace, name, "Background")

    # -- test controls: Jobs ----------------------------------------------------------
    def retry_index(self, failed_pod: str, namespace: str = "default") -> str:
        """What the Job controller does after a counted failure: a new pod for the index."""
        with self.cond:
            pod = self.objects[("pods", namespace, failed_pod)]
            ann = pod["metadata"].get("annotations") or {}
            owner = pod["metadata"]["ownerReferences"][0]["name"]
            job = self.objects[("jobs", namespace, owner)]
            failures = int(ann.get("batch.kubernetes.io/job-index-failure-count", "0")) + 1
            index = int(ann["batch.kubernetes.io/job-completion-index"])
            return self._job_pod(job, index, failures)["metadata"]["name"]

    # -- HTTP operations ----------------------------------------------------------------
    def _apply(
        self, plural: str, ns: str, name: str, query: dict[str, str], body: dict[str, Any]
    ) -> tuple[int, dict[str, Any]]:
        # No validation of the request (fieldManager, kind and name against the path): the
        # real API server's, in tests/k8s_integration (strict server-side apply dry runs).
        with self.cond:
            if ns and ("namespaces", "", ns) not in self.objects:
                return 404, _status(404, "NotFound", f'namespaces "{ns}" not found')
            desired = copy.deepcopy(body)
            desired["metadata"].pop("resourceVersion", None)
            if ns:
                desired["metadata"]["namespace"] = ns
            current = self.objects.get((plural, ns, name))
            if current is None:
                desired["metadata"]["managedFields"] = [
                    {"manager": query.get("fieldManager"), "operation": "Apply"}
                ]
                if plural == "namespaces":
                    desired["status"] = {"phase": "Active"}
                obj = self._put(plural, ns, desired)
                self._control(plural, obj)
                return 201, copy.deepcopy(obj)
            if _user_fields(current) == _user_fields(desired):
                return 200, copy.deepcopy(current)  # nothing changed: no new resourceVersion
            merged = copy.deepcopy(desired)
            for key in SERVER_META:
                if key in current["metadata"]:
                    merged["metadata"][key] = current["metadata"][key]
            merged["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
            if "status" in current:
                merged["status"] = current["status"]
            obj = self._put(plural, ns, merged)
            return 200, copy.deepcopy(obj)


def _task_of(ns: str, pod: dict[str, Any]) -> tuple[str, str, str, int]:
    meta = pod["metadata"]
    labels = meta.get("labels") or {}
    raw = (meta.get("annotations") or {}).get("batch.kubernetes.io/job-completion-index", "-1")
    return (
        ns,
        labels.get("tfk.airflow.apache.org/cluster", ""),
        labels.get("tfk.airflow.apache.org/role", ""),
        int(raw),
    )


def _user_fields(obj: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in obj.items() if k != "status"}
    out["metadata"] = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in SERVER_META}
    return out


class _Handler(BaseHTTPRequestHandler):
    api: KubeApiDouble
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # keep pytest output clean
        pass

    # plumbing
    def _send(
        self,
        code: int,
        body: Any,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _route(self) -> tuple[str, dict[str, str], re.Match[str] | None]:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        return parts.path, query, _ROUTE.match(parts.path)

    def _handle(self, method: str) -> None:
        path, query, m = self._route()
        body = self._body() if method in ("PATCH", "DELETE", "POST", "PUT") else b""
        plural = m.group("plural") if m else None
        name = m.group("name") if m else None
        nsm = _NS_ITEM.match(path)
        if nsm:  # /api/v1/namespaces/<name> is an item, not a collection
            plural, name = "namespaces", nsm.group("name")
        if m and m.group("ns") and plural not in KINDS:
            plural = None
        is_watch = query.get("watch") in ("true", "1", "True")
        verb = {
            "POST": "create",
            "PATCH": "apply",
            "DELETE": "delete" if name else "deletecollection",
            "GET": ("log" if m and m.group("log") else "get") if name else ("watch" if is_watch else "list"),
        }.get(method, method.lower())
        req = Request(method, path, query, verb, plural)
        api = self.api
        with api.lock:
            api.requests.append(req)
            fault = next(
                (f for f in api.faults if f.remaining > 0 and f.method == method and f.pattern.search(path)),
                None,
            )
            if fault:
                fault.remaining -= 1
        if fault:
            req.status = fault.status
            headers = {"Retry-After": fault.retry_after} if fault.retry_after else {}
            reason = "TooManyRequests" if fault.status == 429 else "InternalError"
            return self._send(fault.status, _status(fault.status, reason, "injected fault"), headers=headers)
        if plural not in KINDS:
            req.status = 404
            return self._send(404, _status(404, "NotFound", f"unknown path {path}"))
        ns = (m.group("ns") if m else "") or ""
        if not KINDS[plural][2]:
            ns = ""
        code, payload = self._dispatch(
            method, plural, ns, name, query, body, is_watch, bool(m and m.group("log"))
        )
        req.status = code
        if code == -1:  # streamed already
            return None
        if isinstance(payload, str):
            return self._send(code, payload, "text/plain")
        return self._send(code, payload)

    def _dispatch(
        self,
        method: str,
        plural: str,
        ns: str,
        name: str | None,
        query: dict[str, str],
        body: bytes,
        is_watch: bool,
        log: bool,
    ) -> tuple[int, Any]:
        api = self.api
        api_version, kind, _ = KINDS[plural]
        if method == "PATCH":
            if self.headers.get("Content-Type") != "application/apply-patch+yaml":
                return 415, _status(415, "UnsupportedMediaType", "only apply patches here")
            try:
                data = json.loads(body)
            except ValueError:
                data = yaml.safe_load(body)
            return api._apply(plural, ns, name or "", query, data)
        if method == "POST" and not name:  # plain create (the backend creates Events)
            data = json.loads(body)
            meta = data.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + secrets.token_hex(3)[:5]
            with api.cond:
                if ns and ("namespaces", "", ns) not in api.objects:
                    return 404, _status(404, "NotFound", f'namespaces "{ns}" not found')
                if (plural, ns, meta.get("name")) in api.objects:
                    return 409, _status(409, "AlreadyExists", f'{plural} "{meta["name"]}" already exists')
                return 201, copy.deepcopy(api._put(plural, ns, data))
        if method == "GET" and name and log:
            with api.lock:
                pod = api.objects.get(("pods", ns, name))
                text = api.logs.get((ns, name))
            if pod is None:
                return 404, _status(404, "NotFound", f'pods "{name}" not found')
            if text is None:
                if (pod.get("status") or {}).get("phase") == "Pending":
                    return 400, _status(
                        400, "BadRequest", f'container in pod "{name}" is waiting to start: ContainerCreating'
                    )
                text = ""
            tail = query.get("tailLines")
            if tail:
                lines = text.splitlines(keepends=True)
                text = "".join(lines[-int(tail) :])
            if query.get("timestamps") == "true":
                at = datetime.fromtimestamp(api.log_times.get((ns, name), 0.0), UTC)
                stamp = at.strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z"  # RFC 3339, nanoseconds
                text = "".join(f"{stamp} {line}" for line in text.splitlines(keepends=True))
            if query.get("limitBytes"):  # as the kubelet: the first bytes of what was asked
                text = text.encode()[: int(query["limitBytes"])].decode("utf-8", "ignore")
            return 200, text
        if method == "GET" and name:
            with api.lock:
                obj = api.objects.get((plural, ns, name))
                if obj is None:
                    return 404, _status(404, "NotFound", f'{plural} "{name}" not found')
                return 200, copy.deepcopy(obj)
        if method == "GET" and is_watch:
            self._watch(plural, ns, query)
            return -1, None
        if method == "GET":
            selector = query.get("labelSelector")
            with api.lock:
                items = api.list(plural, selector, ns or None)
                rv = str(api.rv)
            field = query.get("fieldSelector") or ""
            if field.startswith("status.phase="):
                phase = field.split("=", 1)[1]
                items = [o for o in items if (o.get("status") or {}).get("phase", "Pending") == phase]
            # Pages as the API server serves them: every page of one list is of the same
            # snapshot (its resourceVersion), kept under the ``continue`` token.
            limit = int(query.get("limit") or 0)
            token = query.get("continue")
            if token:
                items, rv = api.pages.pop(token)
            meta: dict[str, Any] = {"resourceVersion": rv}
            if limit and len(items) > limit:
                token = uuid.uuid4().hex
                api.pages[token] = (items[limit:], rv)
                meta["continue"] = token
                items = items[:limit]
            return 200, {"kind": f"{kind}List", "apiVersion": api_version, "metadata": meta, "items": items}
        if method == "DELETE":
            propagation = query.get("propagationPolicy")
            if body:
                try:
                    propagation = json.loads(body).get("propagationPolicy") or propagation
                except ValueError:
                    pass
            if name:
                obj = api._remove(plural, ns, name, propagation)
                if obj is None:
                    return 404, _status(404, "NotFound", f'{plural} "{name}" not found')
                return 200, obj
            if plural in NO_COLLECTION_DELETE:
                return 405, _status(405, "MethodNotAllowed", "deletecollection not supported")
            selector = query.get("labelSelector")
            deleted = []
            with api.cond:
                for (p, n, nm), o in list(api.objects.items()):
                    if (
                        p == plural
                        and n == ns
                        and match_selector(o["metadata"].get("labels") or {}, selector)
                    ):
                        gone = api._remove(p, n, nm, propagation)
                        if gone:
                            deleted.append(gone)
            return 200, {
                "kind": f"{kind}List",
                "apiVersion": api_version,
                "metadata": {"resourceVersion": str(api.rv)},
                "items": deleted,
            }
        return 405, _status(405, "MethodNotAllowed", method)

    def _watch(self, plural: str, ns: str, query: dict[str, str]) -> None:
        api = self.api
        selector = query.get("labelSelector")
        timeout = float(query.get("timeoutSeconds") or 1800)
        deadline = time.monotonic() + timeout
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def send(obj: dict[str, Any]) -> None:
            data = (json.dumps(obj) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def wanted(ev: _Event) -> bool:
            return (
                ev.plural == plural
                and (not ns or ev.namespace == ns)
                and match_selector(ev.obj["metadata"].get("labels") or {}, selector)
            )

        try:
            raw = query.get("resourceVersion")
            with api.lock:
                if raw in (None, "", "0"):
                    since = api.rv
                    initial = api.list(plural, selector, ns or None)
                else:
                    since = int(raw)
                    initial = []
                expired = since < api.compacted_rv
            if expired:
                send(
                    {
                        "type": "ERROR",
                        "object": _status(
                            410, "Expired", f"too old resource version: {since} ({api.compacted_rv})"
                        ),
                    }
                )
            else:
                for obj in initial:
                    send({"type": "ADDED", "object": obj})
                while True:
                    with api.cond:
                        while api.rv <= since and not api.closing and time.monotonic() < deadline:
                            api.cond.wait(timeout=max(0.0, deadline - time.monotonic()))
                        batch = api.events[bisect.bisect_right(api.event_rvs, since) :]
                        since = api.rv
                    for ev in batch:
                        if wanted(ev):
                            send({"type": ev.type, "object": ev.obj})
                    if api.closing or time.monotonic() >= deadline:
                        break
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def do_GET(self) -> None:
        self._handle("GET")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_POST(self) -> None:
        self._handle("POST")
