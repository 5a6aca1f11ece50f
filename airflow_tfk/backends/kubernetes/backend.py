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
from collections.abc import AsyncIterator
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow_tfk.backends.base import Backend, ClusterOwner, ClusterRef, ClusterWatcher, RunExport
from airflow_tfk.backends.kubernetes.cluster import Interpreter
from airflow_tfk.backends.kubernetes.objects import (
    BACKGROUND,
    clusters_plan,
    delete_plan,
    delete_roles_plan,
    exists_plan,
    owner_plan,
    served_plan,
)
from airflow_tfk.backends.kubernetes.plan import Plan, Request, arun, list_plan, reraise, run, single
from airflow_tfk.backends.kubernetes.reads import ACTIVITY_LOG, pod_log_plan, queue_plan, status_plan
from airflow_tfk.backends.kubernetes.status import JobInfo, log_line_time
from airflow_tfk.backends.kubernetes.usage import pods_usage, usage_plan
from airflow_tfk.backends.kubernetes.watch import KubernetesWatcher
from airflow_tfk.core import naming
from airflow_tfk.core.constants import (
    FIELD_MANAGER,
    IMAGE_PULL_TIMEOUT_SECONDS,
    KUBERNETES_CONN_ID,
    UNSCHEDULABLE_TIMEOUT_SECONDS,
)
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.core.status import Activity, ClusterStatus
from airflow_tfk.core.usage import TaskUsage
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
from airflow_tfk.spec.admission import Layout
from airflow_tfk.spec.cluster import TFClusterSpec
from airflow_tfk.spec.operator_options import backend_options

if TYPE_CHECKING:
    from airflow_tfk.spec.platform_policy import PlatformPolicy

__all__ = ["KubernetesApiError", "KubernetesBackend"]

