"""The launcher runs a Python program in its own process when Linux would refuse the exec:
the script sees the full legacy flags and TF_CONFIG of 5,000 workers, keeps its PID, exit
code and sys.path, and its own subprocesses still start."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from airflow_tfk.protocol.exec_limits import MAX_STRING_CHARS
from airflow_tfk.runtime import in_process

from .localcluster import REPO, task_env

SCRIPT = str(REPO / "tests" / "runtime" / "tf1_hosts_script.py")
WORKER = "big-worker-{i}.big-worker.team-a.svc:2222"
PS = "big-ps-{i}.big-ps.team-a.svc:2222"


def compact_env(workers: int, ps: int = 3, index: int | None = None) -> dict[str, str]:
    """A worker's environment as a pod of a large cluster has it: the compact map."""
    env = task_env({}, "worker", workers - 1 if index is None else index, "between_graph")
    env["TFK_CLUSTER"] = json.dumps(
        {"ps": {"pattern": PS, "count": ps}, "worker": {"pattern": WORKER, "count": workers}}
    )
    return env


def hosts(pattern: str, n: int) -> list[str]:
    return [pattern.replace("{i}", str(i)) for i in range(n)]


def digest(hosts: list[str]) -> str:
    return hashlib.sha256(",".join(hosts).encode()).hexdigest()


def launch(argv: list[str], env: dict[str, str], python: str = sys.executable) -> subprocess.CompletedProcess:
    return subprocess.run(
        [python, "-m", "airflow_tfk.runtime.launch", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )


def seen(res: subprocess.CompletedProcess) -> dict:
    line = next((x for x in res.stdout.splitlines() if x.startswith("TF1HOSTS ")), None)
    assert line is not None, (res.returncode, res.stdout[-2000:], res.stderr[-2000:])
    return json.loads(line.split(" ", 1)[1])


def test_5000_workers_reach_the_script_in_process_with_every_host():
    res = launch(["--tf1-flags", "--", sys.executable, SCRIPT, "--extra", "x"], compact_env(5000))
    assert res.returncode == 0, res.stderr[-2000:]
    got = seen(res)
    # Exactly the flags the pod would have carried: every host, in order.
    assert got["workers"] == 5000 and got["worker_sha"] == digest(hosts(WORKER, 5000))
    assert got["ps"] == 3 and got["ps_sha"] == digest(hosts(PS, 3))
    assert (got["job_name"], got["task_index"]) == ("worker", 4999)
    assert got["argv0"] == SCRIPT and got["rest"] == ["--extra", "x"]
    # ...and TF_CONFIG with all of them, longer than any exec could carry.
    assert got["tf_config_workers"] == 5000 and got["tf_config_worker_sha"] == got["worker_sha"]
    assert got["tf_config_chars"] > MAX_STRING_CHARS
    # Its subprocesses start: TF_CONFIG stays in the script's os.environ only.
    assert (got["child_exit"], got["child_tf_config_chars"]) == (0, "0")
    assert "in this process" in res.stderr and "TF_CONFIG not passed on" in res.stderr
    assert len(res.stderr) < 2000, "the log line must not print the host list"


def test_a_small_cluster_is_still_execd_with_the_same_flags():
    res = launch(["--tf1-flags", "--", sys.executable, SCRIPT], compact_env(4))
    assert res.returncode == 0, res.stderr
    got = seen(res)
    assert got["workers"] == 4 and got["worker_sha"] == digest(hosts(WORKER, 4))
    assert " exec " in res.stderr and "in this process" not in res.stderr
    # exec'd with TF_CONFIG in its environment: the child inherits it
    assert int(got["child_tf_config_chars"]) == got["tf_config_chars"] > 0


def test_the_scripts_exit_code_and_pid_are_the_tasks():
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "airflow_tfk.runtime.launch",
            "--tf1-flags",
            "--",
            sys.executable,
            SCRIPT,
            "--exit_code",
            "7",
        ],
        env=compact_env(5000),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 7, err[-2000:]
    got = json.loads(next(x for x in out.splitlines() if x.startswith("TF1HOSTS ")).split(" ", 1)[1])
    assert got["pid"] == proc.pid


