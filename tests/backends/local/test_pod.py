"""One source of truth for task setup (issue 9): a local task's environment and argv are
the kubelet-style expansion of the pod the Kubernetes backend renders, for every mode and
role - only the addresses (127.0.0.1 ports), volume directories and the scratch directory
($TMPDIR) differ, plus the machine's own allow-listed variables and the process tags.

The expansion here is written independently of ``_local_pod`` (a regex of the documented
rules), so the test compares two implementations, not one with itself.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.backends.local.files import DEFAULT_ENV_ALLOWLIST, MARKER_ENV
from airflow_tfk.core import naming
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.render.manifests import render
from airflow_tfk.spec.cluster import RoleSpec, StorageSpec, TFClusterSpec, VolumeSpec
from tests.helpers import local_state

pytestmark = pytest.mark.timeout(60)
HOST_EXTRAS = {"PYTHONUNBUFFERED", MARKER_ENV, "TFK_LOCAL_TASK", "LD_PRELOAD", *DEFAULT_ENV_ALLOWLIST}
SLEEP = (sys.executable, "-c", "import time; time.sleep(30)")


def kubelet(text: str, env: dict[str, str]) -> str:
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
            continue
        m = re.match(r"\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)", text[i:])
        if m and m.group(1) in env:
            out.append(env[m.group(1)])
            i += m.end()
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


SPECS = {
    "between_graph+legacy": dict(
        mode="between_graph",
        ps=RoleSpec(replicas=2),
        worker=RoleSpec(replicas=2),
        legacy_tf1_flags=True,
        args=("--lr=$(LR)", "$$HOME", "--x"),
    ),
    "parameter_server+evaluator": dict(
        mode="parameter_server",
        chief=RoleSpec(),
        ps=RoleSpec(),
        worker=RoleSpec(replicas=2, env={"ROLE": "w-$(TFK_INDEX)"}),
        evaluator=RoleSpec(),
    ),
    "all_reduce": dict(mode="all_reduce", worker=RoleSpec(replicas=3)),
}
# the same spec, its pod templates inside a JobSet's
SPECS["between_graph+legacy, layout jobset"] = {**SPECS["between_graph+legacy"], "layout": "jobset"}


def pod_templates(manifests: list[dict]) -> list[dict]:
    """Every pod template the backend would create: a Job's, or each of a JobSet's Jobs'."""
    out = []
    for m in manifests:
        if m["kind"] == "Job":
            out.append(m["spec"]["template"])
        elif m["kind"] == "JobSet":
            out += [rj["template"]["spec"]["template"] for rj in m["spec"]["replicatedJobs"]]
    return out


@pytest.mark.parametrize("case", SPECS)
def test_local_task_setup_is_the_kubelet_expansion_of_the_rendered_pod(tmp_path: Path, case: str) -> None:
    spec = TFClusterSpec(
        name="pod",
        image="tf:1",
        command=SLEEP,
        env={"LR": "0.1", "PRICE": "$$5", "REF": "$(LR)x"},
        storage=StorageSpec(data=VolumeSpec(size="1Gi"), models=VolumeSpec(size="1Gi")),
        **SPECS[case],
    )
    identity = RunIdentity("dag", "train", "r", -1)
    backend = LocalBackend(str(tmp_path / "root"), workdir=str(tmp_path), kill_grace_seconds=0.3)
    ref = backend.create(spec, identity)
    try:
        state = local_state(backend, ref)
        local_cluster, volumes = state["cluster"], state["volumes"]
        jobset = spec.layout.value == "jobset"
        kube_to_local = {
            naming.task_address(spec.name, r, i, spec.namespace_name, spec.port, jobset): local_cluster[r][i]
            for r in local_cluster
            for i in range(len(local_cluster[r]))
        }
        seen = set()
        for template in pod_templates(render(spec, identity)):
            role = template["metadata"]["labels"][naming.LABEL_ROLE]
            container = template["spec"]["containers"][0]
            for index in range(spec.roles()[role].replicas):
                task = json.loads(
                    (backend.cluster_dir(ref) / "tasks" / f"{role}-{index}" / "task.json").read_text()
                )
                expected: dict[str, str] = {}
                for e in container["env"]:
                    if "valueFrom" in e:
                        expected[e["name"]] = str(index)  # the downward-API task index
                    elif e["name"] == "TFK_CLUSTER":
                        expected[e["name"]] = json.dumps(local_cluster, separators=(",", ":"))
                    elif e["name"] in ("TFK_DATA_DIR", "TFK_MODEL_DIR", "TFK_LOG_DIR"):
                        expected[e["name"]] = volumes[
                            {"TFK_DATA_DIR": "data", "TFK_MODEL_DIR": "models", "TFK_LOG_DIR": "logs"}[
                                e["name"]
                            ]
                        ]
                    elif e["name"] == "TMPDIR":  # the pod's scratch emptyDir: the task's own here
                        mount = next(m for m in container["volumeMounts"] if m["name"] == "tfk-scratch")
                        assert e["value"] == mount["mountPath"]
                        expected[e["name"]] = str(backend.cluster_dir(ref) / "scratch" / f"{role}-{index}")
                    elif e["name"] == "TFK_TERMINATION_GRACE_SECONDS":  # the backend's kill grace here
                        assert e["value"] == str(spec.termination_grace_seconds)
                        expected[e["name"]] = "0.3"
                    elif e["name"] == "HOME":  # the pod's home emptyDir: the user's own home here
                        mount = next(m for m in container["volumeMounts"] if m["name"] == "tfk-home")
                        assert e["value"] == mount["mountPath"]
                    else:
                        expected[e["name"]] = kubelet(e["value"], expected)
                env = task["env"]
                assert {k: env[k] for k in expected} == expected, (role, index)
                assert set(env) - set(expected) <= HOST_EXTRAS, set(env) - set(expected)
                tf_config = json.loads(env["TF_CONFIG"])
                assert tf_config == {"cluster": local_cluster, "task": {"type": role, "index": index}}
                words = [*container["command"], *(container.get("args") or [])]
                want = []
                for w in words[1:]:
                    if w.startswith(("--ps_hosts=", "--worker_hosts=")):
                        flag, _, hosts = w.partition("=")
                        w = f"{flag}=" + ",".join(kube_to_local[h] for h in hosts.split(","))
                        assert "127.0.0.1:" in w, w
                    want.append(kubelet(w, expected))
                assert task["argv"][1:] == want, (role, index)
                seen.add(role)
        assert seen == set(spec.roles())
        if "legacy" in case:
            argv = json.loads((backend.cluster_dir(ref) / "tasks" / "worker-1" / "task.json").read_text())[
                "argv"
            ]
            # The author's text reaches the process exactly (render escapes it for the kubelet).
            assert "--lr=$(LR)" in argv and "$$HOME" in argv
            # ... behind the launcher (this interpreter runs it), then the spec's command.
            assert argv[:5] == [sys.executable, "-m", "airflow_tfk.runtime.launch", "--", SLEEP[0]]
            assert "--job_name=worker" in argv and "--task_index=1" in argv
    finally:
        backend.delete(ref)
        assert backend._marked(ClusterRef(ref.name, ref.namespace)) == []


