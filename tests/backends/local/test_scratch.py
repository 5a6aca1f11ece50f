"""Nothing a local task writes to its temporary directory outlives the task, and none of it
lands in the shared /tmp.

Every rendered pod has a scratch ``emptyDir`` as its ``$TMPDIR``. The local backend used to
pass the pod's mount path (``/tfk/scratch``) on as it was; it does not exist on this
machine, so Python's ``tempfile`` fell back to /tmp, and TensorFlow's autograph modules
(``__autograph_generated_file*.py``, removed only by an atexit hook) of every task that was
killed stayed there. Now each task's ``$TMPDIR`` is its own directory under the cluster's,
emptied when the task ends and removed by the backend's delete.

The training test runs the real TensorFlow runtime. Other engineers' runs write autograph
files into the same /tmp at the same time, so the test recognises its own by a marker in
the converted code, and gives this test process a private ``$TMPDIR`` too, so that a task
inheriting it would be caught as well.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import psutil
import pytest

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.backends.local.backend import LocalBackend
from airflow_tfk.runtime.progress import last_progress
from airflow_tfk.spec.cluster import RoleSpec, TFClusterSpec
from tests.helpers import assert_no_processes, local_backend, wait_for

AUTOGRAPH = "__autograph_generated_file"
REPO = Path(__file__).resolve().parents[3]


def autograph_files(directory: Path, marker: str) -> list[Path]:
    """TensorFlow's autograph modules in ``directory`` (not recursive) that hold ``marker``."""
    found = []
    for path in directory.glob(f"{AUTOGRAPH}*.py"):
        try:
            if marker in path.read_text(errors="replace"):
                found.append(path)
        except OSError:  # another run's, removed meanwhile
            pass
    return found


def task_process(backend: LocalBackend, ref: ClusterRef, name: str) -> psutil.Process:
    """The running process of task ``name`` (``worker-0``), as its supervisor recorded it."""
    pid: int | None = None

    def running() -> bool:
        nonlocal pid
        try:
            st = json.loads((backend.cluster_dir(ref) / "tasks" / name / "status.json").read_text())
        except FileNotFoundError:  # the supervisor has not written its first status yet
            return False
        pid = st.get("pid") if st.get("state") == "running" else None
        return pid is not None

    wait_for(running, 30, f"{name} running")
    return psutil.Process(pid)