log = logging.getLogger(__name__)

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
        # the table the operators check backend_config with, for a backend made directly
        backend_options(
            self.kind,
            {
                "conn_id": conn_id,
                "cluster_context": cluster_context,
                "config_file": config_file,
                "in_cluster": in_cluster,
                "unschedulable_timeout": unschedulable_timeout,
                "image_pull_timeout": image_pull_timeout,
                "field_manager": field_manager,
            },
        )
        self.connection = KubeConnection(conn_id, cluster_context, config_file, in_cluster)
        self.unschedulable_timeout = unschedulable_timeout
        self.image_pull_timeout = image_pull_timeout
        self.field_manager = field_manager
        self._interpreters: dict[ClusterRef, Interpreter] = {}
        self._jobs: dict[ClusterRef, dict[str, JobInfo]] = {}
        #: the platform policy every cluster this backend creates must meet; set by the
        #: operators from the deployment's configuration (``[tfk_policy]``), never from a
        #: spec or ``backend_config``. None (a backend made directly): no policy check.
        self.policy: PlatformPolicy | None = None

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
    def _render(self, spec: TFClusterSpec, identity: RunIdentity | None) -> list[dict[str, Any]]:
        """The cluster's manifests; with a :attr:`policy`, its namespaces enforce the policy's
        Pod Security level and every violation of the final pods is raised, each named."""
        from airflow_tfk.render.manifests import render

        if self.policy is None:
            return render(spec, identity)
        from airflow_tfk.render.checked import render_checked
        from airflow_tfk.spec.platform_policy import raise_for

        manifests, found = render_checked(spec, self.policy, identity)
        raise_for(found)
        return manifests

    def preflight(self, spec: TFClusterSpec, identity: RunIdentity | None = None) -> None:
        """Render and check against the platform policy: template errors, object-size bounds
        and policy violations surface before the first apply."""
        self._render(spec, identity)

    def create(self, spec: TFClusterSpec, identity: RunIdentity | None = None) -> ClusterRef:
        """Server-side apply every rendered object; re-applying changes nothing.

        If an apply fails, the objects this call created are deleted again before the
        error is raised, so a failed create leaves nothing half-made behind.
        """
        ref = ClusterRef(spec.name, spec.namespace_name)
        manifests = self._render(spec, identity)
        if spec.namespace_per_training:
            manifests = self._with_namespace_needs(spec, manifests)
        _check_labels(spec, manifests)
        if any(m.get("kind") == "PodGroup" for m in manifests):
            self._require_pod_groups()
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
        except KubernetesApiError as exc:
            left = self._rollback(created)
            if exc.status in (400, 403, 409, 422):  # refused, not a server in trouble
                raise ObjectRefused(exc, ref.name, len(created), left) from exc
            raise
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

    def _require_pod_groups(self) -> None:
        """Native gang scheduling needs the PodGroup API. Checked before anything is made:
        an API server without the GenericWorkload gate accepts the pods anyway and drops
        their ``schedulingGroup``, so the training would start without its gang."""
        from airflow_tfk.core.errors import SpecError
        from airflow_tfk.spec.admission import POD_GROUP_API_VERSION

        if not self._run(served_plan("PodGroup")):
            raise SpecError(
                "gang_scheduling",
                f"native needs the PodGroup API ({POD_GROUP_API_VERSION} podgroups), which this cluster "
                "does not serve: it takes Kubernetes 1.37 or later with the GenericWorkload feature gate "
                "(kube-apiserver, kube-scheduler, kube-controller-manager) and "
                f"--runtime-config={POD_GROUP_API_VERSION}=true; or set gang_scheduling: none",
                "native",
            )

    def _with_namespace_needs(
        self, spec: TFClusterSpec, manifests: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """The copies a training's own namespace needs (pull secrets, ServiceAccount,
        LocalQueue), right after the Namespace: read before anything is created."""
        from airflow_tfk.backends.kubernetes.namespace import needs_plan

        namespace = next(m for m in manifests if m["kind"] == "Namespace")
        needs = self._run(needs_plan(spec, dict(namespace["metadata"]["labels"])))
        at = manifests.index(namespace) + 1
        return [*manifests[:at], *needs, *manifests[at:]]

    def _rollback(self, created: list[tuple[Kind, str | None, str]]) -> list[str]:
        """Delete what a failed create made; returns the objects that could not be deleted."""
        left = []
        for kind, namespace, name in reversed(created):
            try:
                self._api.request("DELETE", kind.item(namespace, name), BACKGROUND)
            except Exception as exc:  # keep cleaning up; the original error is raised
                if not is_not_found(exc):
                    left.append(f"{kind.kind} {name}")
                    log.warning(
                        "kubernetes: could not roll back %s %s: %s", kind.kind, name, error_message(exc)
                    )
        return left

    # -- status and watch -----------------------------------------------------------------
    def _interpreter(self, ref: ClusterRef) -> Interpreter:
        interp = self._interpreters.get(ref)
        if interp is None:
            interp = self._interpreters[ref] = Interpreter(
                self.unschedulable_timeout, self.image_pull_timeout
            )
        return interp

    def exists(self, ref: ClusterRef) -> bool:
        return bool(self._run(exists_plan(ref)))

    def owner(self, ref: ClusterRef) -> ClusterOwner | None:
        """The owner annotations of the first labelled object found (controllers first)."""
        owner: ClusterOwner | None = self._run(owner_plan(ref))
        return owner

    def status(self, ref: ClusterRef) -> ClusterStatus:
        """One pod list; the Jobs (retry settings) are listed once and when a Job task vanished."""
        status: ClusterStatus = self._run(status_plan(ref, self._interpreter(ref), self._jobs))
        return status

    @contextlib.asynccontextmanager
    async def watcher(self, ref: ClusterRef) -> AsyncIterator[ClusterWatcher]:
        """One async client and one pod watch for a whole wait (see :mod:`.watch`)."""
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

    def usage(self, ref: ClusterRef) -> list[TaskUsage]:
        """Every pod of the cluster, from its containers' start to their end (or now),
        times its effective requests (one pod list; see :mod:`.usage`)."""
        return pods_usage(_items(self._run(usage_plan(ref))))

    # -- delete ---------------------------------------------------------------------------
    def delete_roles(self, ref: ClusterRef, roles: list[str]) -> None:
        """Delete the roles' Jobs (the garbage collector removes the pods) and Services."""
        self._run(delete_roles_plan(ref, roles))
        self._interpreter(ref).ignored_roles.update(roles)

    def ends_roles_after_success(self, layout: Layout) -> str | None:
        # The JobSet's success policy (the decisive role) completes it, and its controller
        # then deletes the Jobs still running, the PS's among them. That layout has no
        # Job or Service named for a role, so deleting those would only 404.
        return "the JobSet's success policy" if Layout(layout) is Layout.JOBSET else None

    def delete(self, ref: ClusterRef, reason: str = "") -> None:
        """Delete everything with the cluster's label, and its per-training namespace.

        ``reason`` is recorded first as a Kubernetes Event (``TFClusterDeleted``) in the
        cluster's namespace, which the API server expires on its own; a watcher that finds
        the cluster gone reports it as ``ClusterStatus.deleted_reason``. (A per-training
        namespace takes the Event along with it.)
        """
        deleted = self._run(delete_plan(ref, reason))
        log.info(
            "kubernetes: deleted cluster %s in namespace %s (%s)",
            ref.name,
            ref.namespace,
            deleted or "nothing left",
        )
        self._forget(ref)

    async def adelete(self, ref: ClusterRef, reason: str = "") -> None:
        async with self._aapi() as api:
            await arun(api, delete_plan(ref, reason))
        self._forget(ref)

    def _forget(self, ref: ClusterRef) -> None:
        self._interpreters.pop(ref, None)
        self._jobs.pop(ref, None)

    # -- a failed run's exports ---------------------------------------------------------------
    def run_exports(self, ref: ClusterRef) -> list[RunExport]:
        """The versions the exporting task (chief, else worker 0) logged exporting onto a
        claim its pod mounts; read before the delete takes the pods and their logs."""
        from airflow_tfk.backends.kubernetes.exports import claim_mounts, exports_in

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
        """Rename the versions on their claims, by a one-shot Job (see ``exports``)."""
        import uuid

        from airflow_tfk.backends.kubernetes.exports import set_aside

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
        selector = ",".join(
            [naming.LABEL_CLUSTER, naming.MANAGED_SELECTOR] + [f"{k}={v}" for k, v in sorted(labels.items())]
        )
        kind = BY_KIND["Job"]
        path = kind.everywhere() if namespace is None else kind.collection(namespace)
        result = self._run(single(Request("GET", path, {"labelSelector": selector})))
        found: dict[ClusterRef, None] = {}
        for job in (result[1] or {}).get("items") or [] if result else []:
            meta = job["metadata"]
            found[ClusterRef(meta["labels"][naming.LABEL_CLUSTER], meta["namespace"])] = None
        return list(found)

    def clusters(self, namespace: str | None) -> list[ClusterRef]:
        """Clusters with anything left: Jobs, or what outlives their TTL (Services, claims,
        the NetworkPolicy, a per-training namespace), so the sweeper ends the retention."""
        found: list[ClusterRef] = self._run(clusters_plan(namespace))
        return found


def _check_labels(spec: TFClusterSpec, manifests: list[dict[str, Any]]) -> None:
    """Before anything is created: every object is of a known kind and carries the labels
    every clean-up selects by."""
    wanted = {naming.LABEL_CLUSTER: spec.name, naming.LABEL_MANAGED_BY: naming.MANAGED_BY}
    for m in manifests:
        kind_of(m)
        labels = (m.get("metadata") or {}).get("labels") or {}
        for key, value in wanted.items():
            if labels.get(key) != value:
                raise ValueError(
                    f"{m.get('kind')} {m['metadata'].get('name')}: lacks the label "
                    f"{key}={value}, so cleanup could not find it"
                )


class ObjectRefused(KubernetesApiError):
    """The API server refused an object of a cluster being created (an admission policy or
    webhook, a quota, Pod Security, RBAC, validation). The message leads with the cause,
    then names the object and says what became of the objects created before it."""

    def __init__(self, exc: KubernetesApiError, cluster: str, created: int, left: list[str]) -> None:
        from airflow_tfk.backends.kubernetes.refusal import classify, detail

        super().__init__(exc.what, exc.status, exc.message)
        self.cause, _ = classify(exc.message, default="Refused")
        what = exc.what.removeprefix("apply ")
        if left:
            after = f"could not remove {len(left)} of the {created} objects it had created: {', '.join(left)}"
        else:
            after = f"the {created} objects it had created were removed" if created else "nothing was created"
        self.args = (
            f"{self.cause}: the API server refused {what} of cluster {cluster}: {detail(exc.message)} "
            f"(HTTP {exc.status}); {after}",
        )

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple[object, ...]:
        # the default rebuilds from ``args`` (the message alone), which does not fit __init__
        return (_restore_refused, (self.args, self.__dict__))


def _restore_refused(args: tuple[object, ...], state: dict[str, object]) -> ObjectRefused:
    exc = Exception.__new__(ObjectRefused)
    exc.args = args
    exc.__dict__.update(state)
    return exc


def _items(result: tuple[int, Any] | None) -> list[dict[str, Any]]:
    """The ``items`` of a list answer (None: the list was absent)."""
    body = result[1] if result else None
    return list((body or {}).get("items") or [])
