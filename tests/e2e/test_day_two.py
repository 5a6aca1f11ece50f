"""Day two, as the docs tell it: the commands a person runs once trainings run every day,
read from the docs and run as written with the real ``airflow-tfk`` command.

- README, "Operating trainings": each ``airflow-tfk clusters`` line of its command block,
  its placeholders (NAME, NS, D, T, R) filled in with a real cluster of the local backend
  (``--backend local``, as the section says), and checked against what its comment
  promises; then each ``$`` command of the section's example output runs and must print
  those lines (durations aside: they are the only thing that differs between runs).
- docs/serving.md, "Stopping local servers": each ``airflow-tfk stop`` line, against a real
  stand-in model server and a real TensorBoard.
- README, "Installing the wheel": ``airflow-tfk --version``.

The training in the cluster is a stand-in (a script that reports progress with the
runtime's own reporter, so the progress lines are the real format): what is under test
is the commands, and TensorFlow would only make the test slow.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_tfk.core.naming import RunIdentity
from tests.docs_commands import documented_commands, section, shown_runs
from tests.helpers import migrated_airflow_home, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
AIRFLOW_TFK = str(Path(sys.executable).parent / "airflow-tfk")

# worker-0 trains (progress with the runtime's reporter), worker-1 ends early, as a
# between_graph worker may; the ps serves until deleted. 150 numbered lines for --tail.
APP = r"""
import os, sys, time
from airflow_tfk.runtime.reporter import Reporter
role, index = os.environ["TFK_ROLE"], int(os.environ["TFK_INDEX"])
if role == "worker" and index == 0:
    reporter = Reporter(600, 100, True, None)
    for step in (0, 100, 200, 300):
        reporter.report(step, round(2.3 / (1 + step / 25), 4))
if role == "worker":
    for n in range(150):
        print(f"{role}-{index} line {n}", flush=True)
if role == "worker" and index == 1:
    sys.exit(0)
time.sleep(600)
"""


def _normal(line: str) -> str:
    """A printed line without what differs between runs: durations (ages, elapsed, ETA)."""
    return " ".join(re.sub(r"\b\d+:\d\d:\d\d\b", "<duration>", line).split())


class Shell:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def __call__(self, argv: list[str], code: int = 0) -> str:
        assert argv[0] == "airflow-tfk", argv
        run = subprocess.run(
            [AIRFLOW_TFK, *argv[1:]], env=self.env, cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert run.returncode == code, (argv, run.returncode, run.stdout, run.stderr)
        return run.stdout + run.stderr


@pytest.fixture
def shell(tmp_path: Path) -> Shell:
    """A user's shell: their own local root, none of the developer's Airflow or TFK_ settings
    (the commands choose the backend: ``--backend local``, as the docs say)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TFK_"))}
    env["TFK_LOCAL_ROOT"] = str(tmp_path / "tfk-local")
    env["AIRFLOW_HOME"] = str(tmp_path / "airflow-home")
    return Shell(env)


def _cluster(root: Path, name: str, owner: RunIdentity):
    from airflow_tfk.backends.local.backend import LocalBackend
    from airflow_tfk.spec.cluster import RoleSpec, TFClusterSpec

    backend = LocalBackend(str(root))
    spec = TFClusterSpec(
        name=name,
        image="registry.example.com/digits:1",
        command=(sys.executable, "-c", APP),
        mode="between_graph",
        worker=RoleSpec(replicas=2),
        ps=RoleSpec(replicas=1),
    )
    return backend, backend.create(spec, owner)


def _owner_of(shown: list[tuple[list[str], list[str]]]) -> tuple[str, RunIdentity]:
    """The cluster name and owner the example output shows (its list row)."""
    for argv, lines in shown:
        if argv[1:3] == ["clusters", "list"]:
            row = lines[2]  # under the header and its rule (Airflow's table)
            m = re.search(r"dag '([^']+)', task '([^']+)', run '([^']+)'", row)
            assert m, row
            return row.split("|")[1].strip(), RunIdentity(m.group(1), m.group(2), m.group(3), -1)
    raise AssertionError("the section shows no `clusters list` output")