def test_a_module_runs_in_process_too(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(open(SCRIPT).read())
    env = compact_env(5000)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    res = launch(["--tf1-flags", "--", sys.executable, "-m", "mypkg.train"], env)
    assert res.returncode == 0, res.stderr[-2000:]
    got = seen(res)
    assert got["workers"] == 5000 and got["argv0"] == str(pkg / "train.py")


def test_the_scripts_directory_is_first_on_its_path(tmp_path):
    (tmp_path / "helper_mod_tfk.py").write_text("VALUE = 41\n")
    script = tmp_path / "train.py"
    script.write_text(
        "import sys, helper_mod_tfk\n"
        "flags = [a for a in sys.argv if a.startswith('--worker_hosts=')]\n"
        "print('PATH0', sys.path[0], helper_mod_tfk.VALUE + 1, len(flags[0].split(',')), __name__)\n"
    )
    res = launch(["--tf1-flags", "--", sys.executable, str(script)], compact_env(5000))
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"PATH0 {tmp_path} 42 5000 __main__" in res.stdout


def test_an_exception_fails_the_task_with_its_traceback(tmp_path):
    script = tmp_path / "boom.py"
    script.write_text("raise RuntimeError('from the script')\n")
    res = launch(["--tf1-flags", "--", sys.executable, str(script)], compact_env(5000))
    assert res.returncode == 1
    assert "RuntimeError: from the script" in res.stderr


def test_the_tf1_shim_hooks_in_without_running_sitecustomize_twice(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(
        "import sys\nprint('FINDERS', sum(type(f).__name__ == '_Finder' for f in sys.meta_path))\n"
    )
    res = launch(["--tf1-flags", "--", sys.executable, str(script)], compact_env(5000))
    assert "FINDERS 1" in res.stdout, res.stderr[-2000:]
    env = compact_env(5000)
    res = launch(["--tf1-flags", "--no-device-filters", "--", sys.executable, str(script)], env)
    assert "FINDERS 0" in res.stdout, res.stderr[-2000:]


def test_another_program_over_the_limit_fails_permanently_saying_why():
    res = launch(["--tf1-flags", "--", "sh", "-c", "echo started"], compact_env(5000))
    assert res.returncode == 126
    assert "started" not in res.stdout
    assert "--worker_hosts=" in res.stderr and f"{MAX_STRING_CHARS:,}" in res.stderr
    assert "E2BIG" in res.stderr


def test_other_interpreter_options_are_not_run_in_process():
    res = launch(["--tf1-flags", "--", sys.executable, "-B", SCRIPT], compact_env(5000))
    assert res.returncode == 126 and "cannot exec" in res.stderr


@pytest.mark.parametrize(
    ("options", "orig", "same"),
    [
        ((), ["python", "-m", "airflow_tfk.runtime.launch", "--"], True),
        (("-u",), ["python", "-u", "-m", "airflow_tfk.runtime.launch"], True),
        (("-u",), ["python", "-m", "airflow_tfk.runtime.launch"], False),
        ((), ["python", "-O", "-m", "airflow_tfk.runtime.launch"], False),
    ],
)
def test_same_interpreter_needs_the_same_options(options, orig, same):
    from airflow_tfk.protocol.exec_limits import PythonCommand

    target = PythonCommand(sys.executable, options, "x.py", None, ())
    assert in_process.same_interpreter(target, sys.executable, in_process.own_options(orig)) is same


def test_a_venv_python_is_not_its_base_python(tmp_path):
    """A venv's python links to the base interpreter but has other packages."""
    from airflow_tfk.protocol.exec_limits import PythonCommand

    link = tmp_path / "python"
    link.symlink_to(sys.executable)
    target = PythonCommand(str(link), (), "x.py", None, ())
    assert not in_process.same_interpreter(target, sys.executable, ())
    assert in_process.same_interpreter(target, str(link), ())


def test_exec_refusal_is_the_kernels():
    limit = in_process.exec_limit()
    assert in_process.exec_refusal(["x" * limit], {}) is None
    assert "argument 0" in (in_process.exec_refusal(["x" * (limit + 1)], {}) or "")
    assert "TF_CONFIG" in (in_process.exec_refusal(["x"], {"TF_CONFIG": "y" * limit}) or "")


def test_a_training_app_keeps_a_long_tf_config_from_its_subprocesses():
    """The runtime builds TF_CONFIG in the TrainingApp's own process (no exec); over the
    exec limit it stays in os.environ, and the app's subprocesses still start."""
    code = (
        "import os, subprocess, sys\n"
        "from airflow_tfk.runtime.cluster import ensure_tf_config\n"
        "ensure_tf_config()\n"
        "child = subprocess.run([sys.executable, '-c', "
        '\'import os; print(len(os.environ.get("TF_CONFIG", "")))\'], capture_output=True, text=True)\n'
        "print('SIZES', len(os.environ['TF_CONFIG']), child.returncode, child.stdout.strip())\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        env=compact_env(5000),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    sizes = next(x for x in res.stdout.splitlines() if x.startswith("SIZES")).split()[1:]
    assert int(sizes[0]) > MAX_STRING_CHARS and sizes[1:] == ["0", "0"], res.stderr[-2000:]
    small = subprocess.run(
        [sys.executable, "-c", code], env=compact_env(4), capture_output=True, text=True, timeout=60, cwd=REPO
    )
    sizes = next(x for x in small.stdout.splitlines() if x.startswith("SIZES")).split()[1:]
    assert sizes[1] == "0" and sizes[2] == sizes[0], "a TF_CONFIG that fits is passed on"


def test_tensorflow_sessions_get_the_shims_filters_in_process(tmp_path):
    """The device-filter shim, loaded by the launcher into its own process, patches the
    real TensorFlow the script imports afterwards (and only once)."""
    script = tmp_path / "sessions.py"
    script.write_text(
        "import json, sys, tensorflow as tf\n"
        "from tensorflow.python.client import session as s\n"
        "seen = []\n"
        "def spy(self, target='', graph=None, config=None):\n"
        "    seen.append(list(config.device_filters) if config is not None else None)\n"
        "    raise RuntimeError('stop')  # no master needed\n"
        "s.BaseSession.__init__ = spy\n"
        "for target in ('grpc://127.0.0.1:1', ''):\n"
        "    try:\n"
        "        tf.compat.v1.Session(target)\n"
        "    except RuntimeError:\n"
        "        pass\n"
        "hosts = [a for a in sys.argv if a.startswith('--worker_hosts=')][0].split(',')\n"
        "print('SEEN', json.dumps(seen), len(hosts))\n"
    )
    res = launch(["--tf1-flags", "--", sys.executable, str(script)], compact_env(5000, index=1))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "in this process" in res.stderr
    line = next(x for x in res.stdout.splitlines() if x.startswith("SEEN "))
    assert line == 'SEEN [["/job:ps", "/job:worker/task:1"], null] 5000'
