"""Helpers for running airflow-tfk against the real control plane (tests/k8s/harness.py).

- ``use_connection``: an Airflow ``kubernetes`` connection (``AIRFLOW_CONN_<ID>``) whose
  ``kube_config_path`` is a kubeconfig of the test cluster, as a user would configure it.
- ``spec``: a small cluster spec in a namespace (KWOK never pulls the image).
- ``leftovers``: every object carrying the cluster's label, of every kind the provider
  creates plus what the controllers derive from them (pods, ControllerRevisions,
  EndpointSlices); ``wait_no_leftovers`` waits for the garbage collector.
- ``PodDriver``: a background thread that plays the training processes through the KWOK
  annotations (complete or fail pods once they exist), like the containers would.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any, TypeVar

from k8s import harness
from kubernetes import client

from airflow_tfk.core import naming

T = TypeVar("T")
IMAGE = "registry.invalid/tfk/train:1"  # KWOK never pulls anything
CONN_ID = "tfk_k8s"

# (api group/version, plural, namespaced) of everything that may carry a cluster's label:
# what render() produces, and what the Job/EndpointSlice controllers derive.
LABELLED_KINDS = [
    ("batch/v1", "jobs"),
    ("v1", "services"),
    ("v1", "persistentvolumeclaims"),
    ("v1", "pods"),
    ("discovery.k8s.io/v1", "endpointslices"),
    ("networking.k8s.io/v1", "networkpolicies"),
    ("scheduling.k8s.io/v1beta1", "podgroups"),
]


def wait_for(what: str, fn: Callable[[], T | None], timeout: float = 60, every: float = 0.2) -> T:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


@contextlib.contextmanager
def use_connection(kubeconfig: os.PathLike | str, conn_id: str = CONN_ID) -> Iterator[str]:
    """``AIRFLOW_CONN_<ID>``: a ``kubernetes`` connection reading ``kubeconfig``."""
    var = f"AIRFLOW_CONN_{conn_id.upper()}"
    old = os.environ.get(var)
    os.environ[var] = connection_json(kubeconfig)
    try:
        yield conn_id
    finally:
        if old is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = old


def connection_json(kubeconfig: os.PathLike | str) -> str:
    return json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}})


def spec(
    namespace: str, mode: str = "between_graph", workers: int = 2, ps: int = 1, **extra: Any
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "image": IMAGE,
        "namespace": namespace,
        "mode": mode,
        "command": ["python", "-m", "airflow_tfk.runtime.examples.digits_app"],
        "worker": {"replicas": workers},
        "ps_grace_seconds": 1,
    }
    if ps:
        out["ps"] = {"replicas": ps}
    if mode == "parameter_server":
        out["chief"] = {"replicas": 1}
    out.update(extra)
    return out


#: The resource (URL path) of each kind the provider creates.
PLURAL = {
    "Job": "jobs",
    "Service": "services",
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "Namespace": "namespaces",
    "NetworkPolicy": "networkpolicies",
    "JobSet": "jobsets",
    "PodGroup": "podgroups",
}


def apply_dry_run(api: client.ApiClient, manifest: dict, namespace: str) -> tuple[int, str | None]:
    """Server-side apply of ``manifest`` as a dry run with strict field validation: the
    status and the Warning header (an unknown, duplicate or dropped field)."""
    kind = manifest["kind"]
    group = "/api/v1" if manifest["apiVersion"] == "v1" else f"/apis/{manifest['apiVersion']}"
    scope = "" if kind == "Namespace" else f"/namespaces/{namespace}"
    resp = api.call_api(
        f"{group}{scope}/{PLURAL[kind]}/{manifest['metadata']['name']}",
        "PATCH",
        query_params=[("fieldManager", "airflow-tfk"), ("fieldValidation", "Strict"), ("dryRun", "All")],
        header_params={"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"},
        body=manifest,
        auth_settings=["BearerToken"],
        _preload_content=False,
        _return_http_data_only=True,
    )
    return resp.status, resp.getheader("Warning")


# RBAC kind -> (delete method, namespaced)
_RBAC_DELETE = {
    "ClusterRole": ("delete_cluster_role", False),
    "ClusterRoleBinding": ("delete_cluster_role_binding", False),
    "Role": ("delete_namespaced_role", True),
    "RoleBinding": ("delete_namespaced_role_binding", True),
}


def delete_rbac(api: client.ApiClient, docs: list[dict], namespace: str) -> None:
    """Delete the RBAC objects of ``docs`` (namespaced ones in ``namespace`` unless they
    name theirs); one that is gone already is fine."""
    rbac_api = client.RbacAuthorizationV1Api(api)
    for d in docs:
        method, namespaced = _RBAC_DELETE[d["kind"]]
        args = [d["metadata"]["name"]]
        if namespaced:
            args.append(d["metadata"].get("namespace", namespace))
        try:
            getattr(rbac_api, method)(*args)
        except client.ApiException as exc:
            if exc.status != 404:
                raise


def static_volume(api, namespace: str, claim: str) -> str:
    """A 1Gi ReadWriteMany PV bound in advance to the claim ``claim`` of ``namespace``
    (there is no provisioner); returns its name."""
    pv = f"{namespace}-{claim}"[:253]
    client.CoreV1Api(api).create_persistent_volume(
        client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=pv),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": "1Gi"},
                access_modes=["ReadWriteMany"],
                storage_class_name="",
                host_path=client.V1HostPathVolumeSource(path=f"/tmp/{pv}"),
                claim_ref=client.V1ObjectReference(namespace=namespace, name=claim),
            ),
        )
    )
    return pv


def create_claim(api, namespace: str, name: str, storage_class: str = "", volume: str | None = None) -> None:
    """A 1Gi ReadWriteMany claim: of ``storage_class``, or ("") bound to the static PV ``volume``."""
    client.CoreV1Api(api).create_namespaced_persistent_volume_claim(
        namespace,
        client.V1PersistentVolumeClaim(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1PersistentVolumeClaimSpec(
                access_modes=["ReadWriteMany"],
                storage_class_name=storage_class,
                volume_name=volume,
                resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
            ),
        ),
    )


@contextlib.contextmanager
def admission_policy(
    api: client.ApiClient,
    namespace: str,
    resource: str,
    expression: str,
    message: str,
    probe: Callable[[], object],
) -> Iterator[str]:
    """A ValidatingAdmissionPolicy (CEL, as a Kyverno or Gatekeeper rule would) that refuses
    creating a core ``resource`` in ``namespace`` unless ``expression`` holds, with
    ``message``; yields its name once in force, removes it after.

    In force: ``probe`` (a dry-run create the policy refuses) is refused with ``message``.
    Any 403 would not do: the namespace's restricted Pod Security refuses a plain pod too,
    and a probe that took that refusal for the policy's let the objects through before the
    API server had loaded it.
    """
    name = f"tfk-policy-{uuid.uuid4().hex[:6]}"
    adm = client.AdmissionregistrationV1Api(api)
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": [resource]}
    adm.create_validating_admission_policy(
        {
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [rule]},
                "validations": [{"expression": expression, "message": message}],
            },
        }
    )
    adm.create_validating_admission_policy_binding(
        {
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
                },
            },
        }
    )

    def in_force() -> bool:
        try:
            probe()
        except client.ApiException as exc:
            return message in str(exc.body)
        return False

    try:
        wait_for("the admission policy in force", in_force, 30, every=0.5)
        yield name
    finally:
        adm.delete_validating_admission_policy_binding(name)
        adm.delete_validating_admission_policy(name)


def task_context(
    run_id: str, dag_id: str = "k8s_it", task_id: str = "train", try_number: int = 1
) -> dict[str, Any]:
    """The part of an Airflow context the operators read: the task instance identity."""
    return {
        "ti": SimpleNamespace(
            dag_id=dag_id, task_id=task_id, run_id=run_id, map_index=-1, try_number=try_number
        )
    }


def cluster_name(ctx: dict[str, Any], prefix: str = "tfk") -> str:
    ti = ctx["ti"]
    return naming.RunIdentity(ti.dag_id, ti.task_id, ti.run_id, ti.map_index).cluster_name(prefix)


def make_op(namespace: str, ctx_spec: dict[str, Any], **kwargs: Any):
    from airflow_tfk.operators.training import TFTrainingOperator

    kwargs.setdefault("progress_interval", 3600)  # KWOK pods have no logs to read
    kwargs.setdefault("kubernetes_conn_id", CONN_ID)
    return TFTrainingOperator(task_id="train", backend="kubernetes", cluster_spec=ctx_spec, **kwargs)


# -- what is on the server ----------------------------------------------------------------
def _list(
    api: client.ApiClient, version: str, plural: str, namespace: str | None, selector: str
) -> list[dict[str, Any]]:
    prefix = f"/api/{version}" if "/" not in version else f"/apis/{version}"
    path = f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"
    resp = api.call_api(
        path,
        "GET",
        query_params=[("labelSelector", selector)],
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
        _preload_content=False,
        _return_http_data_only=True,
    )
    return json.loads(resp.data)["items"]


def objects(
    api: client.ApiClient, namespace: str, cluster: str, kinds: list[tuple[str, str]] | None = None
) -> dict[str, dict[str, Any]]:
    """``{"<plural>/<name>": object}`` of everything labelled with the cluster, plus its
    per-training namespace (namespaces are listed cluster-wide by the same label)."""
    selector = f"{naming.LABEL_CLUSTER}={cluster}"
    out = {}
    for version, plural in kinds or LABELLED_KINDS:
        for obj in _list(api, version, plural, namespace, selector):
            out[f"{plural}/{obj['metadata']['name']}"] = obj
    for obj in _list(api, "v1", "namespaces", None, selector):
        out[f"namespaces/{obj['metadata']['name']}"] = obj
    return out


def leftovers(api: client.ApiClient, namespace: str, cluster: str) -> list[str]:
    return sorted(objects(api, namespace, cluster))


def wait_no_leftovers(api: client.ApiClient, namespace: str, cluster: str, timeout: float = 60) -> float:
    """Wait until nothing carries the cluster's label (the GC removes pods, revisions,
    slices after their owners); returns the seconds it took."""
    t0 = time.monotonic()
    last: list[str] = []
    while time.monotonic() - t0 < timeout:
        last = leftovers(api, namespace, cluster)
        if not last:
            return time.monotonic() - t0
        time.sleep(0.25)
    raise AssertionError(f"objects of cluster {cluster} left after {timeout}s: {last}")


def pods(api: client.ApiClient, namespace: str, cluster: str, role: str | None = None) -> list[client.V1Pod]:
    selector = f"{naming.LABEL_CLUSTER}={cluster}"
    if role:
        selector += f",{naming.LABEL_ROLE}={role}"
    return client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items


def index_of(pod: client.V1Pod) -> int:
    labels = pod.metadata.labels or {}
    raw = labels.get("batch.kubernetes.io/job-completion-index") or labels.get("apps.kubernetes.io/pod-index")
    return int(raw)


def annotate(api: client.ApiClient, namespace: str, pod: str, annotations: dict[str, str]) -> None:
    client.CoreV1Api(api).patch_namespaced_pod(pod, namespace, {"metadata": {"annotations": annotations}})


def finish(
    api: client.ApiClient,
    namespace: str,
    cluster: str,
    role: str,
    code: int = 0,
    indexes: list[int] | None = None,
    count: int | None = None,
    timeout: float = 60,
) -> list[str]:
    """Annotate the role's pods (all, or ``indexes``) to exit with ``code``; waits until
    ``count`` (default: len(indexes) or all seen) pods exist. Returns the pod names."""

    def ready() -> list[client.V1Pod] | None:
        found = [
            p
            for p in pods(api, namespace, cluster, role)
            if p.metadata.deletion_timestamp is None and (indexes is None or index_of(p) in indexes)
        ]
        want = count if count is not None else (len(indexes) if indexes is not None else 1)
        return found if len(found) >= want else None

    found = wait_for(f"{role} pods of {cluster}", ready, timeout)
    for p in found:
        annotate(api, namespace, p.metadata.name, {harness.EXIT_CODE: str(code)})
    return [p.metadata.name for p in found]


@contextlib.contextmanager
def node_pool(
    k8s_cluster: Any,
    api: client.ApiClient,
    pool_label: str,
    pool: str,
    nodes: dict[str, dict[str, str]],
    capacity: dict[str, str],
    ready_within: float = 30,
) -> Iterator[str]:
    """KWOK nodes (name -> extra labels) that only a test's own pods may use: labelled
    ``pool_label=pool`` and tainted with it, so no other test's pod lands there and their
    requests stay off everyone's capacity figures. Ready on entry, deleted on exit."""
    taint = {"key": pool_label, "value": pool, "effect": "NoSchedule"}
    for node, labels in nodes.items():
        k8s_cluster.add_node(node, labels={pool_label: pool, **labels}, capacity=capacity, taints=[taint])
    core = client.CoreV1Api(api)
    try:
        wait_for(
            "the pool's nodes Ready",
            lambda: all(
                any(
                    c.type == "Ready" and c.status == "True"
                    for c in core.read_node(n).status.conditions or []
                )
                for n in nodes
            ),
            timeout=ready_within,
        )
        yield pool
    finally:
        for node in nodes:
            core.delete_node(node)
            k8s_cluster.nodes.remove(node)