@pytest.fixture
def private_tmp(monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process's own $TMPDIR: a task that inherited it, instead of getting its own,
    would write there."""
    path = Path(tempfile.mkdtemp(prefix="tfk-scratch-test-"))
    monkeypatch.setenv("TMPDIR", str(path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # recomputed from TMPDIR
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.e2e
@pytest.mark.timeout(240)
def test_a_killed_training_leaves_its_autograph_files_in_its_own_scratch_not_in_tmp(
    tmp_path: Path, private_tmp: Path
) -> None:
    marker = f"tfk_scratch_probe_{uuid.uuid4().hex}"
    # The runtime's digits app; its train_step carries the marker, which autograph copies
    # into the module it generates for it.
    (tmp_path / "probe_app.py").write_text(
        textwrap.dedent(
            f"""
            from airflow_tfk.runtime.examples.digits_app import DigitsApp

            class ProbeApp(DigitsApp):
                def train_step(self, batch):
                    {marker} = 1  # noqa: F841 - the marker autograph copies
                    return super().train_step(batch)

            if __name__ == "__main__":
                ProbeApp.main()
            """
        )
    )
    spec = TFClusterSpec(
        name="scratch",
        image="local/unused:1",
        mode="all_reduce",
        command=("python", str(tmp_path / "probe_app.py")),
        args=("--tfk_steps", "1000000", "--tfk_progress_every", "5"),
        worker=RoleSpec(replicas=1),
        env={
            "PYTHONPATH": str(REPO),
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "TF_NUM_INTEROP_THREADS": "2",
            "TF_NUM_INTRAOP_THREADS": "1",
            "CUDA_VISIBLE_DEVICES": "",
        },
    )
    gen = local_backend(tmp_path / "root", tmp_path, kill_grace_seconds=1.0)
    backend = next(gen)
    try:
        ref = backend.create(spec)
        cdir = backend.cluster_dir(ref)
        scratch = cdir / "scratch" / "worker-0"
        proc = task_process(backend, ref, "worker-0")
        # The process itself runs with its own scratch as $TMPDIR, inside the cluster's directory.
        tmpdir = Path(proc.environ()["TMPDIR"])
        assert tmpdir == scratch and tmpdir.is_relative_to(cdir), tmpdir
        assert scratch.is_dir() and (scratch.stat().st_mode & 0o777) == 0o700

        def training() -> bool:
            p = last_progress(backend.logs(ref, "worker", 0))
            return p is not None and p.step >= 5 and bool(autograph_files(scratch, marker))

        wait_for(training, 150, f"the training past step 5, its autograph module in {scratch}")
        assert not autograph_files(Path("/tmp"), marker)
        # Killed mid-training as the OOM killer would: no atexit, its files stay behind.
        # The supervisor (the pod) empties the scratch at once.
        os.kill(proc.pid, signal.SIGKILL)
        wait_for(lambda: not scratch.exists(), 30, "the scratch directory emptied by the supervisor")
        wait_for(lambda: backend.status(ref).tasks[0].phase.value == "Failed", 10, "the task failed")
        assert backend.status(ref).tasks[0].exit_code == 128 + signal.SIGKILL
        backend.delete(ref)
        assert not (cdir / "scratch").exists()
        assert (cdir / "logs" / "worker-0.log").exists()  # the logs stay, as before
    finally:
        for _ in gen:  # deletes whatever is left
            pass
    assert_no_processes(tmp_path / "root")
    # Nothing of this training in the shared /tmp (its own modules, told apart by the
    # marker from other runs' that appear there meanwhile), nor in this process's $TMPDIR.
    assert not autograph_files(Path("/tmp"), marker)
    assert not list(private_tmp.iterdir())


SLEEPER = textwrap.dedent(
    """
    import os, sys, tempfile, time
    fd, path = tempfile.mkstemp(prefix="tfk-left-behind-")
    print("wrote", path, flush=True)
    time.sleep(300)
    """
)


@pytest.mark.timeout(60)
def test_delete_removes_the_scratch_when_supervisor_and_task_were_killed(
    tmp_path: Path, private_tmp: Path
) -> None:
    """No supervisor left to empty the scratch (SIGKILL to it and its task): the backend's
    delete removes what they left, with the rest of the cluster's processes."""
    spec = TFClusterSpec(
        name="sk",
        image="local/unused:1",
        mode="all_reduce",
        command=(sys.executable, "-c", SLEEPER),
        worker=RoleSpec(replicas=2),
    )
    gen = local_backend(tmp_path / "root", tmp_path, kill_grace_seconds=0.5)
    backend = next(gen)
    try:
        ref = backend.create(spec)
        cdir = backend.cluster_dir(ref)
        wait_for(
            lambda: all("wrote" in backend.logs(ref, "worker", i) for i in range(2)), 30, "both temp files"
        )
        written = [Path(backend.logs(ref, "worker", i).split("wrote ", 1)[1].split()[0]) for i in range(2)]
        assert [p.parent for p in written] == [cdir / "scratch" / "worker-0", cdir / "scratch" / "worker-1"]
        # worker-0's supervisor and task die without a word; worker-1 runs on.
        tasks = {t.name: t for t in backend._tasks(ref)}
        sup = psutil.Process(tasks["worker-0"].supervisor.pid)
        child = task_process(backend, ref, "worker-0")
        sup.kill()
        child.kill()
        psutil.wait_procs([sup, child], timeout=10)
        time.sleep(0.2)
        assert written[0].exists()  # nobody left to remove it
        backend.delete(ref)
        assert not (cdir / "scratch").exists()
    finally:
        for _ in gen:
            pass
    assert_no_processes(tmp_path / "root")
    assert not list(private_tmp.iterdir())