def test_operating_trainings_commands_run_as_written(shell: Shell) -> None:
    text = section(ROOT / "docs" / "operations.md", "## Operating trainings: `airflow-tfk clusters`")
    commands = documented_commands(text, "bash")
    verbs = [argv[2] for argv, _ in commands]
    assert verbs == ["list", "status", "logs", "delete", "sweep"], verbs
    shown = shown_runs(text)
    name, owner = _owner_of(shown)
    root = Path(shell.env["TFK_LOCAL_ROOT"])
    # The sweep reads "this environment's Airflow database": a migrated one.
    airflow = migrated_airflow_home(Path(shell.env["AIRFLOW_HOME"]))
    shell.env.update({k: v for k, v in airflow.items() if k.startswith("AIRFLOW")})
    backend, ref = _cluster(root, name, owner)
    orphan_ref = None
    try:
        wait_for(lambda: "worker-1 line 149" in backend.logs(ref, "worker", 1), 60, "worker-1's last line")
        wait_for(lambda: '"step":300' in backend.logs(ref, "worker", 0), 60, "worker-0's progress")
        wait_for(lambda: backend.status(ref).summary().endswith("1 succeeded"), 60, "worker-1 done")
        fill = {"NAME": name, "NS": ref.namespace, "D": owner.dag_id, "T": owner.task_id, "R": owner.run_id}

        # The example output of the section: each `$` command prints what is shown.
        assert shown, "the section shows no output"
        for argv, lines in shown:
            got = [_normal(x) for x in shell(argv).splitlines()]
            assert got == [_normal(x) for x in lines], (argv, got)

        # An orphan for the sweep: its task instance never ran in this Airflow database.
        orphan = RunIdentity("old_dag", "train", "manual__gone", -1)
        _, orphan_ref = _cluster(root, "orphan-of-old-dag", orphan)
        for argv, comment in commands:
            argv = [fill.get(a, a) for a in argv] + ["--backend", "local"]
            verb = argv[2]
            if verb == "list":  # "every cluster: namespace, name, age, tasks, owning task instance"
                out = shell(argv)
                header = out.split("\n", 1)[0].split("|")
                assert [h.strip() for h in header] == ["namespace", "name", "age", "tasks", "owner"]
                assert "-A" in argv and "orphan-of-old-dag" in out and name in out, out
            elif verb == "status":  # "each task's phase, restarts and exit code; the owner; ..."
                out = shell(argv)
                assert "worker-1     succeeded (Completed), exit code 0, restarts 0" in out, out
                assert "worker-0     running, restarts 0" in out and "ps-0         running" in out
                assert f"owner:     dag '{owner.dag_id}', task '{owner.task_id}'" in out
                assert "progress:  [worker-0] step 300/600 (50.0%), loss 0.1769" in out, out
            elif verb == "logs":  # "one task's log (default: chief-0, else worker-0)"
                tail = int(argv[argv.index("--tail") + 1])
                out = shell(argv)
                task = argv[4]
                assert out.splitlines() == [f"{task} line {n}" for n in range(150 - tail, 150)], out
                default = shell([a for a in argv if a != task])
                assert default.splitlines()[-1] == "worker-0 line 149", default
            elif verb == "delete":  # "only for its owner, as the operators check"
                other = [*argv[: argv.index("--run-id") + 1], "manual__someone_else", "--backend", "local"]
                refused = shell(other, code=1)
                assert (
                    f"belongs to dag '{owner.dag_id}', task '{owner.task_id}', run '{owner.run_id}'"
                    in refused
                )
                assert backend.exists(ref)
                out = shell(argv)
                assert f"deleted cluster {name} in {ref.namespace}" in out, out
                assert not backend.exists(ref)
            elif verb == "sweep":  # "the orphan sweeper, with this environment's Airflow database"
                out = shell(argv)
                assert "would delete orphaned cluster orphan-of-old-dag" in out, out
                assert backend.exists(orphan_ref), "a dry run deleted"
            assert comment, argv  # every documented line says what it does
    finally:
        backend.delete(ref)
        if orphan_ref is not None:
            backend.delete(orphan_ref)


