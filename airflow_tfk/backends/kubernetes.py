"""The Kubernetes backend: the only module that talks to Kubernetes.

Built on the cncf provider's hooks: :class:`KubernetesHook` (sync) and
:class:`AsyncKubernetesHook` (the deferrable trigger), so the ``kubernetes`` connection
type decides where and how to connect. Both clients and the provider are imported
lazily: importing this module costs nothing at DAG parse time.

Request budget (what keeps 600 workers cheap):

- ``create``: one server-side apply per rendered object (O(roles), not O(tasks)).
- ``watch``/``awatch``: one Job list and one pod list per session, then a single pod
  watch on the cluster's label selector, re-opened only when a timeout is due or the
  server ends it. No GET per Job per poll.
- ``status``: one pod list (plus a Job list on first use, or when a Job task vanished).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import AsyncIterator, Generator, Iterator
from functools import cached_property
from typing import Any, NamedTuple

from airflow_tfk import naming
from airflow_tfk.backends._k8s_api import (
    BY_KIND,
    AsyncApi,
    Kind,
    KubernetesApiError,
    SyncApi,
    error_message,
    is_not_found,
    kind_of,
)
from airflow_tfk.backends._k8s_retry import api_status, is_transient
from airflow_tfk.backends._k8s_status import (
    LABEL_COMPLETION_INDEX,
    LABEL_POD_INDEX,
    Interpreter,
    JobInfo,
    is_job_pod,
    job_info,
    newest_pod,
    task_key,
)
from airflow_tfk.backends.base import Backend, ClusterRef
from airflow_tfk.naming import RunIdentity
from airflow_tfk.spec import TFClusterSpec
from airflow_tfk.status import ClusterStatus

__all__ = ["KubernetesApiError", "KubernetesBackend"]

log = logging.getLogger(__name__)

# Kinds deleted by ``delete``, in order: controllers first so they stop replacing pods,
# storage last. Only the kinds render() can produce (plus their pods): every kind here is
# a permission the identity Airflow runs as must hold (deploy/rbac/). The per-training
# namespace is deleted after everything in it (see ``_namespace_plan``).
# The NetworkPolicy goes last, so pods still terminating stay isolated; it is not an
# EXISTS kind: a policy alone is no cluster to reattach to (create re-applies it).
# A JobSet (layout: jobset) goes first, so its controller stops making Jobs; where the
# JobSet API is not installed its requests answer 404, which is "none".
DELETE_ORDER = ("JobSet", "Job", "StatefulSet", "Pod", "Service", "PersistentVolumeClaim", "NetworkPolicy")
EXISTS_KINDS = ("Pod", "Job", "StatefulSet", "JobSet", "Service", "PersistentVolumeClaim")
# A Job task vanished: look at the Jobs again, but not more often than this.
JOB_REFRESH_INTERVAL = 2.0
MAX_WATCH_SECONDS = 300
BACKGROUND = {"propagationPolicy": "Background"}

LABEL_DELETED_CLUSTER = f"{naming.LABEL_PREFIX}/deleted-cluster"
EVENT_REASON_DELETED = "TFClusterDeleted"


class Request(NamedTuple):
    method: str
    path: str
    query: dict[str, Any] | None = None
    body: Any = None
    optional: bool = False  # a failure is logged, not raised (answered with None)
    forbidden_is_absent: bool = False  # 403 answers None quietly, like 404


# A "plan" is backend logic written once for the sync and the async client: it yields
# Requests and is sent (status, body) back, or None for 404 (and for optional failures).
Plan = Generator[Request, "tuple[int, Any] | None", Any]


class KubernetesBackend(Backend):
    """Runs a :class:`TFClusterSpec` on Kubernetes.

    :param conn_id: Airflow connection of type ``kubernetes``.
    :param cluster_context: kubeconfig context (overrides the connection's).
    :param config_file: kubeconfig path (overrides the connection's).
    :param in_cluster: use the pod's service account (overrides the connection's).
    :param unschedulable_timeout: seconds a pod may stay unschedulable before its task
        fails with reason ``Unschedulable``.
    :param image_pull_timeout: seconds a pod may fail to pull its image
        (``ImagePullBackOff``/``ErrImagePull``) before its task fails.
    :param field_manager: server-side apply field manager.
    """

    kind = "kubernetes"

    def __init__(
        self,
        conn_id: str = "kubernetes_default",
        cluster_context: str | None = None,
        config_file: str | None = None,
        in_cluster: bool | None = None,
        unschedulable_timeout: float = 300,
        image_pull_timeout: float = 120,
        field_manager: str = "airflow-tfk",
    ) -> None:
        self.conn_id = conn_id
        self.cluster_context = cluster_context
        self.config_file = config_file
        self.in_cluster = in_cluster
        self.unschedulable_timeout = unschedulable_timeout
        self.image_pull_timeout = image_pull_timeout
        self.field_manager = field_manager
        self._interpreters: dict[ClusterRef, Interpreter] = {}
        self._jobs: dict[ClusterRef, dict[str, JobInfo]] = {}
        # The pods the current watch of each cluster sees: a progress read finds its pod
        # there instead of listing pods again.
        self._sessions: dict[ClusterRef, _WatchSession] = {}

    def config(self) -> dict[str, Any]:
        return {
            "conn_id": self.conn_id,
            "cluster_context": self.cluster_context,
            "config_file": self.config_file,
            "in_cluster": self.in_cluster,
            "unschedulable_timeout": self.unschedulable_timeout,
            "image_pull_timeout": self.image_pull_timeout,
            "field_manager": self.field_manager,
        }

    def __repr__(self) -> str:
        return f"KubernetesBackend(conn_id={self.conn_id!r})"

    # -- connections --------------------------------------------------------------------
    @cached_property
    def hook(self) -> Any:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

        return KubernetesHook(
            conn_id=self.conn_id,
            cluster_context=self.cluster_context,
            config_file=self.config_file,
            in_cluster=self.in_cluster,
        )

    @cached_property
    def _api(self) -> SyncApi:
        return SyncApi(self.hook.api_client)

    @contextlib.asynccontextmanager
    async def _aapi(self) -> AsyncIterator[AsyncApi]:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

        kwargs = {
            "conn_id": self.conn_id,
            "cluster_context": self.cluster_context,
            "in_cluster": self.in_cluster,
        }
        hook = AsyncKubernetesHook(**kwargs)
        if self.config_file:
            # The async hook reads the kubeconfig path from the connection only; hand it
            # the connection's extras with our override instead.
            extras = dict(await hook.get_conn_extras())
            extras.pop("kube_config", None)
            extras["kube_config_path"] = self.config_file
            hook = AsyncKubernetesHook(connection_extras=extras, **kwargs)
        async with hook.get_conn() as client:
            yield AsyncApi(client)

    def _run(self, plan: Plan) -> Any:
        """Drive a plan with the sync client."""
        try:
            req = next(plan)
            while True:
                try:
                    result: tuple[int, Any] | None = self._api.request(
                        req.method, req.path, req.query, req.body
                    )
                except Exception as exc:
                    result = _failed(req, exc)
                req = plan.send(result)
        except StopIteration as stop:
            return stop.value

    async def _arun(self, api: AsyncApi, plan: Plan) -> Any:
        try:
            req = next(plan)
            while True:
                try:
                    result: tuple[int, Any] | None = await api.request(
                        req.method, req.path, req.query, req.body
                    )
                except Exception as exc:
                    result = _failed(req, exc)
                req = plan.send(result)
        except StopIteration as stop:
            return stop.value

    # -- create -------------------------------------------------------------------------
    @staticmethod
    def _render(spec: TFClusterSpec, identity: RunIdentity | None) -> list[dict[str, Any]]:
        from airflow_tfk.render import render

        return render(spec, identity)

    def create(self, spec: TFClusterSpec, identity: RunIdentity | None = None) -> ClusterRef:
        """Server-side apply every rendered object; re-applying changes nothing.

        If an apply fails, the objects this call created are deleted again before the
        error is raised, so a failed create leaves nothing half-made behind.
        """
        ref = ClusterRef(spec.name, spec.namespace_name)
        manifests = self._render(spec, identity)
        for m in manifests:
            kind_of(m)  # unknown kinds fail before anything is created
            labels = (m.get("metadata") or {}).get("labels") or {}
            if labels.get(naming.LABEL_CLUSTER) != spec.name:
                raise ValueError(
                    f"{m.get('kind')} {m['metadata'].get('name')}: lacks the label "
                    f"{naming.LABEL_CLUSTER}={spec.name}, so cleanup could not find it"
                )
        created: list[tuple[Kind, str | None, str]] = []
        try:
            for m in manifests:
                kind = kind_of(m)
                name = m["metadata"]["name"]
                namespace = m["metadata"].get("namespace", ref.namespace) if kind.namespaced else None
                if kind.namespaced:
                    m = {**m, "metadata": {**m["metadata"], "namespace": namespace}}
                try:
                    code, _ = self._api.apply(kind.item(namespace, name), m, self.field_manager)
                except Exception as exc:
                    _reraise(f"apply {kind.kind} {name}", exc)
                if code == 201:
                    created.append((kind, namespace, name))
        except BaseException:
            self._rollback(created)
            raise
        self._forget(ref)
        log.info(
            "kubernetes: applied %d objects of cluster %s in namespace %s (%d new)",
            len(manifests),
            ref.name,
            ref.namespace,
            len(created),
        )
        return ref

    def _rollback(self, created: list[tuple[Kind, str | None, str]]) -> None:
        for kind, namespace, name in reversed(created):
            try:
                self._api.request("DELETE", kind.item(namespace, name), BACKGROUND)
            except Exception as exc:  # keep cleaning up; the original error is raised
                if not is_not_found(exc):
                    log.warning(
                        "kubernetes: could not roll back %s %s: %s", kind.kind, name, error_message(exc)
                    )

    # -- status and watch -----------------------------------------------------------------
    def _interpreter(self, ref: ClusterRef) -> Interpreter:
        interp = self._interpreters.get(ref)
        if interp is None:
            interp = self._interpreters[ref] = Interpreter(
                self.unschedulable_timeout, self.image_pull_timeout
            )
        return interp

    def _list_plan(self, ref: ClusterRef, kind: str, selector: str | None = None) -> Plan:
        result = yield Request(
            "GET", BY_KIND[kind].collection(ref.namespace), {"labelSelector": selector or ref.label_selector}
        )
        body = result[1] if result else {}
        return body.get("items") or [], (body.get("metadata") or {}).get("resourceVersion")

    def _jobs_of(self, items: list[dict[str, Any]]) -> dict[str, JobInfo]:
        out = {}
        for job in items:
            info = job_info(job)
            if info is not None:
                out[info.role] = info
        return out

    def exists(self, ref: ClusterRef) -> bool:
        return bool(self._run(self._exists_plan(ref)))

    def _exists_plan(self, ref: ClusterRef) -> Plan:
        for kind in EXISTS_KINDS:
            result = yield Request(
                "GET",
                BY_KIND[kind].collection(ref.namespace),
                {"labelSelector": ref.label_selector, "limit": 1},
            )
            if result and result[1].get("items"):
                return True
        return bool((yield from self._own_namespace_plan(ref)))

    def _own_namespace_plan(self, ref: ClusterRef) -> Plan:
        """The cluster's per-training namespace, or None: ``ref.namespace`` if it carries
        the cluster's label. One GET of that namespace, never a list of all namespaces:
        an identity confined to its namespace by a Role may not read it (403), and then
        it cannot have created it either."""
        result = yield Request(
            "GET", BY_KIND["Namespace"].item(None, ref.namespace), forbidden_is_absent=True
        )
        ns = result[1] if result else None
        labels = ((ns or {}).get("metadata") or {}).get("labels") or {}
        return ns if labels.get(naming.LABEL_CLUSTER) == ref.name else None

    def status(self, ref: ClusterRef) -> ClusterStatus:
        """One pod list; the Jobs (retry settings) are listed once and when a Job task vanished."""
        pods, _ = self._run(self._list_plan(ref, "Pod"))
        interp = self._interpreter(ref)
        jobs = self._jobs.get(ref)
        if jobs is None or _jobs_stale(interp, pods, jobs):
            items, _ = self._run(self._list_plan(ref, "Job"))
            jobs = self._jobs[ref] = self._jobs_of(items)
        status, _ = interp.status(pods, jobs, time.time())
        if not status.exists:
            reason = self._run(self._deleted_reason_plan(ref))
            status = dataclasses.replace(status, deleted_reason=reason)
        return status

    def watch(self, ref: ClusterRef, timeout: float) -> Iterator[ClusterStatus]:
        """Yield the status on every change, from one pod watch, for ``timeout`` seconds."""
        end = time.monotonic() + timeout
        session = self._sessions[ref] = _WatchSession(self._interpreter(ref))

        def changed() -> ClusterStatus | None:
            current = session.status()
            if not current.exists and session.deleted_reason is None:
                session.deleted_reason = self._run(self._deleted_reason_plan(ref))
                current = session.status()
            return session.changed(current)

        while True:
            if session.needs_jobs():
                items, _ = self._run(self._list_plan(ref, "Job"))
                session.set_jobs(self._jobs_of(items))
                self._jobs[ref] = session.jobs or {}
            if session.rv is None:
                pods, rv = self._run(self._list_plan(ref, "Pod"))
                session.reset(pods, rv)
            if (current := changed()) is not None:
                yield current
            left = end - time.monotonic()
            if left <= 0:
                return
            try:
                for event in self._api.watch(
                    BY_KIND["Pod"].collection(ref.namespace),
                    session.watch_query(ref),
                    session.watch_seconds(left),
                ):
                    if session.on_event(event) and (current := changed()) is not None:
                        yield current
                    if time.monotonic() >= end or session.should_reopen():
                        break
            except Exception as exc:
                time.sleep(session.stream_failed(exc))

    async def awatch(self, ref: ClusterRef, timeout: float) -> AsyncIterator[ClusterStatus]:
        """:meth:`watch` through :class:`AsyncKubernetesHook`, for the deferrable trigger."""
        end = time.monotonic() + timeout
        session = self._sessions[ref] = _WatchSession(self._interpreter(ref))
        async with self._aapi() as api:

            async def changed() -> ClusterStatus | None:
                current = session.status()
                if not current.exists and session.deleted_reason is None:
                    session.deleted_reason = await self._arun(api, self._deleted_reason_plan(ref))
                    current = session.status()
                return session.changed(current)

            while True:
                if session.needs_jobs():
                    items, _ = await self._arun(api, self._list_plan(ref, "Job"))
                    session.set_jobs(self._jobs_of(items))
                if session.rv is None:
                    pods, rv = await self._arun(api, self._list_plan(ref, "Pod"))
                    session.reset(pods, rv)
                if (current := await changed()) is not None:
                    yield current
                left = end - time.monotonic()
                if left <= 0:
                    return
                stream = api.watch(
                    BY_KIND["Pod"].collection(ref.namespace),
                    session.watch_query(ref),
                    session.watch_seconds(left),
                )
                try:
                    async for event in stream:
                        if session.on_event(event) and (current := await changed()) is not None:
                            yield current
                        if time.monotonic() >= end or session.should_reopen():
                            break
                except Exception as exc:
                    await asyncio.sleep(session.stream_failed(exc))
                finally:
                    await stream.aclose()

    # -- logs -----------------------------------------------------------------------------
    def logs(self, ref: ClusterRef, role: str, index: int, tail_lines: int | None = None) -> str:
        selector = f"{ref.label_selector},{naming.LABEL_ROLE}={role}"
        pod = None
        session = self._sessions.get(ref)
        if session is not None and session.rv is not None:  # a watch is current
            pod = newest_pod(p for p in list(session.pods.values()) if task_key(p) == (role, index))
        if pod is None:
            # List the task's pods only, not the role's (600 workers: a few MB per read);
            # the index label is set by the Job / StatefulSet controller (>= 1.28).
            index_label = LABEL_POD_INDEX if role == "ps" else LABEL_COMPLETION_INDEX
            pods, _ = self._run(self._list_plan(ref, "Pod", f"{selector},{index_label}={index}"))
            pod = newest_pod(p for p in pods if task_key(p) == (role, index))
        if pod is None:  # an older controller without the index label
            pods, _ = self._run(self._list_plan(ref, "Pod", selector))
            pod = newest_pod(p for p in pods if task_key(p) == (role, index))
        if pod is None:
            return ""
        containers = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
        container = "tensorflow" if "tensorflow" in containers else (containers[0] if containers else None)
        path = BY_KIND["Pod"].item(ref.namespace, pod["metadata"]["name"]) + "/log"
        try:
            return self._api.text(path, {"container": container, "tailLines": tail_lines})
        except Exception as exc:
            # 400: the container has not started yet; 404: the pod just went away.
            if api_status(exc) in (400, 404):
                return ""
            _reraise(f"logs of {role}-{index}", exc)
            raise

    # -- delete ---------------------------------------------------------------------------
    def delete_roles(self, ref: ClusterRef, roles: list[str]) -> None:
        """Delete the roles' StatefulSet/Job (the garbage collector removes the pods) and Service."""
        self._run(self._delete_roles_plan(ref, roles))
        self._interpreter(ref).ignored_roles.update(roles)

    def _delete_roles_plan(self, ref: ClusterRef, roles: list[str]) -> Plan:
        for role in roles:
            name = naming.role_resource_name(ref.name, role)
            workload = "StatefulSet" if role == "ps" else "Job"
            yield Request("DELETE", BY_KIND[workload].item(ref.namespace, name), BACKGROUND)
            yield Request("DELETE", BY_KIND["Service"].item(ref.namespace, name), BACKGROUND)

    def delete(self, ref: ClusterRef, reason: str = "") -> None:
        """Delete everything with the cluster's label, and its per-training namespace.

        ``reason`` is recorded first as a Kubernetes Event (``TFClusterDeleted``) in the
        cluster's namespace, which the API server expires on its own; a watcher that finds
        the cluster gone reports it as ``ClusterStatus.deleted_reason``. (A per-training
        namespace takes the Event along with it.)
        """
        deleted = self._run(self._delete_plan(ref, reason))
        log.info(
            "kubernetes: deleted cluster %s in namespace %s (%s)",
            ref.name,
            ref.namespace,
            deleted or "nothing left",
        )
        self._forget(ref)

    async def adelete(self, ref: ClusterRef, reason: str = "") -> None:
        async with self._aapi() as api:
            await self._arun(api, self._delete_plan(ref, reason))
        self._forget(ref)

    def _forget(self, ref: ClusterRef) -> None:
        self._interpreters.pop(ref, None)
        self._jobs.pop(ref, None)
        self._sessions.pop(ref, None)

    def _delete_plan(self, ref: ClusterRef, reason: str = "") -> Plan:
        if reason:
            yield Request(
                "POST",
                BY_KIND["Event"].collection(ref.namespace),
                None,
                _deleted_event(ref, reason),
                optional=True,
            )
        query = {"labelSelector": ref.label_selector, **BACKGROUND}
        deleted: list[str] = []
        for name in DELETE_ORDER:
            kind = BY_KIND[name]
            if kind.collection_delete:
                result = yield Request("DELETE", kind.collection(ref.namespace), query)
                items = (result[1] or {}).get("items") or [] if result else []
                if items:
                    deleted.append(f"{len(items)} {kind.plural}")
                continue
            namespace = ref.namespace if kind.namespaced else None
            result = yield Request("GET", kind.collection(namespace), {"labelSelector": ref.label_selector})
            items = (result[1] or {}).get("items") or [] if result else []
            for item in items:
                yield Request("DELETE", kind.item(namespace, item["metadata"]["name"]), BACKGROUND)
            if items:
                deleted.append(f"{len(items)} {kind.plural}")
        if (yield from self._own_namespace_plan(ref)) is not None:
            yield Request("DELETE", BY_KIND["Namespace"].item(None, ref.namespace), BACKGROUND)
            deleted.append(f"namespace {ref.namespace}")
        return ", ".join(deleted)

    def _deleted_reason_plan(self, ref: ClusterRef) -> Plan:
        result = yield Request(
            "GET",
            BY_KIND["Event"].collection(ref.namespace),
            {"labelSelector": f"{LABEL_DELETED_CLUSTER}={ref.name}"},
            optional=True,
        )
        events = (result[1] or {}).get("items") or [] if result else []
        if not events:
            return ""
        newest = max(events, key=lambda e: (e.get("lastTimestamp") or "", e["metadata"].get("name", "")))
        return str(newest.get("message") or "")

    # -- Kueue ----------------------------------------------------------------------------
    def queue_message(self, ref: ClusterRef) -> str | None:
        """Kueue's pending reason for the cluster's Workloads; None when nothing waits or
        Kueue is not installed (its API answers 404)."""
        from airflow_tfk.backends._kueue import WORKLOAD_API_VERSIONS, queue_message

        for version in WORKLOAD_API_VERSIONS:
            kind = Kind("Workload", version, "workloads")
            result = self._run(_single(Request("GET", kind.collection(ref.namespace), optional=True)))
            if result is not None:
                return queue_message((result[1] or {}).get("items") or [], ref.name)
        return None

    # -- capacity -------------------------------------------------------------------------
    def capacity_snapshot(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Every node, and every pod that still holds its requests (two cluster-wide lists;
        deploy/rbac/capacity-check.yaml grants them)."""
        nodes = self._run(_single(Request("GET", BY_KIND["Node"].collection(None))))
        pods = self._run(
            _single(
                Request(
                    "GET",
                    BY_KIND["Pod"].everywhere(),
                    {"fieldSelector": "status.phase!=Succeeded,status.phase!=Failed"},
                )
            )
        )
        return list((nodes or (0, {}))[1].get("items") or []), list((pods or (0, {}))[1].get("items") or [])

    # -- find -----------------------------------------------------------------------------
    def find(self, namespace: str | None, labels: dict[str, str]) -> list[ClusterRef]:
        """Clusters (running or finished, not deleted) whose Jobs carry all of ``labels``."""
        selector = ",".join([naming.LABEL_CLUSTER] + [f"{k}={v}" for k, v in sorted(labels.items())])
        kind = BY_KIND["Job"]
        path = kind.everywhere() if namespace is None else kind.collection(namespace)
        result = self._run(_single(Request("GET", path, {"labelSelector": selector})))
        found: dict[ClusterRef, None] = {}
        for job in (result[1] or {}).get("items") or [] if result else []:
            meta = job["metadata"]
            found[ClusterRef(meta["labels"][naming.LABEL_CLUSTER], meta["namespace"])] = None
        return list(found)


class _WatchSession:
    """State of one ``watch``: the pods seen, the Jobs, the resourceVersion. No I/O."""

    def __init__(self, interp: Interpreter) -> None:
        self.interp = interp
        self.pods: dict[str, dict[str, Any]] = {}
        self.rv: str | None = None
        self.jobs: dict[str, JobInfo] | None = None
        self._jobs_due = True
        self._jobs_listed_at = -math.inf
        self._deadline: float | None = None  # wall clock: a timeout may flip a task
        self._failures = 0
        self._last: ClusterStatus | None = None
        self._opened_with: tuple[bool, float | None] = (False, None)
        self.deleted_reason: str | None = None  # looked up once the cluster is gone

    # jobs
    def needs_jobs(self) -> bool:
        return self._jobs_due and time.monotonic() - self._jobs_listed_at >= JOB_REFRESH_INTERVAL

    def set_jobs(self, jobs: dict[str, JobInfo]) -> None:
        self.jobs = jobs
        self._jobs_due = False
        self._jobs_listed_at = time.monotonic()

    # pods
    def reset(self, pods: list[dict[str, Any]], rv: str | None) -> None:
        self.pods = {_pod_id(p): p for p in pods}
        self.rv = rv or "0"

    def on_event(self, event: dict[str, Any]) -> bool:
        """Apply one watch event; True when the pods changed."""
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            code = obj.get("code")
            log.info(
                "kubernetes: pod watch ended by the server (%s %s); listing again",
                code,
                obj.get("message", ""),
            )
            self.rv = None  # 410 Gone and friends: start from a fresh list
            return False
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if rv:
            self.rv = rv
        if kind == "BOOKMARK":
            return False
        pid = _pod_id(obj)
        if kind == "DELETED":
            self.pods.pop(pid, None)
            key = task_key(obj)
            if key and is_job_pod(obj) and not any(task_key(p) == key for p in self.pods.values()):
                self._jobs_due = True  # did the Job fail, finish or go away?
        else:
            self.pods[pid] = obj
            key = task_key(obj)
            if key and is_job_pod(obj) and self.jobs is not None and key[0] not in self.jobs:
                self._jobs_due = True  # a Job created after the session began
        self._failures = 0
        return True

    def status(self) -> ClusterStatus:
        status, self._deadline = self.interp.status(self.pods.values(), self.jobs, time.time())
        if not status.exists and self.deleted_reason:
            status = dataclasses.replace(status, deleted_reason=self.deleted_reason)
        return status

    def changed(self, status: ClusterStatus) -> ClusterStatus | None:
        """``status`` if it differs from the last one yielded, else None."""
        if status == self._last:
            return None
        self._last = status
        return status

    def watch_query(self, ref: ClusterRef) -> dict[str, Any]:
        return {"labelSelector": ref.label_selector, "resourceVersion": self.rv, "allowWatchBookmarks": True}

    def watch_seconds(self, left: float) -> int:
        """How long the next watch request may stay open before something is due."""
        self._opened_with = (self._jobs_due, self._deadline)
        wait = min(left, MAX_WATCH_SECONDS)
        if self._deadline is not None:
            wait = min(wait, max(0.0, self._deadline - time.time()) + 0.5)
        if self._jobs_due:
            wait = min(wait, max(0.0, self._jobs_listed_at + JOB_REFRESH_INTERVAL - time.monotonic()))
        return max(1, math.ceil(wait))

    def should_reopen(self) -> bool:
        """End the current watch request: something is due before the server would end it."""
        if self.rv is None or self.needs_jobs():
            return True
        jobs_due, deadline = self._opened_with
        if self._jobs_due and not jobs_due:
            return True  # reopen with a timeout that ends when the Job list is due
        if self._deadline is not None and (deadline is None or self._deadline < deadline):
            return True  # a new, earlier timeout appeared
        return self._deadline is not None and time.time() >= self._deadline

    def stream_failed(self, exc: BaseException) -> float:
        """A watch request broke: list again after the returned delay, or raise."""
        self._failures += 1
        if not is_transient(exc) or self._failures > 5:
            _reraise("watch pods", exc)
        log.warning("kubernetes: pod watch failed (%s); listing again", error_message(exc))
        self.rv = None
        return min(2.0**self._failures / 4, 5.0)


def _pod_id(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return meta.get("uid") or meta.get("name", "")


def _jobs_stale(interp: Interpreter, pods: list[dict[str, Any]], jobs: dict[str, JobInfo]) -> bool:
    """Do the cached Jobs still explain these pods? (Spec fields are immutable; only
    outcomes change, and a Job's outcome shows as its pods going away.)"""
    if not pods:
        return True
    present = {task_key(p) for p in pods}
    for key, is_job in interp.known.items():
        if is_job and key not in present and key[0] not in interp.ignored_roles:
            return True
    return any(is_job_pod(p) and (task_key(p) or ("", 0))[0] not in jobs for p in pods)


def _reraise(what: str, exc: Exception) -> None:
    """Raise an API error as :class:`KubernetesApiError` naming what failed; others as is."""
    status = api_status(exc)
    if status is None:
        raise exc
    raise KubernetesApiError(what, status, error_message(exc)) from exc


def _single(req: Request) -> Plan:
    return (yield req)


def _failed(req: Request, exc: Exception) -> None:
    """A request of a plan failed: 404 and optional requests answer None, others raise."""
    if is_not_found(exc) or (req.forbidden_is_absent and api_status(exc) == 403):
        return None
    if req.optional:
        log.warning("kubernetes: %s %s failed (%s); carrying on", req.method, req.path, error_message(exc))
        return None
    _reraise(f"{req.method} {req.path}", exc)
    return None


def _deleted_event(ref: ClusterRef, reason: str) -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{ref.name}.deleted.{time.time_ns():x}",
            "namespace": ref.namespace,
            "labels": {LABEL_DELETED_CLUSTER: ref.name},
        },
        "involvedObject": {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": naming.role_resource_name(ref.name, "worker"),
            "namespace": ref.namespace,
        },
        "reason": EVENT_REASON_DELETED,
        "message": reason[:1024],
        "type": "Normal",
        "source": {"component": "airflow-tfk"},
        "reportingComponent": "airflow-tfk",
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
