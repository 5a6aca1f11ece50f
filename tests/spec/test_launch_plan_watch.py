"""A large TF1 cluster's Jobs are as small as a TF2 one's, in every mode and layout.

Every watch event of a Job (or JobSet) carries its whole pod template, and the wait reads
one each time a Job's status changes: host lists in the pod args would make that ~80 kB per
event at 2,000 workers. Above the full-map threshold the launcher builds the flags from the
compact ``TFK_CLUSTER`` instead, and the script still sees every host in its argv.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_tfk.render.manifests import render
from airflow_tfk.runtime import launch
from airflow_tfk.spec.cluster import TFClusterSpec
from airflow_tfk.spec.launch_plan import compact_cluster
from tests.render.test_manifests import k8s_expand

SCRIPT = ["python", "/opt/train.py"]
MODES: dict[str, dict[str, Any]] = {
    "between_graph": {"ps": {"replicas": 16}},
    "all_reduce": {},
    "parameter_server": {"ps": {"replicas": 16}, "chief": {"replicas": 1}},
}
# What legacy flags may add to an object beyond the TF2 one: the launcher's words.
FLAT_BYTES = 400


def spec(mode: str, workers: int, tf1: bool, layout: str = "jobs") -> TFClusterSpec:
    return TFClusterSpec.from_dict(
        {
            "name": "big",
            "image": "img",
            "mode": mode,
            "layout": layout,
            "command": SCRIPT,
            "args": ["--steps=9"],
            "legacy_tf1_flags": tf1,
            "worker": {"replicas": workers},
            **MODES[mode],
        }
    )


def owners(s: TFClusterSpec) -> dict[str, int]:
    """Bytes of each object whose watch events the wait reads (Jobs, JobSet)."""
    return {
        m["metadata"]["name"]: len(json.dumps(m, separators=(",", ":")))
        for m in render(s)
        if m["kind"] in ("Job", "JobSet")
    }


@pytest.mark.parametrize("layout", ["jobs", "jobset"])
@pytest.mark.parametrize("mode", list(MODES))
def test_2000_worker_tf1_objects_are_as_small_as_tf2(mode: str, layout: str) -> None:
    tf1, tf2 = owners(spec(mode, 2000, True, layout)), owners(spec(mode, 2000, False, layout))
    assert tf1.keys() == tf2.keys()
    for name, size in tf1.items():
        assert size - tf2[name] < FLAT_BYTES, (name, size, tf2[name])


def argv_seen(s: TFClusterSpec, role: str, index: int) -> list[str]:
    """The argv the task's script gets: the pod's command and args with Kubernetes'
    expansion, then (when the pod runs the launcher) the launcher's own build of it."""
    job = next(m for m in render(s) if m["kind"] == "Job" and m["metadata"]["name"] == f"big-{role}")
    c = job["spec"]["template"]["spec"]["containers"][0]
    env: dict[str, str] = {}
    for var in c["env"]:
        env[var["name"]] = str(index) if "valueFrom" in var else k8s_expand(var["value"], env)
    argv = [k8s_expand(a, env) for a in c["command"] + c.get("args", [])]
    if argv[1:3] != ["-m", launch.__name__]:
        return argv
    cmd, _ = launch.build_command(argv[3:], env)
    return cmd


@pytest.mark.parametrize("mode", list(MODES))
def test_the_script_sees_the_same_argv_from_the_pod_or_the_launcher(mode: str) -> None:
    # One cluster just under the full-map threshold (flags in the pod) and one over it
    # (flags built by the launcher): the same words, with every host.
    for workers in (200, 2000):
        s = spec(mode, workers, True)
        argv = argv_seen(s, "worker", 7)
        assert argv[:3] == [*SCRIPT, "--steps=9"], (workers, argv[:4])
        hosts = next(a for a in argv if a.startswith("--worker_hosts="))
        assert len(hosts.split(",")) == workers
        assert any(a.startswith("--ps_hosts=") for a in argv) == ("ps" in MODES[mode])
        assert argv[-2:] == ["--job_name=worker", "--task_index=7"]
        assert compact_cluster(s) == (workers == 2000)
