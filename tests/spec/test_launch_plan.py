"""A stated limit for every size of a cluster's host lists, enforced before anything is
created: a Python program behind the launcher takes the spec's bounds (10,000 workers,
1,000 PS); a task whose exec carries a full host list takes Linux's 131,071 characters per
argument or environment string, and the spec says how many tasks fit."""

from __future__ import annotations

import re
from typing import Any

import pytest

from airflow_tfk.core import naming
from airflow_tfk.core.errors import SpecError
from airflow_tfk.protocol.exec_limits import MAX_STRING_CHARS
from airflow_tfk.render.manifests import render, task_command
from airflow_tfk.runtime.cluster import TaskInfo, expand_cluster
from airflow_tfk.spec.cluster import TFClusterSpec
from airflow_tfk.spec.launch_plan import FULL_CLUSTER_MAX_BYTES, address_patterns, compact_cluster

SCRIPT = ["python", "/opt/train.py"]


def spec(workers: int, ps: int | None = 16, command: list[str] = SCRIPT, **extra: Any) -> TFClusterSpec:
    data: dict[str, Any] = {
        "name": "tf1",
        "image": "img",
        "mode": "between_graph",
        "legacy_tf1_flags": True,
        "command": command,
        "worker": {"replicas": workers},
        "ps": {"replicas": ps} if ps is not None else None,
    }
    data.update(extra)
    return TFClusterSpec.from_dict({k: v for k, v in data.items() if v is not None})


def worker_container(s: TFClusterSpec) -> dict:
    job = next(m for m in render(s) if m["kind"] == "Job" and m["metadata"]["name"].endswith("-worker"))
    return job["spec"]["template"]["spec"]["containers"][0]


def exec_strings(s: TFClusterSpec, role: str = "worker") -> list[str]:
    """What the launcher would exec for the role's last task: its legacy flags and TF_CONFIG,
    built by the runtime itself."""
    cluster = expand_cluster({r: {"pattern": p, "count": n} for r, p, n in address_patterns(s)})
    assert isinstance(cluster, dict)
    info = TaskInfo(cluster, role, len(cluster[role]) - 1)
    return [*info.tf1_flags(), "TF_CONFIG=" + info.tf_config_json()]


def test_a_python_script_takes_the_specs_own_bounds():
    big = spec(10000, ps=1000)
    assert compact_cluster(big)
    with pytest.raises(SpecError) as exc:
        spec(10001)
    assert exc.value.field == "worker.replicas" and "10000" in str(exc.value)
    with pytest.raises(SpecError) as exc:
        spec(10, ps=1001)
    assert exc.value.field == "ps.replicas" and "1000" in str(exc.value)


def test_5000_workers_render_a_pod_of_constant_size_and_the_launcher_builds_the_flags():
    c = worker_container(spec(5000))
    assert c["command"] == ["python", "-m", "airflow_tfk.runtime.launch", "--tf1-flags", "--", *SCRIPT]
    assert not any("_hosts=" in a for a in c.get("args") or [])
    sizes = [len(a) for a in c["command"] + (c.get("args") or [])] + [
        len(str(e.get("value", ""))) for e in c["env"]
    ]
    assert max(sizes) < 1000, sizes
    assert sum(sizes) < 2000


def test_a_small_cluster_still_carries_its_flags_in_the_pod():
    s = spec(3, ps=2)
    assert not compact_cluster(s)
    c = worker_container(s)
    assert c["command"] == ["python", "-m", "airflow_tfk.runtime.launch", "--", *SCRIPT]
    hosts = ",".join(naming.task_address("tf1", "worker", i, "default", 2222) for i in range(3))
    assert f"--worker_hosts={hosts}" in c["args"]
    assert c["args"][-2:] == ["--job_name=$(TFK_ROLE)", "--task_index=$(TFK_INDEX)"]


def test_interpreter_options_start_the_launcher_too():
    c = worker_container(spec(5000, command=["python3", "-u", "/opt/train.py"]))
    assert c["command"][:4] == ["python3", "-u", "-m", "airflow_tfk.runtime.launch"]


