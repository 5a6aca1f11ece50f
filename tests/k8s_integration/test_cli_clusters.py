"""`airflow-tfk clusters` against the real API server (KWOK nodes): list, status, delete
with the operators' owner checks, and the sweep reading a real Airflow database, each as
the console command a person types (a kubeconfig, no connection)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.kubernetes.backend import KubernetesBackend
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.spec.cluster import TFClusterSpec
from k8s_integration import _tfk
from tests.helpers import ROOT, migrated_airflow_home

pytestmark = pytest.mark.k8s
tfk_conn, tfk_ns = _tfk.tfk_conn, _tfk.tfk_ns  # fixtures

OWNER = RunIdentity("cli_dag", "train", "manual__1", -1)
GONE = RunIdentity("cli_dag", "train", "manual__gone", -1)


def test_list_status_delete_and_sweep(k8s_cluster, k8s_api, tfk_ns, tfk_conn, tmp_path: Path) -> None:
    env = migrated_airflow_home(tmp_path / "home")

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        cmd = [
            sys.executable,
            "-m",
            "airflow_tfk.cli.main",
            "clusters",
            *argv,
            "--kubeconfig",
            str(k8s_cluster.kubeconfig),
        ]
        return subprocess.run(cmd, env=env, cwd=ROOT, text=True, capture_output=True, timeout=120)

    backend = KubernetesBackend(conn_id=tfk_conn)
    for name, owner in (("cli-a", OWNER), ("cli-orphan", GONE)):
        backend.create(TFClusterSpec.from_dict({**_tfk.spec(tfk_ns, workers=2, ps=1), "name": name}), owner)
    _tfk.wait_for(
        "the pods running",
        lambda: "worker 2 running" in backend.status(ClusterRef("cli-a", tfk_ns)).summary(),
    )

    out = cli("list", "-n", tfk_ns)
    assert out.returncode == 0, out.stderr
    rows = {line.split("|")[1].strip(): line for line in out.stdout.splitlines()[2:]}  # under the rule
    assert set(rows) == {"cli-a", "cli-orphan"}
    assert "run 'manual__1'" in rows["cli-a"] and "run 'manual__gone'" in rows["cli-orphan"]

    out = cli("status", "cli-a", "-n", tfk_ns)
    assert out.returncode == 0, out.stderr
    assert "owner:     dag 'cli_dag', task 'train', run 'manual__1'" in out.stdout
    assert "ps 1 running" in out.stdout and "worker-1" in out.stdout
    # KWOK's pods have no kubelet to serve their logs: the status says so instead of failing
    assert "progress:  unknown: logs of worker-0: HTTP 500" in out.stdout
    out = cli("logs", "cli-a", "worker-0", "-n", tfk_ns)
    assert out.returncode == 1 and out.stderr.startswith("error: KubernetesApiError: logs of worker-0"), (
        out.stderr
    )

    # Another task instance: refused, nothing deleted.
    out = cli("delete", "cli-a", "-n", tfk_ns, "--dag-id", "cli_dag", "--task-id", "train", "--run-id", "x")
    assert (
        out.returncode == 1
        and "belongs to dag 'cli_dag'" in out.stderr
        and "refusing to delete" in out.stderr
    )
    assert backend.exists(ClusterRef("cli-a", tfk_ns))

    # The sweep asks the Airflow database: neither task instance ever ran there, so both
    # clusters are orphans; the dry run keeps them.
    out = cli("sweep", "-n", tfk_ns, "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "would delete orphaned cluster cli-orphan" in out.stdout and "is gone" in out.stdout
    out = cli(
        "delete", "cli-a", "-n", tfk_ns, "--dag-id", "cli_dag", "--task-id", "train", "--run-id", "manual__1"
    )
    assert out.returncode == 0 and f"deleted cluster cli-a in {tfk_ns}" in out.stdout, out.stderr
    out = cli("sweep", "-n", tfk_ns)
    assert out.returncode == 0 and f"deleted cluster cli-orphan in {tfk_ns}" in out.stdout, out.stderr
    assert "orphan sweeper: orphaned" in out.stdout
    for name in ("cli-a", "cli-orphan"):
        _tfk.wait_no_leftovers(k8s_api, tfk_ns, name)
    out = cli("list", "-n", tfk_ns)
    assert out.stdout.strip() == f"no clusters in namespace {tfk_ns}"
