import json
import os
import signal
import subprocess
import sys
import time

import pytest

from airflow_tfk.runtime.launch import build_command

from .localcluster import REPO, free_ports, task_env

CLUSTER = {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"]}


def env_for(role="worker", index=1, cluster=CLUSTER):
    return task_env(cluster, role, index, "between_graph")


def launch(*args, env=None, **kw):
    return subprocess.run(
        [sys.executable, "-m", "airflow_tfk.runtime.launch", *args],
        env=env or env_for(),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        **kw,
    )


def test_build_command_appends_tf1_flags_and_sets_tf_config():
    env = {"TFK_CLUSTER": json.dumps(CLUSTER), "TFK_ROLE": "worker", "TFK_INDEX": "1"}
    cmd, opts = build_command(["--tf1-flags", "--", "python", "train.py", "--lr", "1"], env)
    assert cmd == [
        "python",
        "train.py",
        "--lr",
        "1",
        "--ps_hosts=127.0.0.1:1",
        "--worker_hosts=127.0.0.1:2,127.0.0.1:3",
        "--job_name=worker",
        "--task_index=1",
    ]
    assert json.loads(env["TF_CONFIG"]) == {"cluster": CLUSTER, "task": {"type": "worker", "index": 1}}
    cmd, _ = build_command(["python", "train.py"], dict(env, TF_CONFIG=""))
    assert cmd == ["python", "train.py"]


def test_runs_the_script_with_tf_config_and_its_exit_code():
    script = (
        "import json, os, sys; print(json.dumps({'tf_config': os.environ['TF_CONFIG'], "
        "'argv': sys.argv[1:]})); sys.exit(7)"
    )
    res = launch("--tf1-flags", "--", sys.executable, "-c", script)
    assert res.returncode == 7, res.stderr
    out = json.loads(res.stdout)
    assert json.loads(out["tf_config"])["task"] == {"type": "worker", "index": 1}
    assert out["argv"] == [
        "--ps_hosts=127.0.0.1:1",
        "--worker_hosts=127.0.0.1:2,127.0.0.1:3",
        "--job_name=worker",
        "--task_index=1",
    ]


def test_execs_so_signals_reach_the_script():
    script = "import os, time; print(os.getpid(), flush=True); time.sleep(60)"
    proc = subprocess.Popen(
        [sys.executable, "-m", "airflow_tfk.runtime.launch", "--", sys.executable, "-c", script],
        env=env_for(),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        pid = int(proc.stdout.readline())
        assert pid == proc.pid  # same process: nothing sits between the kubelet and TF
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == -signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()


def test_missing_command_is_127():
    res = launch("--", "no-such-program-tfk")
    assert res.returncode == 127 and "command not found" in res.stderr


def test_bad_environment_is_2():
    env = env_for()
    env["TFK_INDEX"] = "5"
    res = launch("--", "true", env=env)
    assert res.returncode == 2 and "worker:5 is not in the cluster" in res.stderr


def test_no_command_is_usage_error():
    res = launch("--tf1-flags")
    assert res.returncode == 2


def test_wait_for_roles_times_out_with_3():
    (port,) = free_ports(1)
    cluster = {"ps": [f"127.0.0.1:{port}"], "worker": ["127.0.0.1:2"]}
    t0 = time.monotonic()
    res = launch("--wait-for", "ps", "--wait-timeout", "1", "--", "true", env=env_for("worker", 0, cluster))
    assert res.returncode == 3
    assert f"waiting for ps:0 at 127.0.0.1:{port}" in res.stderr
    assert "cluster not ready after 1s" in res.stderr
    assert time.monotonic() - t0 < 30


def test_launcher_imports_neither_tensorflow_nor_airflow():
    res = launch(
        "--",
        sys.executable,
        "-c",
        "import airflow_tfk.runtime.launch, sys; print('tensorflow' in sys.modules "
        "or 'airflow' in sys.modules)",
    )
    assert res.stdout.strip() == "False", res.stderr


@pytest.mark.parametrize(
    "module",
    [
        "cluster",
        "flags",
        "launch",
        "progress",
        "app",
        "loops",
        "between_graph",
        "evaluator",
        "export",
        "reporter",
        "exits",
        "in_process",
    ],
)
def test_runtime_modules_never_import_airflow(module):
    # the neutral protocol package is the one airflow_tfk module outside the runtime
    # that the runtime may import; airflow_tfk.core.lazy (standard library only, in an empty
    # package) comes with the package's __init__, which every `import airflow_tfk.<x>` runs
    code = (
        f"import sys, airflow_tfk.runtime.{module}; "
        "bad = sorted(m for m in sys.modules if m == 'airflow' or m.startswith('airflow.')"
        " or m == 'tensorflow' or (m.startswith('airflow_tfk.') and "
        "m not in ('airflow_tfk.core', 'airflow_tfk.core.lazy') and "
        "not m.startswith(('airflow_tfk.runtime', 'airflow_tfk.protocol')))); print(bad)"
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        timeout=60,
    )
    assert res.stdout.strip() == "[]", res.stderr


def test_between_graph_tasks_get_the_device_filter_shim():
    from airflow_tfk.runtime.launch import SHIM_DIR

    env = {"TFK_CLUSTER": json.dumps(CLUSTER), "TFK_ROLE": "worker", "TFK_INDEX": "1", "PYTHONPATH": "/x"}
    build_command(["--tf1-flags", "--", "python", "train.py"], env)
    assert env["PYTHONPATH"].split(os.pathsep) == [SHIM_DIR, "/x"]
    build_command(["--tf1-flags", "--", "python", "train.py"], env)  # once only
    assert env["PYTHONPATH"].split(os.pathsep) == [SHIM_DIR, "/x"]
    env = {
        "TFK_CLUSTER": json.dumps(CLUSTER),
        "TFK_ROLE": "worker",
        "TFK_INDEX": "1",
        "TFK_MODE": "between_graph",
    }
    build_command(["--", "python", "train.py"], env)  # the spec's legacy_tf1_flags path
    assert env["PYTHONPATH"] == SHIM_DIR
    for argv, mode in (
        (["--tf1-flags", "--no-device-filters", "--", "x"], "between_graph"),
        (["--", "x"], "all_reduce"),
    ):
        env = {"TFK_CLUSTER": json.dumps(CLUSTER), "TFK_ROLE": "worker", "TFK_INDEX": "1", "TFK_MODE": mode}
        build_command(argv, env)
        assert "PYTHONPATH" not in env


def test_shim_gives_remote_sessions_the_filters_and_keeps_a_scripts_own():
    """The shim, in a real Python started the way the launcher starts scripts: TF's
    Session gets /job:ps + this task for a grpc master, nothing for in-process sessions,
    and a config that has filters keeps them."""
    code = """
import json, tensorflow as tf
from tensorflow.python.client import session as s
seen = []
orig = s.BaseSession.__init__
def spy(self, target='', graph=None, config=None):
    seen.append(list(config.device_filters) if config is not None else None)
    raise RuntimeError('stop')  # no master needed
s.BaseSession.__init__ = spy
v1 = tf.compat.v1
for target, config in (('grpc://127.0.0.1:1', None), ('', None),
                       ('grpc://127.0.0.1:1', v1.ConfigProto(device_filters=['/job:mine']))):
    try:
        v1.Session(target, config=config)
    except RuntimeError:
        pass
from tensorflow.python.training import session_manager
print(json.dumps({'seen': seen, 'wait': session_manager.SessionManager()._recovery_wait_secs}))
"""
    env = env_for("worker", 1)
    env["TF_CONFIG"] = json.dumps({"cluster": CLUSTER, "task": {"type": "worker", "index": 1}})
    res = launch("--tf1-flags", "--", sys.executable, "-c", code, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[0])
    assert out["seen"] == [["/job:ps", "/job:worker/task:1"], None, ["/job:mine"]]
    assert out["wait"] == 1
