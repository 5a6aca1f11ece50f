"""The exec limits as the kernel applies them, and the sizes computed without building the
strings (a spec of 10,000 workers is judged in microseconds)."""

from __future__ import annotations

import errno
import json
import subprocess

import pytest

from airflow_tfk.protocol.exec_limits import (
    MAX_STRING_CHARS,
    PythonCommand,
    cluster_map_chars,
    digits_total,
    joined_chars,
    python_command,
    tf_config_chars,
    too_long,
)
from airflow_tfk.runtime.cluster import TaskInfo, expand_cluster


def test_the_limit_is_the_kernels_for_an_argument_and_an_environment_string():
    ok = subprocess.run(["/bin/true", "x" * MAX_STRING_CHARS], check=False)
    assert ok.returncode == 0
    with pytest.raises(OSError) as exc:
        subprocess.run(["/bin/true", "x" * (MAX_STRING_CHARS + 1)], check=False)
    assert exc.value.errno == errno.E2BIG
    # NAME=value counts as one string
    name = "TF_CONFIG"
    fits = "y" * (MAX_STRING_CHARS - len(name) - 1)
    assert subprocess.run(["/bin/true"], env={name: fits}, check=False).returncode == 0
    with pytest.raises(OSError) as exc:
        subprocess.run(["/bin/true"], env={name: fits + "y"}, check=False)
    assert exc.value.errno == errno.E2BIG
    assert too_long(["a"], {name: fits}.items()) is None
    assert "TF_CONFIG" in (too_long(["a"], {name: fits + "y"}.items()) or "")


@pytest.mark.parametrize("n", [0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 12345])
def test_sizes_match_the_built_strings(n):
    assert digits_total(n) == sum(len(str(i)) for i in range(n))
    pattern = "c-worker-{i}.c-worker.ns.svc:2222"
    built = [pattern.replace("{i}", str(i)) for i in range(n)]
    assert joined_chars(pattern, n) == len(",".join(built))
    assert joined_chars(pattern, n, quoted=True) == len(",".join(json.dumps(h) for h in built))


@pytest.mark.parametrize(("workers", "ps"), [(1, 1), (3, 2), (5000, 16), (10000, 1000)])
def test_tf_config_size_is_the_runtimes(workers, ps):
    patterns = [
        ("ps", "n-ps-{i}.n-ps.default.svc:2222", ps),
        ("worker", "n-worker-{i}.n-worker.x.svc:2222", workers),
    ]
    cluster = expand_cluster({r: {"pattern": p, "count": c} for r, p, c in patterns})
    assert isinstance(cluster, dict)
    info = TaskInfo(cluster, "worker", workers - 1)
    assert tf_config_chars(patterns, "worker", workers - 1) == len(info.tf_config_json())
    assert cluster_map_chars(patterns) == len(json.dumps(cluster, separators=(",", ":")))


@pytest.mark.parametrize(
    ("cmd", "want"),
    [
        (["python", "t.py", "--a"], PythonCommand("python", (), "t.py", None, ("--a",))),
        (
            ["/usr/bin/python3.11", "-u", "-B", "t.py"],
            PythonCommand("/usr/bin/python3.11", ("-u", "-B"), "t.py", None, ()),
        ),
        (
            ["python", "-W", "ignore", "-Xdev", "-m", "pkg.mod", "x"],
            PythonCommand("python", ("-W", "ignore", "-Xdev"), None, "pkg.mod", ("x",)),
        ),
        (
            ["python", "-Wignore::ImportWarning", "t.py"],
            PythonCommand("python", ("-Wignore::ImportWarning",), "t.py", None, ()),
        ),
        (["python", "--", "-odd.py"], PythonCommand("python", (), "-odd.py", None, ())),
        (["python", "-c", "print(1)"], None),
        (["python", "-uc", "print(1)"], None),
        (["python", "-"], None),
        (["python"], None),
        (["python", "-m"], None),
        (["python", "--version"], None),
        (["sh", "-c", "python t.py"], None),
        (["/usr/bin/env", "python", "t.py"], None),
    ],
)
def test_python_command(cmd, want):
    assert python_command(cmd) == want
