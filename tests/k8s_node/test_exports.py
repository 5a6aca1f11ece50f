"""A failed run's export on Kubernetes is set aside on its claim by a real pod: the
provider cannot see the PVC, so a one-shot Job renames the version the run reported
exporting, and nothing else on the claim."""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client

from airflow_tfk.backends.kubernetes.exports import LABEL_SET_ASIDE_OF
from airflow_tfk.core.errors import TrainingFailed

from . import _tfk
from .test_serving import _claim

pytestmark = pytest.mark.k8s_node

# Exports version 1 the way the runtime reports it, then fails for good.
EXPORT_THEN_FAIL = (
    'd="$TFK_MODEL_DIR/m/1"; mkdir -p "$d" && echo x > "$d/saved_model.pb" && '
    'echo "{\\"tfk\\":\\"export\\",\\"path\\":\\"$d\\",\\"model_name\\":\\"m\\",\\"version\\":1}"; '
    "exit 3"
)


def test_a_failed_runs_export_is_set_aside_on_its_claim(
    k8s_node, node_api, node_ns, node_conn, local_volumes, capfd
) -> None:
    _claim(node_api, node_ns, local_volumes, "tfk-models")
    model = local_volumes.node.workdir / "pv" / local_volumes.names[-1] / "m"
    model.mkdir()
    model.chmod(0o777)
    (model / "7").mkdir()  # an earlier run's version: not this run's to touch
    ctx = _tfk.task_context(f"manual__{uuid.uuid4().hex[:8]}")
    spec_data = _tfk.spec(
        node_ns,
        "all_reduce",
        workers=1,
        command=_tfk.shell(EXPORT_THEN_FAIL),
        permanent_exit_codes=[3],
        storage={"models": {"claim": "tfk-models"}},
    )
    with pytest.raises(TrainingFailed):
        _tfk.make_op(spec_data).execute(ctx)
    out = capfd.readouterr().out
    names = sorted(p.name for p in model.iterdir())
    assert "1" not in names and any(n.startswith(".failed-1-") for n in names), names
    assert "7" in names, names
    assert "set aside, so it is never published" in out, out[-2000:]
    jobs = client.BatchV1Api(node_api).list_namespaced_job(node_ns, label_selector=LABEL_SET_ASIDE_OF)
    assert [j.metadata.name for j in jobs.items if not j.metadata.deletion_timestamp] == []
