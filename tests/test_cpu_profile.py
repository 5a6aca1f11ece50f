"""scripts/cpu_profile.py: the CPU of a test run by kind of process, from process
accounting's records joined with the venv hook's command lines on pid and start time."""

from __future__ import annotations

import time
from pathlib import Path

from tests import file_module

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "cpu_profile.py"
profile = file_module.load("cpu_profile", SCRIPT)

T0 = time.mktime(time.strptime("Sun Nov 29 22:31:56 2026", "%a %b %d %H:%M:%S %Y"))


def _acct(comm: str, utime: int, stime: int, pid: int, ppid: int, at: float) -> str:
    """One line as ``dump-acct`` prints it (times in hundredths of a second)."""
    stamp = time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(at))
    return (
        f"{comm:<16}|v3|{utime:9.2f}|{stime:9.2f}|  100.00|     0|     0|1000.00|  0.00|"
        f"{pid:8d}|{ppid:8d}|     |       0|__      |{stamp}"
    )


def test_each_process_counts_once_under_its_kind_and_a_reused_pid_is_told_apart() -> None:
    log = [
        f"100\t1\t{T0:.2f}\t/v/bin/python -m pytest -q\n",
        f"200\t100\t{T0 + 10:.2f}\t/v/bin/python -m airflow_tfk.runtime.examples.digits_app --tfk_steps 5\n",
        # pid 200 again, 20 minutes later: another process
        f"200\t100\t{T0 + 1200:.2f}\t/v/bin/python /v/bin/airflow dags test my_dag --conf {{}}\n",
        f"300\t100\t{T0 + 20:.2f}\t/v/bin/python -I /r/supervisor.py --daemonize d\n",
        f"400\t100\t{T0 + 30:.2f}\t/v/bin/python -c import sys\n",
        "print('a -c script's second line')\n",
    ]
    dump = "\n".join(
        [
            _acct("python", 600, 50, 200, 100, T0 + 10),  # 6.5 s, the digits task
            _acct("python", 1500, 200, 200, 100, T0 + 1201),  # 17 s, the dags test
            _acct("python", 30, 10, 300, 100, T0 + 21),
            _acct("python", 100, 0, 400, 100, T0 + 30),
            _acct("kube-apiserver", 4000, 900, 500, 1, T0 + 40),
            _acct("python", 900, 0, 600, 1, T0 + 50),  # a Python outside the venv
            _acct("python", 99900, 0, 700, 1, T0 - 600),  # before the run: not counted
            _acct("python", 700, 0, 100, 1, T0),
            "not a record",
        ]
    )
    rows = {
        kind: (round(cpu, 2), n)
        for kind, cpu, n in profile.table(profile.parse_dump(dump), profile.parse_argv_log(log))
    }
    assert rows == {
        "task: airflow_tfk.runtime.examples.digits_app": (6.5, 1),
        "airflow dags test": (17.0, 1),
        "local task supervisor": (0.4, 1),
        "python -c": (1.0, 1),
        "program: kube-apiserver": (49.0, 1),
        "program: python": (9.0, 1),
        "pytest lane (its own work)": (7.0, 1),
    }


def test_kinds_of_command_lines() -> None:
    record = profile.Record("python", 1.0, 1, 0, T0)
    cases = {
        "/v/bin/python -m airflow_tfk.cli.main render x.yaml": "python -m airflow_tfk.cli.main",
        "/v/bin/python /v/bin/airflow-tfk airflow --quiet": "airflow-tfk airflow",
        "/v/bin/python /r/tests/backends/tasks/task.py --ps_hosts=a": "script: task.py",
        "/v/bin/python .venv/bin/mypy --no-error-summary": "python: .venv/bin/mypy --no-error-summary",
        "/v/bin/python -m airflow_tfk.runtime.launch -- python train.py": "task: airflow_tfk.runtime.launch",
    }
    for argv, want in cases.items():
        assert profile.kind(record, argv) == want, argv
    assert profile.kind(profile.Record("etcd", 1.0, 1, 0, T0), None) == "program: etcd"
