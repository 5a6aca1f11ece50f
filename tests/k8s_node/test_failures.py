"""Failures from real containers on the real node fail the training fast, with the pod's
own reason and an excerpt of its real log; a transient exit is retried and the training
resumes from its checkpoint."""

from __future__ import annotations

import re
import time
import uuid

import pytest

from airflow_tfk.core.errors import TrainingFailed

from . import _tfk

pytestmark = pytest.mark.k8s_node


def _fails(spec_data: dict, ctx: dict) -> tuple[TrainingFailed, float]:
    t0 = time.monotonic()
    with pytest.raises(TrainingFailed) as err:
        _tfk.make_op(spec_data).execute(ctx)
    return err.value, time.monotonic() - t0


def test_permanent_exit_code_fails_fast_with_the_real_log(
    k8s_node, node_api, node_ns, node_conn, capfd
) -> None:
    ctx = _tfk.fresh_context()
    mark = f"boom-{uuid.uuid4().hex[:6]}"
    spec_data = _tfk.spec(
        node_ns,
        "all_reduce",
        workers=1,
        command=_tfk.shell(f"echo {mark} >&2; exit 3"),
        permanent_exit_codes=[3],
    )
    err, took = _fails(spec_data, ctx)
    assert err.task == "worker-0" and "exit code 3" in str(err), err
    out = capfd.readouterr().out
    excerpt = out.split("----- log of worker-0", 1)[1].split("----- end of worker-0", 1)[0]
    assert mark in excerpt, out[-2000:]  # the failed task's excerpt is its real log
    assert took < 60, took
    _tfk.wait_for("cluster deleted", lambda: not _tfk.pods(node_api, node_ns, _tfk.cluster_name(ctx)), 60)
    print(f"permanent exit code: failed in {took:.1f}s")


def test_over_the_memory_limit_is_oomkilled(k8s_node, node_api, node_ns, node_conn) -> None:
    ctx = _tfk.fresh_context()
    spec_data = _tfk.spec(
        node_ns,
        "all_reduce",
        workers=1,
        command=_tfk.py("import time; b = b'x' * (400 << 20); time.sleep(60)"),
    )
    spec_data["worker"]["resources"] = {"memory": "96Mi", "memory_limit": "96Mi"}
    err, took = _fails(spec_data, ctx)
    assert err.task == "worker-0" and err.reason == "OOMKilled", err
    print(f"OOMKilled: failed in {took:.1f}s")


def test_missing_image_fails_fast_naming_it(k8s_node, node_api, node_ns, node_conn) -> None:
    ctx = _tfk.fresh_context()
    image = f"tfk.local/not-imported-{uuid.uuid4().hex[:6]}:1"
    err, took = _fails(_tfk.spec(node_ns, "all_reduce", workers=1, image=image), ctx)
    assert image in str(err) and "ErrImageNeverPull" in str(err), err
    assert took < 60, took
    print(f"missing image: failed in {took:.1f}s")


# A first attempt that dies (exit 75, not a permanent code) right after the first
# checkpoint, then a retry with the same arguments. The marker lives on the models volume.
_CRASH_ONCE = r"""
marker="$TFK_MODEL_DIR/.first-attempt"
ckpt="$TFK_MODEL_DIR/.checkpoints/$TFK_CLUSTER_NAME/checkpoint"
if [ ! -e "$marker" ]; then
  touch "$marker"
  "$@" &
  pid=$!
  while [ ! -e "$ckpt" ]; do kill -0 $pid 2>/dev/null || exit 9; sleep 0.1; done
  kill -9 $pid
  echo "crashing after the first checkpoint" >&2
  exit 75
fi
exec "$@"
"""


def test_transient_exit_is_retried_and_resumes_from_the_checkpoint(
    k8s_node, node_api, node_ns, node_conn, local_volumes, capfd
) -> None:
    ctx, name, models = _tfk.run_with_models_volume(local_volumes, node_ns)
    spec_data = _tfk.spec(
        node_ns,
        "all_reduce",
        workers=1,
        command=["sh", "-c", _CRASH_ONCE, "sh", "python", "-m", "airflow_tfk.runtime.examples.digits_app"],
        args=["--tfk_steps", "300", "--tfk_checkpoint_every", "10"],
        retries_per_index=1,
        storage={"models": {"size": "1Gi", "storage_class": "tfk-local"}},
    )
    result = _tfk.make_op(spec_data).execute(ctx)
    assert result["outcome"] == "succeeded", result
    assert (models / ".first-attempt").exists()
    pods = sorted(_tfk.pods(node_api, node_ns, name, "worker"), key=lambda p: p.metadata.creation_timestamp)
    assert len(pods) == 2, [p.metadata.name for p in pods]
    assert pods[0].status.phase == "Failed" and pods[1].status.phase == "Succeeded"
    second = _tfk.pod_log(node_api, node_ns, pods[1].metadata.name)
    resumed = re.search(r"resumed from \S+ at step (\d+)", second)
    assert resumed and int(resumed.group(1)) >= 10, second[-3000:]
    steps = [int(s) for s in re.findall(r'"step":\s*(\d+)', second)]
    assert steps and min(steps) >= int(resumed.group(1)) and max(steps) == 300, steps
