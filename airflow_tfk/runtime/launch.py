"""Run an unmodified TensorFlow script as one task of the cluster.

    python -m airflow_tfk.runtime.launch [--tf1-flags] [--wait-for ROLES] -- CMD [ARGS...]

Sets ``TF_CONFIG`` (built from ``TFK_CLUSTER``/``TFK_ROLE``/``TFK_INDEX`` when it is not
set already), optionally waits until other tasks are reachable, and with ``--tf1-flags``
appends ``--ps_hosts --worker_hosts --job_name --task_index`` for TF1-style scripts.
In a between-graph cluster (``--tf1-flags``, or ``TFK_MODE=between_graph``) it also puts
:mod:`airflow_tfk.runtime.tf1_shim` on ``PYTHONPATH``, so the script's sessions see only
the ps and their own task (``device_filters``) even when the script sets none; without
them a worker that starts after its peers have exited waits forever for them
(``--no-device-filters`` turns this off).
Then it replaces itself with CMD (``exec``): the exit code and signals are the script's
own, with nothing in between. When Linux would refuse that exec (an argument or an
environment string of 128 KiB or more: the host flags or ``TF_CONFIG`` of a few thousand
tasks) and CMD is a Python program of this interpreter, it runs CMD in this process
instead (:mod:`airflow_tfk.runtime.in_process`), with the full flags in its ``sys.argv``;
any other CMD fails with exit code 126 and says why. Pure Python: no TensorFlow is
imported here.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import MutableMapping, Sequence

from airflow_tfk.runtime import in_process
from airflow_tfk.runtime.cluster import (
    ClusterConfigError,
    ClusterWaitTimeout,
    ensure_tf_config,
    wait_for_cluster,
)

# Exit codes of launch itself (before CMD runs). 2 = usage/config (permanent),
# 3 = the cluster did not come up in time, 126 = CMD cannot be run, 127 = CMD not found.
EXIT_USAGE = 2
EXIT_CLUSTER_TIMEOUT = 3
EXIT_CANNOT_EXEC = 126
EXIT_NOT_FOUND = 127


def build_command(
    argv: Sequence[str] | None = None, env: MutableMapping[str, str] | None = None
) -> tuple[list[str], argparse.Namespace]:
    """The command to exec and the parsed launcher options; sets TF_CONFIG (and, for
    between-graph tasks, PYTHONPATH) in ``env``."""
    if env is None:
        env = os.environ
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" in argv:
        cut = argv.index("--")
        own, cmd = argv[:cut], argv[cut + 1 :]
    elif argv and argv[0].startswith("-"):
        own, cmd = argv, []  # options but no "--": nothing to run
    else:
        own, cmd = [], argv
    parser = argparse.ArgumentParser(
        prog="python -m airflow_tfk.runtime.launch",
        description="Run a TensorFlow script as a task of the cluster described by "
        "TF_CONFIG or TFK_CLUSTER/TFK_ROLE/TFK_INDEX.",
    )
    parser.add_argument(
        "--tf1-flags", action="store_true", help="append --ps_hosts --worker_hosts --job_name --task_index"
    )
    parser.add_argument(
        "--no-device-filters",
        action="store_true",
        help="do not give the script's TF1 sessions device filters (ps + this task)",
    )
    parser.add_argument(
        "--wait-for",
        default="",
        help="comma-separated roles to wait for (DNS + TCP) before starting, e.g. 'ps'; default: do not wait",
    )
    parser.add_argument(
        "--wait-timeout", type=float, default=600.0, help="seconds to wait for --wait-for roles"
    )
    opts = parser.parse_args(own)
    if not cmd:
        parser.error("no command given: python -m airflow_tfk.runtime.launch [options] -- CMD ...")
    opts.info = ensure_tf_config(env)
    if opts.tf1_flags:
        cmd = cmd + opts.info.tf1_flags()
    if _shim_wanted(opts):
        install_tf1_shim(env)
    return cmd, opts


SHIM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tf1_shim")


def install_tf1_shim(env: MutableMapping[str, str]) -> None:
    """Put the device-filter shim first on ``PYTHONPATH`` (once)."""
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if SHIM_DIR not in paths:
        env["PYTHONPATH"] = os.pathsep.join([SHIM_DIR, *paths])


def main(argv: Sequence[str] | None = None) -> int:
    try:
        cmd, opts = build_command(argv)
    except ClusterConfigError as exc:
        print(f"[tfk] launch: {exc}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    roles = [r.strip() for r in opts.wait_for.split(",") if r.strip()]
    if roles:
        try:
            wait_for_cluster(opts.info, roles=roles, timeout=opts.wait_timeout)
        except ClusterWaitTimeout as exc:
            print(f"[tfk] launch: {exc}", file=sys.stderr, flush=True)
            return EXIT_CLUSTER_TIMEOUT
    refusal = in_process.exec_refusal(cmd, os.environ)
    if refusal is not None:
        return _run_here(cmd, opts, refusal)
    program = cmd[0] if os.sep in cmd[0] else shutil.which(cmd[0])
    if program is None:
        print(f"[tfk] launch: command not found: {cmd[0]}", file=sys.stderr, flush=True)
        return EXIT_NOT_FOUND
    print(f"[tfk] launch: {opts.info.role}:{opts.info.index} exec {_shown(cmd)}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        # exec: same PID, so signals from the kubelet / local backend reach the script
        # directly and its exit status is the task's.
        os.execvpe(program, cmd, os.environ)
    except OSError as exc:
        print(f"[tfk] launch: cannot run {cmd[0]}: {exc}", file=sys.stderr, flush=True)
        return EXIT_CANNOT_EXEC
    return 0  # not reached


def _run_here(cmd: list[str], opts: argparse.Namespace, refusal: str) -> int:
    """CMD in this process, as the exec that Linux would refuse (``refusal``) would have."""
    target = in_process.in_process_target(cmd)
    if target is None:
        print(
            f"[tfk] launch: cannot exec {cmd[0]}: {refusal}, over Linux's limit of "
            f"{in_process.exec_limit():,} for one argument or environment string (E2BIG); "
            "a Python script or module run by this interpreter with the same options "
            "(python [options] script.py | -m module) would run in this process instead",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_CANNOT_EXEC
    hidden = in_process.keep_from_children(os.environ, in_process.exec_limit())
    print(
        f"[tfk] launch: {opts.info.role}:{opts.info.index} runs {_shown(cmd)} in this process "
        f"({refusal}: too long for an exec)"
        + (f"; {', '.join(hidden)} not passed on to its subprocesses" if hidden else ""),
        file=sys.stderr,
        flush=True,
    )
    in_process.run(target, tf1_shim=_shim_wanted(opts))
    return 0


def _shim_wanted(opts: argparse.Namespace) -> bool:
    return not opts.no_device_filters and (opts.tf1_flags or opts.info.mode == "between_graph")


def _shown(cmd: list[str], most: int = 200) -> str:
    """The command for the log, each long word cut: a host list can be megabytes."""
    return " ".join(w if len(w) <= most else f"{w[: most // 2]}...[{len(w):,} characters]" for w in cmd)


if __name__ == "__main__":
    sys.exit(main())
