"""Steps lost and recovery time after a SIGTERM mid-training, per mode, with and without notice.

    .venv/bin/python bench/bench_preemption.py [--steps 4000] [--every-ckpt 1000] [--modes all_reduce,...]

Each mode runs the digits TrainingApp twice on the local backend, in the same run: once
as shipped (SIGTERM is a notice: checkpoint at the next step, exit 76, restart), once with
``--tfk_no_checkpoint_on_notice`` (SIGTERM ends the task at once; it is restarted as a
counted retry and resumes from the last periodic checkpoint). The SIGTERM goes to the
task that owns the checkpoints (worker 0 in ``all_reduce`` and ``between_graph``, the
chief in ``parameter_server``) once its progress passes 1.25 periodic checkpoints, and
SIGKILL follows after ``--grace`` seconds if the task is still there, as from a kubelet.
In ``between_graph`` the steps lost are the SIGTERMed task's (worker 0, the chief); the
global step goes on with worker 1 meanwhile.

- steps lost: the highest step the task reported before the restart minus the step its
  next attempt starts from (progress lines every 10 steps: the first figure can be up to
  9 steps low);
- recovery: seconds from the SIGTERM to the first progress line of the next attempt past
  the step it resumed at (the start-up of a TensorFlow process on this machine included).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._common import parser

SHAPES = {
    "all_reduce": ({"worker": 2}, ("worker", 0)),
    "between_graph": ({"ps": 1, "worker": 2}, ("worker", 0)),
    "parameter_server": ({"ps": 1, "worker": 2, "chief": 1}, ("chief", 0)),
}
RESTART = re.compile(r"^\[tfk-local\] exit code (\d+).*restarting", re.M)


def _attempts(log: str) -> tuple[str, str]:
    """The log before and after the first restart."""
    m = RESTART.search(log)
    if m is None:
        return log, ""
    return log[: m.start()], log[m.end() :]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def measure(mode: str, on_notice: bool, steps: int, every_ckpt: int, workdir: str, grace: float) -> dict:
    from airflow_tfk.backends.local.backend import LocalBackend
    from airflow_tfk.protocol.progress import last_progress, parse_line
    from airflow_tfk.run.wait import wait_for_cluster
    from airflow_tfk.spec.cluster import Mode, TFClusterSpec

    shape, (role, index) = SHAPES[mode]
    backend = LocalBackend(os.path.join(workdir, "root"), workdir=workdir, restart_backoff_seconds=0.2)
    backend.claim_path("default", "tfk-models")
    spec = TFClusterSpec.from_dict(
        {
            "name": f"bp-{mode.replace('_', '-')}-{'n' if on_notice else 'x'}",
            "image": "local",
            "mode": mode,
            "command": [sys.executable, "-m", "airflow_tfk.runtime.examples.digits_app"],
            "args": [
                "--tfk_steps",
                # between_graph: worker 1 trains on alone while worker 0 restarts
                str(3 * steps if mode == "between_graph" else steps),
                "--tfk_checkpoint_every",
                str(every_ckpt),
                *([] if on_notice else ["--tfk_no_checkpoint_on_notice"]),
            ],
            "storage": {"models": {"claim": "tfk-models"}},
            **{r: {"replicas": n} for r, n in shape.items()},
            "retries_per_index": 2,  # the run without notice needs a counted retry
            "ps_grace_seconds": 0,
        }
    )
    ref = backend.create(spec)
    try:
        target = every_ckpt + every_ckpt // 4
        deadline = time.monotonic() + 900
        while True:
            p = last_progress(backend.logs(ref, role, index))
            if p is not None and p.step >= target:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{mode}: {role}-{index} never reached step {target}")
            time.sleep(0.1)
        task_dir = backend._task_dir(ref, role, index)
        pid = json.loads((task_dir / "status.json").read_text())["pid"]
        os.kill(pid, signal.SIGTERM)
        sent = time.time()
        # as a kubelet: SIGKILL once the grace period is over (without the notice, an
        # all_reduce task ignores SIGTERM: TensorFlow's coordination service takes it)
        while time.time() - sent < grace:
            if not _alive(pid):
                break
            time.sleep(0.2)
        else:
            os.kill(pid, signal.SIGKILL)
        verdict = wait_for_cluster(backend, ref, Mode(mode), shape, timeout=300, emit=lambda _m: None)
        log = backend.logs(ref, role, index)
    finally:
        backend.delete(ref)
    before, after = _attempts(log)
    reached = max((p.step for p in map(parse_line, before.splitlines()) if p), default=0)
    resumed_lines = [p for p in map(parse_line, after.splitlines()) if p]
    start = resumed_lines[0].step if resumed_lines else None
    progress_again = next((p.time for p in resumed_lines if start is not None and p.step > start), None)
    return {
        "mode": mode,
        "checkpoint_on_notice": on_notice,
        "outcome": verdict.outcome.value,
        "sigterm_at_step": target,
        "reached": reached,
        "resumed_at": start,
        "steps_lost": None if start is None else max(0, reached - start),
        "recovery_seconds": None if progress_again is None else round(progress_again - sent, 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = parser(
        __doc__, steps=4000, every_ckpt=1000, grace=5.0, modes="all_reduce,between_graph,parameter_server"
    )
    args = p.parse_args(argv)
    rows = []
    for mode in args.modes.split(","):
        for on_notice in (True, False):
            with tempfile.TemporaryDirectory(prefix="tfk-bench-preempt-") as tmp:
                row = measure(mode, on_notice, args.steps, args.every_ckpt, tmp, args.grace)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print()
    print(f"{'mode':18s} {'notice':7s} {'outcome':10s} {'lost':>6s} {'recovery s':>11s}")
    for r in rows:
        print(
            f"{r['mode']:18s} {'yes' if r['checkpoint_on_notice'] else 'no':7s} {r['outcome']:10s} "
            f"{r['steps_lost'] if r['steps_lost'] is not None else '?':>6} "
            f"{r['recovery_seconds'] if r['recovery_seconds'] is not None else '?':>11}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