def test_a_bare_tf1_command_runs_behind_the_launcher_with_the_shim(tmp_path: Path) -> None:
    """`python train.py` + legacy_tf1_flags in between_graph: the process is the user's
    script (the launcher exec'd it) with the flags and the device-filter shim loaded."""
    code = (
        "import sys; m = sys.modules.get('sitecustomize'); "
        "print('SHIM=' + str(getattr(m, '__file__', None))); print('ARGV=' + ' '.join(sys.argv[1:]))"
    )
    spec = TFClusterSpec(
        name="bare",
        image="tf:1",
        command=("python", "-c", code),
        mode="between_graph",
        ps=RoleSpec(),
        worker=RoleSpec(),
        legacy_tf1_flags=True,
        retries_per_index=0,
    )
    backend = LocalBackend(str(tmp_path / "root"), workdir=str(tmp_path), kill_grace_seconds=0.3)
    ref = backend.create(spec)
    try:
        deadline = time.monotonic() + 40
        while not re.search("^ARGV=", backend.logs(ref, "worker", 0), re.M) and time.monotonic() < deadline:
            time.sleep(0.2)
        log = backend.logs(ref, "worker", 0)
        shim = re.search(r"^SHIM=(.*)$", log, re.M)
        assert shim and shim.group(1).endswith("airflow_tfk/runtime/tf1_shim/sitecustomize.py"), log
        cluster = local_state(backend, ref)["cluster"]
        want = f"--ps_hosts={cluster['ps'][0]} --worker_hosts={cluster['worker'][0]} --job_name=worker"
        assert f"\nARGV={want} --task_index=0" in log, log
    finally:
        backend.delete(ref)


LAUNCH = ["-m", "airflow_tfk.runtime.launch", "--"]


@pytest.mark.parametrize(
    ("pod_argv", "launched", "want"),
    [
        (["python", "t.py", "--x"], False, ["/r/sh", "t.py", "--x"]),
        # put behind the launcher by the provider: the spec's command is after "--"
        (["python", *LAUNCH, "sh", "-c", "x"], True, [sys.executable, *LAUNCH, "/r/sh", "-c", "x"]),
        # a launcher command the author wrote: its inner bare python is this interpreter
        (["python", *LAUNCH, "python", "t.py"], False, ["/r/sh", *LAUNCH, sys.executable, "t.py"]),
        (["python", *LAUNCH, "/opt/py", "t.py"], False, ["/r/sh", *LAUNCH, "/opt/py", "t.py"]),
    ],
)
def test_local_argv_resolves_the_executables(pod_argv, launched, want):
    from airflow_tfk.backends.local.pod import local_argv

    assert local_argv(pod_argv, "/r/sh", launched) == want
