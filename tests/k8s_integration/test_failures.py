"""Failures fail fast with the pod's own reason, against the real Job controller:

- a worker exits with a permanent exit code -> podFailurePolicy FailIndex -> the training
  fails naming that task and code (seconds, not a timeout); a transient code is retried;
- a pod stuck Unschedulable, or in ImagePullBackOff, past the backend's (small) timeout
  -> the training fails with that reason.

Every failure deletes the cluster: nothing with its label is left.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from k8s import harness

from airflow_tfk import naming
from airflow_tfk.errors import TrainingFailed
from k8s_integration import _tfk

pytestmark = pytest.mark.k8s
tfk_conn, tfk_ns = _tfk.tfk_conn, _tfk.tfk_ns  # fixtures


def test_permanent_exit_code_fails_fast_naming_task_and_code(k8s_api, tfk_ns, tfk_conn) -> None:
    ctx = _tfk.task_context("manual__exit3")
    name = _tfk.cluster_name(ctx)
    op = _tfk.make_op(
        tfk_ns,
        _tfk.spec(tfk_ns, "between_graph", workers=3, ps=1, retries_per_index=2, permanent_exit_codes=[3]),
    )
    failed_at: list[float] = []

    def rule(pod):
        if pod.metadata.labels.get(naming.LABEL_ROLE) != "worker" or pod.status.phase != "Running":
            return None
        if _tfk.index_of(pod) == 1:
            failed_at.append(time.time())
            return {harness.EXIT_CODE: "3", harness.EXIT_MESSAGE: "bad input file"}
        return None  # the others keep training

    t0 = time.monotonic()
    with _tfk.PodDriver(k8s_api, tfk_ns, name, rule=rule), pytest.raises(TrainingFailed) as err:
        op.execute(ctx)
    raised = time.time()
    assert err.value.task == "worker-1", err.value
    assert "exit code 3" in str(err.value) and "bad input file" in str(err.value)
    # Fast: the first failure ends it, no retry of a permanent code, no timeout.
    assert raised - failed_at[0] < 10, raised - failed_at[0]
    assert time.monotonic() - t0 < 30
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, name)


def test_transient_exit_code_is_retried_then_succeeds(k8s_api, tfk_ns, tfk_conn) -> None:
    """Exit code 75 is not permanent: the Job controller retries the index (within
    retries_per_index) and the training still succeeds."""
    ctx = _tfk.task_context("manual__exit75")
    name = _tfk.cluster_name(ctx)
    op = _tfk.make_op(
        tfk_ns, _tfk.spec(tfk_ns, "all_reduce", workers=2, ps=0, retries_per_index=1), cleanup="all"
    )
    seen: dict[int, int] = {}

    def rule(pod):
        if pod.status.phase != "Running":
            return None
        i = _tfk.index_of(pod)
        seen[i] = seen.get(i, 0) + 1
        code = "75" if i == 0 and seen[i] == 1 else "0"
        return {harness.EXIT_CODE: code}

    with _tfk.PodDriver(k8s_api, tfk_ns, name, rule=rule):
        assert op.execute(ctx)["outcome"] == "succeeded"
    assert seen[0] == 2 and seen[1] == 1  # index 0 ran twice
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, name)


def test_unschedulable_fails_with_that_reason(k8s_api, tfk_ns, tfk_conn) -> None:
    ctx = _tfk.task_context("manual__nowhere")
    name = _tfk.cluster_name(ctx)
    spec = _tfk.spec(tfk_ns, "between_graph", workers=2, ps=1)
    spec["worker"]["node_selector"] = dict(harness.UNSCHEDULABLE_NODE_SELECTOR)
    op = _tfk.make_op(tfk_ns, spec, backend_config={"unschedulable_timeout": 3})
    t0 = time.monotonic()
    with pytest.raises(TrainingFailed) as err:
        op.execute(ctx)
    took = time.monotonic() - t0
    assert err.value.task.startswith("worker-") and err.value.reason == "Unschedulable", err.value
    assert "node affinity/selector" in str(err.value)  # the scheduler's own message
    assert 3 <= took < 20, took
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, name)


def test_image_pull_backoff_fails_with_that_reason(k8s_cluster, k8s_api, tfk_ns, tfk_conn) -> None:
    """KWOK's stage turns a pod annotated before it is scheduled into a real
    ImagePullBackOff status. The workers target a node pool that appears only after their
    pods were annotated; the PS run normally."""
    ctx = _tfk.task_context("manual__pull")
    name = _tfk.cluster_name(ctx)
    pool = f"pull-{uuid.uuid4().hex[:6]}"
    spec = _tfk.spec(tfk_ns, "between_graph", workers=2, ps=1)
    spec["worker"]["node_selector"] = {"kwok.tfk.test/pool": pool}
    op = _tfk.make_op(tfk_ns, spec, backend_config={"image_pull_timeout": 3, "unschedulable_timeout": 600})
    errors: list[BaseException] = []

    def pull_fails() -> None:
        try:
            names = _tfk.wait_for(
                "unscheduled worker pods",
                lambda: (
                    len(p := _tfk.pods(k8s_api, tfk_ns, name, "worker")) == 2 and [x.metadata.name for x in p]
                ),
                timeout=30,
            )
            for pod in names:
                _tfk.annotate(
                    k8s_api,
                    tfk_ns,
                    pod,
                    {
                        harness.WAITING_REASON: "ImagePullBackOff",
                        harness.EXIT_MESSAGE: f'Back-off pulling image "{_tfk.IMAGE}"',
                    },
                )
            k8s_cluster.add_node(f"kwok-{pool}", labels={"kwok.tfk.test/pool": pool})
        except BaseException as exc:
            errors.append(exc)

    helper = threading.Thread(target=pull_fails)
    helper.start()
    t0 = time.monotonic()
    with pytest.raises(TrainingFailed) as err:
        op.execute(ctx)
    took = time.monotonic() - t0
    helper.join(30)
    assert not errors, errors
    assert err.value.task.startswith("worker-") and err.value.reason == "ImagePullBackOff", err.value
    assert "Back-off pulling image" in str(err.value)
    assert took < 30, took
    _tfk.wait_no_leftovers(k8s_api, tfk_ns, name)
