"""The README's "Operating trainings" commands as written for Kubernetes (no ``--backend``:
the default), against the real API server with KWOK nodes through ``--kubeconfig``, as the
section offers. tests/e2e/test_day_two.py runs the same lines on the local backend, logs
and the example output included; KWOK has no kubelet, so ``logs`` has nothing to show (an
empty answer, or an error that says so: never a traceback).

Each command runs through the CLI's own ``main`` with its argv as typed, in one interpreter
that the test starts with the CLI's environment (an Airflow home of its own) and feeds one
command at a time: a fresh interpreter per command cost 14-34 s apiece under CI's load, so
this test used to run on request only."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.kubernetes.backend import KubernetesBackend
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.spec.cluster import TFClusterSpec
from k8s_integration import _tfk
from tests.docs_commands import documented_commands, section
from tests.helpers import ROOT, migrated_airflow_home

pytestmark = pytest.mark.k8s
tfk_conn, tfk_ns = _tfk.tfk_conn, _tfk.tfk_ns  # fixtures

#: Runs one CLI command per line of stdin (a JSON argv) through ``main``, and answers one
#: JSON line: the exit code and what the command printed.
DRIVER = r"""
import contextlib, io, json, sys
from airflow_tfk.cli.main import main
for line in sys.stdin:
    argv = json.loads(line)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    print(json.dumps({"code": code or 0, "out": out.getvalue()}), flush=True)
"""

OWNER = RunIdentity("digits_nightly", "train", "scheduled__2026-11-25T02:00:00+00:00", -1)
GONE = RunIdentity("old_dag", "train", "manual__gone", -1)


def test_readme_cluster_commands_on_kubernetes(
    k8s_cluster, k8s_api, tfk_ns, tfk_conn, tmp_path: Path
) -> None:
    commands = documented_commands(
        section(ROOT / "docs" / "operations.md", "## Operating trainings: `airflow-tfk clusters`"), "bash"
    )
    assert [argv[2] for argv, _ in commands] == ["list", "status", "logs", "delete", "sweep"]
    env = migrated_airflow_home(tmp_path / "home")
    backend = KubernetesBackend(conn_id=tfk_conn)
    for name, owner in (("digits-nightly", OWNER), ("orphan-of-old-dag", GONE)):
        backend.create(TFClusterSpec.from_dict({**_tfk.spec(tfk_ns, workers=2, ps=1), "name": name}), owner)
    ref = ClusterRef("digits-nightly", tfk_ns)
    _tfk.wait_for("the pods running", lambda: "worker 2 running" in backend.status(ref).summary())
    fill = {"NAME": ref.name, "NS": tfk_ns, "D": OWNER.dag_id, "T": OWNER.task_id, "R": OWNER.run_id}

    cli = subprocess.Popen(
        [sys.executable, "-c", DRIVER],
        env=env,
        cwd=ROOT,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )

    def typed(argv: list[str], code: int | tuple[int, ...] = 0) -> str:
        argv = [fill.get(a, a) for a in argv]
        t0 = time.monotonic()
        assert cli.stdin is not None and cli.stdout is not None
        cli.stdin.write(json.dumps([*argv[1:], "--kubeconfig", str(k8s_cluster.kubeconfig)]) + "\n")
        cli.stdin.flush()
        line = cli.stdout.readline()
        assert line, cli.stderr.read() if cli.stderr else "the CLI's interpreter ended"
        answer = json.loads(line)
        print(f"{shlex.join(argv)}: {time.monotonic() - t0:.1f}s")
        codes = code if isinstance(code, tuple) else (code,)
        assert answer["code"] in codes, (shlex.join(argv), answer)
        assert "Traceback" not in answer["out"], answer["out"]
        return str(answer["out"])

    for argv, _ in commands:
        verb = argv[2]
        if verb == "list":
            rows = [[c.strip() for c in r.split("|")] for r in typed(argv).splitlines()]
            assert rows[0] == ["namespace", "name", "age", "tasks", "owner"]
            mine = [r for r in rows if r[:2] == [tfk_ns, ref.name]]
            assert len(mine) == 1 and "ps 1 running; worker 2 running" in mine[0][3], rows
            assert f"run '{OWNER.run_id}'" in mine[0][4]
        elif verb == "status":
            out = typed(argv)
            assert f"owner:     dag '{OWNER.dag_id}', task '{OWNER.task_id}', run '{OWNER.run_id}'" in out
            assert "worker-1     running, restarts 0" in out and "ps-0         running, restarts 0" in out
        elif verb == "logs":  # no kubelet behind KWOK's pods: no lines, or a clear error
            out = typed(argv, code=(0, 1))
            assert out == "" or out.startswith("error: KubernetesApiError: logs of worker-1"), out
        elif verb == "delete":
            refused = typed([*argv[: argv.index("R")], "someone_else"], code=1)
            assert f"belongs to dag '{OWNER.dag_id}'" in refused and backend.exists(ref)
            assert f"deleted cluster {ref.name} in {tfk_ns}" in typed(argv)
            assert not backend.exists(ref)
        elif verb == "sweep":
            out = typed(argv)
            assert "would delete orphaned cluster orphan-of-old-dag" in out, out
            assert backend.exists(ClusterRef("orphan-of-old-dag", tfk_ns))
    assert cli.stdin is not None
    cli.stdin.close()
    assert cli.wait(timeout=60) == 0
    backend.delete(ClusterRef("orphan-of-old-dag", tfk_ns))
    for name in ("digits-nightly", "orphan-of-old-dag"):
        _tfk.wait_no_leftovers(k8s_api, tfk_ns, name)