class PodDriver:
    """Plays the training: a thread that, for every pod of ``cluster`` that appears,
    sets the KWOK annotations ``rule(pod)`` returns (or nothing for None).

    Default rule: worker and chief pods exit 0 (PS and evaluators never exit).
    """

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        cluster: str | None = None,
        rule: Callable[[client.V1Pod], dict[str, str] | None] | None = None,
        every: float = 0.2,
    ) -> None:
        self.api, self.namespace, self.cluster = api, namespace, cluster
        self.rule = rule or default_rule
        self.every = every
        self.done: dict[str, float] = {}  # pod name -> when it was annotated
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-driver", daemon=True)
        self.errors: list[BaseException] = []

    def _run(self) -> None:
        core = client.CoreV1Api(self.api)
        selector = naming.LABEL_CLUSTER if self.cluster is None else f"{naming.LABEL_CLUSTER}={self.cluster}"
        while not self._stop.is_set():
            try:
                for p in core.list_namespaced_pod(self.namespace, label_selector=selector).items:
                    name = p.metadata.name
                    if name in self.done or p.metadata.deletion_timestamp is not None:
                        continue
                    ann = self.rule(p)
                    if ann:
                        annotate(self.api, self.namespace, name, ann)
                        self.done[name] = time.time()
            except client.ApiException as exc:
                if exc.status != 404:
                    self.errors.append(exc)
            except Exception as exc:  # reported by stop()
                self.errors.append(exc)
            self._stop.wait(self.every)

    def __enter__(self) -> PodDriver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def default_rule(pod: client.V1Pod) -> dict[str, str] | None:
    role = (pod.metadata.labels or {}).get(naming.LABEL_ROLE)
    return {harness.EXIT_CODE: "0"} if role in ("worker", "chief") else None


