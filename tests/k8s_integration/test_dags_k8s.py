"""`airflow dags test` of an example DAG on the kubernetes backend against the real API
server: the DAG reads TFK_BACKEND / TFK_KUBERNETES_CONN_ID / TFK_NAMESPACE and Airflow's
default_deferrable, the
``kubernetes`` connection comes from ``AIRFLOW_CONN_<ID>`` built from the generated
kubeconfig, and a background thread plays the training containers (KWOK annotations).

``tfk_ui_training`` in ``all_reduce`` mode (no PS, so no 30 s grace period to sit
through); blocking, then deferrable (``dags test`` runs the trigger in-process). The
claims the DAG mounts (tfk-logs, tfk-models) are created first, bound to static PVs.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from k8s_integration import _tfk
from tests.helpers import dags_test, migrated_airflow_home

pytestmark = pytest.mark.k8s

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory) -> dict[str, str]:
    return migrated_airflow_home(tmp_path_factory.mktemp("airflow-k8s"))


def _claims(api, ns: str) -> list[str]:
    """The DAG's existing claims, bound to static PVs (there is no provisioner)."""
    core = client.CoreV1Api(api)
    pvs = []
    for claim in ("tfk-logs", "tfk-models"):
        pv = _tfk.static_volume(api, ns, claim)
        _tfk.create_claim(api, ns, claim, volume=pv)
        pvs.append(pv)
    _tfk.wait_for(
        "claims Bound",
        lambda: all(
            core.read_namespaced_persistent_volume_claim(c, ns).status.phase == "Bound"
            for c in ("tfk-logs", "tfk-models")
        ),
        timeout=30,
    )
    return pvs


@pytest.mark.parametrize("deferrable", [False, True], ids=["blocking", "deferrable"])
def test_dags_test_ui_training_on_kubernetes(
    k8s_cluster, k8s_api, k8s_namespace, airflow_home, deferrable
) -> None:
    ns = k8s_namespace
    pvs = _claims(k8s_api, ns)
    conn_id = f"tfk_dags_{uuid.uuid4().hex[:6]}"
    env = {
        **airflow_home,
        f"AIRFLOW_CONN_{conn_id.upper()}": _tfk.connection_json(k8s_cluster.kubeconfig),
        "TFK_BACKEND": "kubernetes",
        "TFK_KUBERNETES_CONN_ID": conn_id,
        "TFK_NAMESPACE": ns,
        "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": str(deferrable).lower(),
    }
    conf = {"mode": "all_reduce", "ps": 0, "workers": 3, "steps": 50}
    try:
        with _tfk.PodDriver(k8s_api, ns) as driver:  # every training pod in the namespace
            run = dags_test(env, "tfk_ui_training", conf=conf, timeout=240)
        out = run.stdout + run.stderr
        assert run.returncode == 0, out[-6000:]
        assert "state=success" in out or "DagRunState.SUCCESS" in out, out[-4000:]
        assert "on the kubernetes backend: worker x3, mode all_reduce" in out, out[-4000:]
        assert "training succeeded" in out, out[-4000:]
        if deferrable:
            assert "[DAG TEST] running trigger in line" in out, out[-4000:]
        assert len(driver.done) == 3  # the three worker pods ran on the real cluster
        jobs = client.BatchV1Api(k8s_api).list_namespaced_job(ns).items
        assert len(jobs) == 1 and jobs[0].status.succeeded == 3
        pod = _tfk.pods(k8s_api, ns, jobs[0].metadata.labels["tfk.airflow.apache.org/cluster"])[0]
        claims = {v.persistent_volume_claim.claim_name for v in pod.spec.volumes if v.persistent_volume_claim}
        assert claims == {"tfk-logs", "tfk-models"}
        assert jobs[0].metadata.labels["tfk.airflow.apache.org/dag-id"] == "tfk_ui_training"
    finally:
        for pv in pvs:
            client.CoreV1Api(k8s_api).delete_persistent_volume(pv)
