"""A local sweep with a median pruner vs the same sweep without pruning: best held-out
accuracy and CPU-seconds, side by side.

    .venv/bin/python bench/bench_sweep.py [--trials 12] [--steps 50000] [--concurrency 2]

Both arms run the same ``--trials`` trials of the digits TrainingApp
(airflow_tfk.runtime.examples.digits_app, real TensorFlow, ``all_reduce`` on the local
backend) through the sweep's own loop (airflow_tfk.sweep.runner), at most
``--concurrency`` clusters at once. The search space is the learning rate (log scale)
and the hidden width; the sampler is Optuna's random sampler with the same seed in both
arms, so both run exactly the same parameters in the same order, and the app gets the
same ``--tfk_seed``. The pruned arm uses the median pruner (``--startup`` finished trials
first, no pruning before 5 % of the steps), judged on a grid of 1 % of the steps; each
trial prints a progress line every 0.5 % of its steps.

CPU-seconds are counted by the kernel, not sampled: each arm runs in a child process
that is a child subreaper (prctl PR_SET_CHILD_SUBREAPER), so every trial process - the
supervisors daemonize, their TensorFlow tasks are their children - ends up reaped by it
or by a reaped parent, and its rusage of children is the CPU of every process the arm
started, to their last tick, whatever else the machine runs. The sweep loop's own CPU
(the arm process: Optuna, SQLite, reading logs) is printed apart and not counted as the
trials'. Targets: the pruned arm's best held-out accuracy within ``--tolerance``
(absolute) of the unpruned arm's, on at most 60 % of its CPU-seconds.

For each pruned trial the bench prints how its pruning went: the step of the progress line
the pruner decided on, the last step the trial logged before its cluster was gone (their
difference is the steps trained after the decision), the age of that line when the
pruner was asked (how far behind the judge reads), and the seconds the end took.

What pruning can save is the training after the pruning step. Every trial, pruned or
not, pays a fixed start-up: TensorFlow's import in the task, the strategy, tracing, and
for a finished trial the final evaluation; the bench prints the fixed cost and the cost
per step that fit both arms. The ratio therefore depends on how long a trial trains
against that fixed cost: the default of 50,000 steps (tens of CPU-seconds of training
per trial, several times the start-up) is a sweep worth pruning; one whose trials train
for about as long as TensorFlow takes to import saves little by pruning.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from _common import parser  # noqa: E402

from airflow_tfk.backends.local.backend import LocalBackend  # noqa: E402
from airflow_tfk.core.naming import RunIdentity  # noqa: E402
from airflow_tfk.spec.cluster import TFClusterSpec  # noqa: E402
from airflow_tfk.sweep.config import SweepConfig  # noqa: E402
from airflow_tfk.sweep.runner import SweepRunner  # noqa: E402
from airflow_tfk.sweep.study import PRUNED_AT, PRUNING, format_table, storage_url  # noqa: E402
from airflow_tfk.sweep.trials import base_name  # noqa: E402

TARGET_CPU_RATIO = 0.60


#: prctl option: orphaned descendants are reparented to this process, not to init.
PR_SET_CHILD_SUBREAPER = 36
#: How long the subreaper waits for the last trial processes after the sweep returned.
REAP_SECONDS = 120.0


def _cpu(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def measured(arm: Callable[[], dict]) -> dict:
    """Run ``arm()`` in a grandchild under a subreaper child; its result, with the
    CPU-seconds of every process it started (``trials_cpu``) and its own (``loop_cpu``).

    Forked (no threads run here yet), so the arm is this script's code, not a new one.
    """
    out = Path(tempfile.mkdtemp(prefix="tfk-bench-arm-"))
    reaper = os.fork()
    if reaper == 0:  # the subreaper
        code = 1
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
            sweep = os.fork()
            if sweep == 0:  # the arm
                code = 1
                try:
                    result = arm()
                    result["loop_cpu"] = _cpu(resource.getrusage(resource.RUSAGE_SELF))
                    result["loop_children_cpu"] = _cpu(resource.getrusage(resource.RUSAGE_CHILDREN))
                    (out / "arm.json").write_text(json.dumps(result))
                    code = 0
                finally:
                    sys.stdout.flush()
                    os._exit(code)
            deadline = None
            while True:
                try:
                    pid, _status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break  # nothing left of the arm
                if pid == sweep:
                    deadline = time.monotonic() + REAP_SECONDS
                if pid == 0:
                    if deadline is not None and time.monotonic() > deadline:
                        print("WARNING: trial processes still alive; their CPU is not counted")
                        break
                    time.sleep(0.05)
            total = _cpu(resource.getrusage(resource.RUSAGE_CHILDREN))
            (out / "reaper.json").write_text(json.dumps({"all_cpu": total}))
            code = 0
        finally:
            sys.stdout.flush()
            os._exit(code)
    os.waitpid(reaper, 0)
    try:
        result = json.loads((out / "arm.json").read_text())
        total = json.loads((out / "reaper.json").read_text())["all_cpu"]
    finally:
        shutil.rmtree(out, ignore_errors=True)
    # Everything the subreaper reaped, minus the arm process itself (its children - the
    # short-lived daemonizing parents of the supervisors - are the trials' start).
    result["trials_cpu"] = total - result["loop_cpu"]
    return result


def spec(steps: int, workers: int) -> TFClusterSpec:
    return TFClusterSpec.from_dict(
        {
            "name": "bench",
            "image": "local/unused:1",
            "mode": "all_reduce",
            "command": ["python", "-m", "airflow_tfk.runtime.examples.digits_app"],
            "args": [
                "--tfk_steps",
                str(steps),
                "--tfk_progress_every",
                str(max(1, steps // 200)),
                "--tfk_checkpoint_every",
                "0",
                "--tfk_seed",
                "0",
                "--tfk_batch_size",
                "32",
            ],  # fmt: skip
            "worker": {"replicas": workers},
            "env": {"TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1"},
            "ps_grace_seconds": 0,
            "max_duration_seconds": 3600,
        }
    )


def config(args, pruned: bool) -> SweepConfig:
    return SweepConfig.from_dict(
        {
            "n_trials": args.trials,
            "max_concurrent_trials": args.concurrency,
            "search_space": {
                "tfk_learning_rate": {"type": "float", "low": 1e-5, "high": 1.0, "log": True},
                "hidden": {"type": "int", "low": 4, "high": 96, "log": True},
            },
            "objective": "accuracy",
            "direction": "maximize",
            "sampler": {"name": "random", "seed": args.seed},
            "pruner": {"name": "median", "n_startup_trials": args.startup, "n_warmup_steps": args.steps // 20}
            if pruned
            else "none",
            "model_versions": False,
            "poll_interval": 0.5,
            "smoothing": 0.3,
        }
    )


def run_arm(args, name: str, pruned: bool, work: Path) -> dict:
    root = work / name
    log = open(f"{args.log}.{name}", "w") if args.log else None
    backend = LocalBackend(str(root), workdir=str(REPO))
    identity = RunIdentity("bench_sweep", "sweep", name)
    cfg = config(args, pruned)
    study_name = f"bench-{name}"
    storage = storage_url(None, "local", str(root), study_name)
    runner = SweepRunner(
        backend,
        spec(args.steps, args.workers),
        identity,
        cfg,
        base=base_name(identity),
        study_name=study_name,
        storage=storage,
        emit=(lambda line: print(f"{time.time():.2f} {line}", file=log, flush=True))
        if log
        else (lambda line: None),
    )
    t0 = time.monotonic()
    result = runner.run()
    wall = time.monotonic() - t0
    import optuna

    attrs = {t.number: t.user_attrs for t in optuna.load_study(study_name=study_name, storage=storage).trials}
    prunings = [
        {
            "number": r["number"],
            "at": attrs[r["number"]].get(PRUNED_AT),
            **attrs[r["number"]].get(PRUNING, {}),
        }
        for r in result.trials
        if r["state"] == "PRUNED"
    ]
    states = [r["state"] for r in result.trials]
    return {
        "name": name,
        "table": format_table(result.trials, "accuracy"),
        "peak": result.peak_concurrency,
        "best": result.best["value"] if result.best else float("nan"),
        "best_trial": result.best["number"] if result.best else None,
        "wall": wall,
        "pruned": states.count("PRUNED"),
        "failed": states.count("FAIL"),
        "steps": sum(r["steps"] or 0 for r in result.trials),
        # a pruned trial up to the last step it logged, not the step it was pruned at
        "steps_run": sum(
            attrs[r["number"]].get(PRUNING, {}).get("stopped_at_step") or r["steps"] or 0
            for r in result.trials
        ),
        "prunings": prunings,
    }


def show(arm: dict) -> None:
    print(
        f"\n[{arm['name']}] {arm['wall']:.0f} s wall, trials {arm['trials_cpu']:.0f} CPU-s, "
        f"sweep loop {arm['loop_cpu']:.1f} CPU-s, peak {arm['peak']} clusters"
    )
    print(arm["table"])
    if arm["prunings"]:
        head = ("pruned trial", "decided at", "stopped at", "steps after", "line age s", "judge s", "end s")
        print("".join(f"{h:>{w}}" for h, w in zip(head, (14, 12, 12, 13, 12, 9, 8), strict=True)))
        for p in arm["prunings"]:
            stopped = p.get("stopped_at_step")
            after = "" if stopped is None or p["at"] is None else str(stopped - p["at"])
            age, judge = p.get("line_age_seconds"), p.get("judge_seconds")
            print(
                f"{p['number']:>14}{p['at']!s:>12}{stopped!s:>12}{after:>13}"
                f"{'' if age is None else f'{age:.2f}':>12}{'' if judge is None else f'{judge:.2f}':>9}"
                f"{p.get('end_seconds', float('nan')):>8.2f}"
            )


def main() -> int:
    p = parser(__doc__, trials=12, steps=50000, concurrency=2, workers=1, seed=3, startup=2, tolerance=0.02)
    p.add_argument("--log", default="", help="write each arm's sweep log to <LOG>.<arm>")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tfk-bench-sweep-"))
    try:
        full = measured(lambda: run_arm(args, "unpruned", False, work))
        show(full)
        cut = measured(lambda: run_arm(args, "pruned", True, work))
        show(cut)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for arm in (full, cut):
        arm["cpu"] = arm["trials_cpu"]
    ratio = cut["cpu"] / full["cpu"] if full["cpu"] else float("nan")
    gap = full["best"] - cut["best"]
    print(
        f"\n{args.trials} trials x {args.steps} steps, digits app, all_reduce x{args.workers}, "
        f"<= {args.concurrency} at once, random sampler seed {args.seed}"
    )
    print(f"{'':24}{'unpruned':>12}{'median pruner':>16}")
    print(f"{'best held-out accuracy':24}{full['best']:>12.4f}{cut['best']:>16.4f}")
    print(f"{'best trial':24}{full['best_trial']!s:>12}{cut['best_trial']!s:>16}")
    print(f"{'trials pruned':24}{full['pruned']:>12}{cut['pruned']:>16}")
    print(f"{'trials failed':24}{full['failed']:>12}{cut['failed']:>16}")
    print(f"{'steps (pruned: decided)':24}{full['steps']:>12}{cut['steps']:>16}")
    print(f"{'steps (pruned: stopped)':24}{full['steps_run']:>12}{cut['steps_run']:>16}")
    print(f"{'CPU-seconds (trials)':24}{full['cpu']:>12.0f}{cut['cpu']:>16.0f}")
    print(f"{'CPU-seconds (sweep loop)':24}{full['loop_cpu']:>12.1f}{cut['loop_cpu']:>16.1f}")
    print(f"{'wall seconds':24}{full['wall']:>12.0f}{cut['wall']:>16.0f}")
    if full["steps_run"] != cut["steps_run"]:
        # CPU = trials x fixed + steps x per-step, fitted to the two arms
        per_step = (full["cpu"] - cut["cpu"]) / (full["steps_run"] - cut["steps_run"])
        fixed = (full["cpu"] - per_step * full["steps_run"]) / args.trials
        print(f"fitted cost: {fixed:.1f} CPU-s per trial (start-up) + {1000 * per_step:.2f} CPU-ms per step")
    ok_cpu = ratio <= TARGET_CPU_RATIO
    ok_best = gap <= args.tolerance
    verdict = "ok" if ok_cpu else "MISSED"
    print(f"CPU-seconds pruned/unpruned: {ratio:.2f} (target <= {TARGET_CPU_RATIO}): {verdict}")
    print(
        f"best accuracy, unpruned - pruned: {gap:+.4f} (tolerance {args.tolerance}): "
        f"{'ok' if ok_best else 'MISSED'}"
    )
    return 0 if ok_cpu and ok_best else 1


if __name__ == "__main__":
    sys.exit(main())