# -- fixtures (import them into a test module: ``from k8s_integration._tfk import ...``) ---
import pytest  # noqa: E402


@pytest.fixture(scope="package")
def tfk_conn(k8s_cluster) -> Iterator[str]:
    """The admin kubeconfig as the ``kubernetes`` connection ``CONN_ID``."""
    with use_connection(k8s_cluster.kubeconfig) as conn_id:
        yield conn_id


@pytest.fixture
def tfk_ns(k8s_api, k8s_namespace: str) -> str:
    """A fresh namespace enforcing the ``restricted`` Pod Security Standard, so the API
    server's PodSecurity admission checks the hardened pods the Job controller
    creates from the provider's templates."""
    client.CoreV1Api(k8s_api).patch_namespace(
        k8s_namespace,
        {
            "metadata": {
                "labels": {
                    "pod-security.kubernetes.io/enforce": "restricted",
                    "pod-security.kubernetes.io/enforce-version": "latest",
                }
            }
        },
    )
    return k8s_namespace


# -- the operator in a separate process (a worker that gets killed) ---------------------
#: Runs TFTrainingOperator.execute in its own process, with the SIGTERM handler of Airflow's
#: task runner (airflow.sdk.execution_time.task_runner: ``_on_term`` calls ``on_kill``), so
#: a SIGTERM there is what a task gets on mark-failed or a dagrun_timeout. argv: namespace,
#: run id, spec JSON. Prints "EXECUTING" before waiting and "RESULT <json>" / "RAISED ...".
OPERATOR_SCRIPT = r"""
import json, os, signal, sys
sys.path.insert(0, os.environ["TFK_TESTS_DIR"])
from k8s_integration import _tfk

namespace, run_id, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
op = _tfk.make_op(namespace, spec)
ctx = _tfk.task_context(run_id)

def _on_term(signum, frame):  # as airflow.sdk.execution_time.task_runner does
    print("SIGTERM: on_kill", flush=True)
    op.on_kill()

signal.signal(signal.SIGTERM, _on_term)
print("EXECUTING", flush=True)
try:
    print("RESULT " + json.dumps(op.execute(ctx)), flush=True)
except BaseException as exc:
    print(f"RAISED {type(exc).__name__}: {exc}", flush=True)
    raise
"""


def start_operator_process(namespace: str, run_id: str, spec_data: dict[str, Any]):
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "TFK_TESTS_DIR": str(Path(__file__).resolve().parents[1])}
    return subprocess.Popen(
        [sys.executable, "-c", OPERATOR_SCRIPT, namespace, run_id, json.dumps(spec_data)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
