"""The Kubernetes backend: the only module that talks to Kubernetes.

Built on the cncf provider's hooks: :class:`KubernetesHook` (sync) and
:class:`AsyncKubernetesHook` (the deferrable trigger), so the ``kubernetes`` connection
type decides where and how to connect. Both clients and the provider are imported
lazily: importing this module costs nothing at DAG parse time.

Request budget (what keeps 600 workers cheap):

- ``create``: one server-side apply per rendered object (O(roles), not O(tasks)).
- ``watcher`` (a wait): one Job list and one pod list, then a single pod watch on the
  cluster's label selector for the whole wait, re-opened from its resourceVersion only
  when a timeout is due or the server ends it. No GET per Job per poll.
- ``status``: one pod list (plus a Job list on first use, or when a Job task vanished).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator
from functools import cached_property
from typing import Any

from airflow_tfk import naming
from airflow_tfk.admission import Layout
from airflow_tfk.backends._k8s_cluster import Interpreter
from airflow_tfk.backends._k8s_plan import Plan, Request, arun, list_plan, reraise, run, single
from airflow_tfk.backends._k8s_status import JobInfo, log_line_time, parse_time
from airflow_tfk.backends._k8s_watch import (
    ACTIVITY_LOG,
    LABEL_DELETED_CLUSTER,
    KubernetesWatcher,
    pod_log_plan,
    queue_plan,
    status_plan,
)
from airflow_tfk.backends.base import Backend, ClusterOwner, ClusterRef, ClusterWatcher, RunExport
from airflow_tfk.constants import (
    FIELD_MANAGER,
    IMAGE_PULL_TIMEOUT_SECONDS,
    KUBERNETES_CONN_ID,
    UNSCHEDULABLE_TIMEOUT_SECONDS,
)
from airflow_tfk.kube.api import (
    BY_KIND,
    AsyncApi,
    Kind,
    KubernetesApiError,
    SyncApi,
    error_message,
    is_not_found,
    kind_of,
)
from airflow_tfk.kube.connection import KubeConnection
from airflow_tfk.naming import RunIdentity
from airflow_tfk.protocol.digits import plain_int
from airflow_tfk.spec import TFClusterSpec
from airflow_tfk.status import Activity, ClusterStatus

__all__ = ["KubernetesApiError", "KubernetesBackend"]

log = logging.getLogger(__name__)

# Kinds deleted by ``delete``, in order: controllers first so they stop replacing pods,
# storage last. Only the kinds render() can produce (plus their pods): every kind here is
# a permission the identity Airflow runs as must hold (deploy/rbac/). The per-training
# namespace is deleted after everything in it (see ``_namespace_plan``).
# The NetworkPolicy goes last, so pods still terminating stay isolated; it is not an
# EXISTS kind: a policy alone is no cluster to reattach to (create re-applies it).
# A JobSet (layout: jobset) goes first, so its controller stops making Jobs; where the
# JobSet API is not installed its requests answer 404, which is "none". Every role is a
# Job now; StatefulSets stay in these lists for clusters an earlier version made (its PS
# was a StatefulSet), so they are still found, reattached to and deleted.
DELETE_ORDER = ("JobSet", "Job", "StatefulSet", "Pod", "Service", "PersistentVolumeClaim", "NetworkPolicy")
EXISTS_KINDS = ("Pod", "Job", "StatefulSet", "JobSet", "Service", "PersistentVolumeClaim")
# Where the owner annotations are read from: the objects every layout has, pods last.
OWNER_KINDS = ("Job", "StatefulSet", "Service", "PersistentVolumeClaim", "Pod")
BACKGROUND = {"propagationPolicy": "Background"}
EVENT_REASON_DELETED = "TFClusterDeleted"
EXPORT_LOG_LINES = 5000


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
        conn_id: str = KUBERNETES_CONN_ID,
        cluster_context: str | None = None,
        config_file: str | None = None,
        in_cluster: bool | None = None,
        unschedulable_timeout: float = UNSCHEDULABLE_TIMEOUT_SECONDS,
        image_pull_timeout: float = IMAGE_PULL_TIMEOUT_SECONDS,
        field_manager: str = FIELD_MANAGER,
    ) -> None:
        self.connection = KubeConnection(conn_id, cluster_context, config_file, in_cluster)
        self.unschedulable_timeout = unschedulable_timeout
        self.image_pull_timeout = image_pull_timeout
        self.field_manager = field_manager
        self._interpreters: dict[ClusterRef, Interpreter] = {}
        self._jobs: dict[ClusterRef, dict[str, JobInfo]] = {}

    def config(self) -> dict[str, Any]:
        return {
            **self.connection.config(),
            "unschedulable_timeout": self.unschedulable_timeout,
            "image_pull_timeout": self.image_pull_timeout,
            "field_manager": self.field_manager,
        }

    def __repr__(self) -> str:
        return f"KubernetesBackend(conn_id={self.connection.conn_id!r})"

    # -- connections --------------------------------------------------------------------
    @property
    def hook(self) -> Any:
        return self.connection.hook

    @cached_property
    def _api(self) -> SyncApi:
        return self.connection.api

    def _aapi(self) -> contextlib.AbstractAsyncContextManager[AsyncApi]:
        return self.connection.async_api()

    def _run(self, plan: Plan) -> Any:
        """Drive a plan with the sync client."""
        return run(self._api, plan)

    # -- create -------------------------------------------------------------------------
    @staticmethod
    def _render(spec: TFClusterSpec, identity: RunIdentity | None) -> list[dict[str, Any]]:
        from airflow_tfk.render import render

        return render(spec, identity)

    def preflight(self, spec: TFClusterSpec, identity: RunIdentity | None = None) -> None:
        """Render: template errors and object-size bounds surface before the first apply."""
        self._render(spec, identity)

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
                    reraise(f"apply {kind.kind} {name}", exc)
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

    def exists(self, ref: ClusterRef) -> bool:
        return bool(self._run(self._exists_plan(ref)))

    def owner(self, ref: ClusterRef) -> ClusterOwner | None:
        """The owner annotations of the first labelled object found (controllers first)."""
        owner: ClusterOwner | None = self._run(self._owner_plan(ref))
        return owner

    def _owner_plan(self, ref: ClusterRef) -> Plan:
        item = yield from _first_labelled(ref, OWNER_KINDS)
        if item is None:
            return None
        meta = item.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        max_duration = annotations.get(naming.ANNOTATION_MAX_DURATION, "")
        return ClusterOwner(
            RunIdentity.from_annotations(annotations),
            annotations.get(naming.ANNOTATION_SPEC_HASH),
            parse_time(meta.get("creationTimestamp")),
            plain_int(max_duration),
        )

    def _exists_plan(self, ref: ClusterRef) -> Plan:
        if (yield from _first_labelled(ref, EXISTS_KINDS)) is not None:
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
        status: ClusterStatus = self._run(status_plan(ref, self._interpreter(ref), self._jobs))
        return status

    @contextlib.asynccontextmanager
    async def watcher(self, ref: ClusterRef) -> AsyncIterator[ClusterWatcher]:
        """One async client and one pod watch for a whole wait (see :mod:`._k8s_watch`)."""
        async with self._aapi() as api:
            watcher = KubernetesWatcher(self, ref, api, self._interpreter(ref), self._jobs)
            try:
                yield watcher
            finally:
                await watcher.aclose()

    # -- logs -----------------------------------------------------------------------------
    def logs(self, ref: ClusterRef, role: str, index: int, tail_lines: int | None = None) -> str:
        text: str = self._run(pod_log_plan(ref, role, index, {"tailLines": tail_lines}))
        return text

    def task_activity(self, ref: ClusterRef, role: str, index: int) -> Activity:
        """When the task's container last wrote a line: the kubelet's timestamp of its
        newest log line (one line read). A frozen process is not visible from here."""
        return Activity(last_output=log_line_time(self._run(pod_log_plan(ref, role, index, ACTIVITY_LOG))))

    # -- delete ---------------------------------------------------------------------------
    def delete_roles(self, ref: ClusterRef, roles: list[str]) -> None:
        """Delete the roles' Jobs (the garbage collector removes the pods) and Services."""
        self._run(self._delete_roles_plan(ref, roles))
        self._interpreter(ref).ignored_roles.update(roles)

    def ends_roles_after_success(self, layout: Layout) -> str | None:
        # The JobSet's success policy (the decisive role) completes it, and its controller
        # then deletes the Jobs still running, the PS's among them. That layout has no
        # Job, StatefulSet or Service named for a role, so deleting those would only 404.
        return "the JobSet's success policy" if Layout(layout) is Layout.JOBSET else None

    def _delete_roles_plan(self, ref: ClusterRef, roles: list[str]) -> Plan:
        for role in roles:
            name = naming.role_resource_name(ref.name, role)
            gone = yield Request("DELETE", BY_KIND["Job"].item(ref.namespace, name), BACKGROUND)
            if gone is None and role == "ps":  # 404: a PS StatefulSet of an earlier version?
                yield Request("DELETE", BY_KIND["StatefulSet"].item(ref.namespace, name), BACKGROUND)
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
            await arun(api, self._delete_plan(ref, reason))
        self._forget(ref)

    def _forget(self, ref: ClusterRef) -> None:
        self._interpreters.pop(ref, None)
        self._jobs.pop(ref, None)

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

    # -- a failed run's exports ---------------------------------------------------------------
    def run_exports(self, ref: ClusterRef) -> list[RunExport]:
        """The versions the exporting task (chief, else worker 0) logged exporting onto a
        claim its pod mounts; read before the delete takes the pods and their logs."""
        from airflow_tfk.backends._k8s_exports import claim_mounts, exports_in

        jobs, _ = self._run(list_plan(ref, "Job"))
        mounts = claim_mounts(jobs)
        if not mounts:
            return []
        roles = {((j.get("metadata") or {}).get("labels") or {}).get(naming.LABEL_ROLE) for j in jobs}
        # The export line comes near the end (a traceback may follow it); the tail bounds
        # what a long training's log costs to read.
        text = self.logs(ref, "chief" if "chief" in roles else "worker", 0, tail_lines=EXPORT_LOG_LINES)
        return exports_in(text, mounts)

    def discard_exports(self, ref: ClusterRef, exports: list[RunExport]) -> list[str]:
        """Rename the versions on their claims, by a one-shot Job (see ``_k8s_exports``)."""
        import uuid

        from airflow_tfk.backends._k8s_exports import set_aside

        return set_aside(self._api, ref, exports, uuid.uuid4().hex[:8])

    # -- Kueue ----------------------------------------------------------------------------
    def queue_message(self, ref: ClusterRef) -> str | None:
        """Kueue's pending reason for the cluster's Workloads; None when nothing waits or
        Kueue is not installed (its API answers 404)."""
        message: str | None = self._run(queue_plan(ref))
        return message

    # -- capacity -------------------------------------------------------------------------
    def capacity_snapshot(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Every node, and every pod that still holds its requests (two cluster-wide lists;
        deploy/rbac/capacity-check.yaml grants them)."""
        nodes = self._run(single(Request("GET", BY_KIND["Node"].collection(None))))
        pods = self._run(
            single(
                Request(
                    "GET",
                    BY_KIND["Pod"].everywhere(),
                    {"fieldSelector": "status.phase!=Succeeded,status.phase!=Failed"},
                )
            )
        )
        return _items(nodes), _items(pods)

    # -- find -----------------------------------------------------------------------------
    def find(self, namespace: str | None, labels: dict[str, str]) -> list[ClusterRef]:
        """Clusters (running or finished, not deleted) whose Jobs carry all of ``labels``."""
        selector = ",".join([naming.LABEL_CLUSTER] + [f"{k}={v}" for k, v in sorted(labels.items())])
        kind = BY_KIND["Job"]
        path = kind.everywhere() if namespace is None else kind.collection(namespace)
        result = self._run(single(Request("GET", path, {"labelSelector": selector})))
        found: dict[ClusterRef, None] = {}
        for job in (result[1] or {}).get("items") or [] if result else []:
            meta = job["metadata"]
            found[ClusterRef(meta["labels"][naming.LABEL_CLUSTER], meta["namespace"])] = None
        return list(found)

    def clusters(self, namespace: str | None) -> list[ClusterRef]:
        """Clusters with a Job left, or the PS StatefulSet of an earlier version's cluster."""
        found: dict[ClusterRef, None] = {}
        for kind_name in ("Job", "StatefulSet"):
            kind = BY_KIND[kind_name]
            path = kind.everywhere() if namespace is None else kind.collection(namespace)
            result = self._run(single(Request("GET", path, {"labelSelector": naming.LABEL_CLUSTER})))
            for obj in (result[1] or {}).get("items") or [] if result else []:
                meta = obj["metadata"]
                found[ClusterRef(meta["labels"][naming.LABEL_CLUSTER], meta["namespace"])] = None
        return list(found)


def _first_labelled(ref: ClusterRef, kinds: tuple[str, ...]) -> Plan:
    """The first object with the cluster's label, trying ``kinds`` in order (one GET of
    at most one item each), or None."""
    for kind in kinds:
        result = yield Request(
            "GET", BY_KIND[kind].collection(ref.namespace), {"labelSelector": ref.label_selector, "limit": 1}
        )
        items = (result[1] or {}).get("items") or [] if result else []
        if items:
            return items[0]
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


def _items(result: tuple[int, Any] | None) -> list[dict[str, Any]]:
    """The ``items`` of a list answer (None: the list was absent)."""
    body = result[1] if result else None
    return list((body or {}).get("items") or [])