START = """
import sys
from airflow_tfk.serving.local import LocalServing
from airflow_tfk.serving.spec import ServingSpec, TensorBoardSpec
from airflow_tfk.tensorboard.local import LocalTensorBoard
root = sys.argv[1]
for model in ("digits", "iris"):
    spec = ServingSpec(model_name=model, base_path=f"{root}/store")
    LocalServing(spec, root=root, server="stand-in").ensure(print)
LocalTensorBoard(TensorBoardSpec(name="tb-mnist", base_path=f"{root}/logs"), root).start(print)
"""


def test_stopping_local_servers_runs_as_written(shell: Shell) -> None:
    from airflow_tfk.serving.local import LocalServing
    from airflow_tfk.serving.spec import ServingSpec, TensorBoardSpec
    from airflow_tfk.tensorboard.local import LocalTensorBoard

    text = section(ROOT / "docs" / "serving.md", "### Stopping local servers")
    commands = documented_commands(text, "sh")
    assert [a[1:] for a, _ in commands] == [
        ["stop"],
        ["stop", "model-server", "digits"],
        ["stop", "tensorboard", "tb-mnist"],
        ["stop", "--all"],
    ], commands
    root = shell.env["TFK_LOCAL_ROOT"]
    # What the docs stop: the model server of model digits and TensorBoard tb-mnist, and
    # one more model server for --all, started by a process that then exits, as a DAG
    # run's task does (and so their parent is not this test, which would not reap them).
    servers = [
        LocalServing(ServingSpec(model_name=m, base_path=f"{root}/store"), root=root, server="stand-in")
        for m in ("digits", "iris")
    ] + [LocalTensorBoard(TensorBoardSpec(name="tb-mnist", base_path=f"{root}/logs"), root)]
    try:
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-c", START, root], cwd=ROOT, check=True, timeout=300)
        print(f"servers started in {time.monotonic() - t0:.1f}s")
        assert all(s.running() for s in servers)
        for argv, comment in commands:
            t0 = time.monotonic()
            out = shell(argv)
            print(f"{shlex.join(argv)}: {time.monotonic() - t0:.1f}s")
            if argv[1:] == ["stop"]:  # "list what is running under the local root"
                # Airflow's table: a header and its rule, then kind | server | pid | url
                listed = [[c.strip() for c in line.split("|")][:2] for line in out.splitlines()[2:]]
                assert sorted(listed) == [
                    ["model-server", "default/tfs-digits"],
                    ["model-server", "default/tfs-iris"],
                    ["tensorboard", "default/tb-mnist"],
                ], out
            elif argv[2:] == ["model-server", "digits"]:  # "(tfs-digits)"
                assert re.fullmatch(r"stopped model-server default/tfs-digits \(pid \d+\)\n", out), out
                assert not servers[0].running() and servers[1].running()
            elif argv[2:] == ["tensorboard", "tb-mnist"]:
                assert re.fullmatch(r"stopped tensorboard default/tb-mnist \(pid \d+\)\n", out), out
                assert not servers[2].running() and servers[1].running()
            else:  # "everything the quickstart / DAGs started": what is still running
                stopped = sorted(re.sub(r"\(pid \d+\)", "(pid N)", line) for line in out.splitlines())
                assert stopped == ["stopped model-server default/tfs-iris (pid N)"], out
                assert not any(s.running() for s in servers)
            assert comment or argv[1:] == ["stop", "tensorboard", "tb-mnist"], argv
        assert "no local model server or TensorBoard is running" in shell(["airflow-tfk", "stop"])
    finally:
        for s in servers:
            (s.delete if isinstance(s, LocalServing) else s.stop)(print)


def test_version_is_the_installed_distributions(shell: Shell) -> None:
    from airflow_tfk import DISTRIBUTION

    page = (ROOT / "docs" / "compatibility.md").read_text(encoding="utf-8")
    assert "`airflow-tfk --version` prints its version" in page
    out = shell(["airflow-tfk", "--version"])
    assert importlib.metadata.version(DISTRIBUTION) in out.split(), out


def test_a_shown_line_that_is_not_printed_fails() -> None:
    """The comparison of the example output is a real one: durations aside, a line that
    differs from what the command printed does not match."""
    assert _normal("age:       0:00:12") == _normal("age:       1:02:03")
    assert _normal("tasks:     worker 2 running") != _normal("tasks:     worker 1 running")