def test_a_launcher_in_the_authors_command_gets_the_flags_option():
    command = ["python", "-m", "airflow_tfk.runtime.launch", "--wait-for", "ps", "--", *SCRIPT]
    s = spec(5000, command=command)
    assert task_command(s, "worker") == [*command[:3], "--tf1-flags", *command[3:]]
    assert task_command(spec(3, command=command), "worker") == command


def _most(message: str) -> int:
    found = re.search(r"at most (\d+) fit", message)
    assert found, message
    return int(found.group(1))


@pytest.mark.parametrize(
    ("extra", "command"),
    [
        ({}, ["sh", "/opt/run.sh"]),  # behind the launcher, which must exec it
        # outside between_graph a command that is not a Python program runs with no
        # launcher: the pod's args carry the flags (a Python one gets the launcher)
        ({"mode": "all_reduce", "ps": None}, ["sh", "/opt/run.sh"]),
    ],
    ids=["launcher-execs-a-shell", "flags-in-the-pod"],
)
def test_an_execd_host_list_is_refused_one_past_the_limit(extra, command):
    with pytest.raises(SpecError) as exc:
        spec(5000, command=command, **extra)
    err = exc.value
    assert err.field == "worker.replicas"
    assert f"{MAX_STRING_CHARS:,}" in str(err) and "argument list too long" in str(err)
    most = _most(str(err))
    assert 1000 < most < 5000
    ok = spec(most, command=command, **extra)  # the stated limit is accepted...
    with pytest.raises(SpecError) as exc:
        spec(most + 1, command=command, **extra)  # ...and one more is refused, naming it
    assert exc.value.field == "worker.replicas" and f"at most {most} fit" in str(exc.value)
    # The limit is the real strings': at it they fit, one more and one does not.
    launched = "mode" not in extra
    longest = max(len(x) for x in (exec_strings(ok) if launched else exec_strings(ok)[:2]))
    assert longest <= MAX_STRING_CHARS
    over = spec(5000, command=SCRIPT, **extra)  # a Python script, run in-process: accepted
    assert over.worker is not None and over.worker.replicas == 5000


def test_a_longer_name_lowers_the_limit():
    def most(name: str) -> int:
        with pytest.raises(SpecError) as exc:
            spec(5000, command=["sh", "/opt/run.sh"], name=name)
        return _most(str(exc.value))

    assert most("a-much-longer-training-name") < most("tf1")


def test_tf2_through_an_authors_launcher_is_limited_only_for_another_program():
    base = {"mode": "all_reduce", "ps": None, "legacy_tf1_flags": False}
    launcher = ["python", "-m", "airflow_tfk.runtime.launch", "--"]
    spec(10000, command=[*launcher, *SCRIPT], **base)  # in-process: TF_CONFIG of any size
    with pytest.raises(SpecError) as exc:
        spec(10000, command=[*launcher, "/opt/train-binary"], **base)
    assert exc.value.field == "worker.replicas" and "TF_CONFIG" in str(exc.value)
    # another interpreter option on the launcher's python: it execs, so it is limited
    with pytest.raises(SpecError):
        spec(
            10000,
            command=["python", "-m", "airflow_tfk.runtime.launch", "--", "python", "-u", "/t.py"],
            **base,
        )
    # without the launcher nothing execs a full map (the pod carries the compact one)
    spec(10000, command=SCRIPT, **base)


def test_the_threshold_is_the_full_maps_size():
    small, big = spec(300, ps=1), spec(400, ps=1)
    assert not compact_cluster(small) and compact_cluster(big)
    env = {e["name"]: e.get("value") for e in worker_container(small)["env"]}
    assert len(env["TFK_CLUSTER"]) <= FULL_CLUSTER_MAX_BYTES and "pattern" not in env["TFK_CLUSTER"]
    env = {e["name"]: e.get("value") for e in worker_container(big)["env"]}
    assert "pattern" in env["TFK_CLUSTER"]
