"""How a task's cluster addresses reach its process, and whether Linux lets them through.

A pod carries its cluster in one of two sizes: the full address map while it is small, a
name pattern and a count per role above :data:`FULL_CLUSTER_MAX_BYTES`. The legacy TF1
flags follow the same rule: written into the pod's args while small, built by the
runtime's launcher (``--tf1-flags``) from the pattern above it. Whatever is exec'd with a
full host list - the pod's args, or the launcher's exec of the script - must fit Linux's
limit of one argument or ``NAME=value`` string (:mod:`airflow_tfk.protocol.exec_limits`).
A Python script or module that the launcher runs in its own process has no exec and no
such limit. :func:`check_exec_sizes` refuses, before anything is created, a spec whose
task could not start; the spec's replica bounds are the limit everywhere else.

Both the spec's validation and the renderer read this module, so they decide alike.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from airflow_tfk.core import naming
from airflow_tfk.core.errors import SpecError
from airflow_tfk.protocol.exec_limits import (
    MAX_EXEC_BYTES,
    MAX_STRING_CHARS,
    POINTER_BYTES,
    UNSEEN_ENV_BYTES,
    cluster_map_chars,
    exec_bytes,
    joined_chars,
    python_command,
    tf_config_chars,
)
from airflow_tfk.spec.admission import Layout

if TYPE_CHECKING:
    from airflow_tfk.spec.cluster import TFClusterSpec

# Up to this size every pod carries the full address map, and Kubernetes builds TF_CONFIG
# from it, so any TensorFlow image works (about 250 tasks). Above it, TFK_CLUSTER holds a
# name pattern and a count per role - the same few hundred bytes at 10,000 tasks instead
# of ~460 KB in every pod - and the project's runtime expands it and sets TF_CONFIG.
FULL_CLUSTER_MAX_BYTES = 16 * 1024
LAUNCH_MODULE = "airflow_tfk.runtime.launch"
TF1_FLAGS_OPTION = "--tf1-flags"
NO_DEVICE_FILTERS_OPTION = "--no-device-filters"
_PYTHON = re.compile(r"python[0-9.]*")


def address_patterns(spec: TFClusterSpec) -> list[tuple[str, str, int]]:
    """(role, address pattern with ``{i}``, count) of the cluster map, in its order."""
    ns, jobset = spec.namespace_name, spec.layout is Layout.JOBSET
    return [
        (role, naming.task_address(spec.name, role, "{i}", ns, spec.port, jobset), rs.replicas)  # type: ignore[arg-type]
        for role, rs in spec.cluster_roles().items()
    ]


def compact_cluster(spec: TFClusterSpec) -> bool:
    """Whether the pods carry the pattern form (the full map is over the threshold)."""
    return cluster_map_chars(address_patterns(spec)) > FULL_CLUSTER_MAX_BYTES


def role_command(spec: TFClusterSpec, role: str) -> list[str]:
    rs = spec.roles()[role]
    return list(rs.command if rs.command is not None else spec.command)


def launcher_position(command: list[str]) -> int | None:
    """Index of the launcher's module name in a command that runs the launcher itself."""
    for i in range(1, len(command)):
        if command[i] == LAUNCH_MODULE and command[i - 1] == "-m":
            return i
    return None


def provider_adds_launcher(spec: TFClusterSpec, role: str) -> bool:
    """A cluster with ``legacy_tf1_flags`` runs each command behind the launcher, unless the
    command runs it already: in ``between_graph`` for its device-filter shim; in the other
    modes once the cluster is compact and the command is a Python program, so that the
    launcher builds the host flags. Host lists in the pod args would sit in the pod
    template of every Job (and JobSet), and so in every watch event of it: ~80 kB per Job
    status change at 2,000 workers, read by the wait. A Python program never has them
    exec'd (the launcher runs it in its own process when an exec would be refused); any
    other command keeps them in its args, under the exec limit it always had."""
    from airflow_tfk.spec.cluster import Mode

    if not spec.legacy_tf1_flags:
        return False
    command = role_command(spec, role)
    if spec.mode is not Mode.BETWEEN_GRAPH and (not compact_cluster(spec) or python_command(command) is None):
        return False
    return launcher_position(command) is None


def launcher_writes_tf1_flags(spec: TFClusterSpec, role: str) -> bool:
    """Whether the launcher builds the legacy flags (from the compact map) instead of the
    pod carrying them."""
    if not spec.legacy_tf1_flags or not compact_cluster(spec):
        return False
    return provider_adds_launcher(spec, role) or launcher_position(role_command(spec, role)) is not None


def task_command(spec: TFClusterSpec, role: str) -> list[str]:
    """The container command of ``role``, as written by the DAG author (unescaped): the
    spec's, or the same behind ``<python> [options] -m airflow_tfk.runtime.launch --`` (see
    :func:`provider_adds_launcher`), with ``--tf1-flags`` when the launcher builds the
    legacy flags (a cluster over :data:`FULL_CLUSTER_MAX_BYTES`). The single place both
    backends take it from."""
    command = role_command(spec, role)
    own_flags = [TF1_FLAGS_OPTION] if launcher_writes_tf1_flags(spec, role) else []
    if own_flags and spec.mode.value != "between_graph":
        # The shim's filters (ps + this task) suit between-graph sessions only: a chief
        # or an all-reduce worker must see its peers.
        own_flags.append(NO_DEVICE_FILTERS_OPTION)
    if not provider_adds_launcher(spec, role):
        at = launcher_position(command)
        if own_flags and at is not None and TF1_FLAGS_OPTION not in command:
            return [*command[: at + 1], *own_flags, *command[at + 1 :]]
        return command
    # The script's own interpreter, with its options, runs the launcher when the command
    # names one: the image's Python with airflow_tfk is used, and the launcher can run
    # the script in its own process when an exec would be refused (runtime/in_process.py).
    # A shell or binary entry point gets `python`.
    if _PYTHON.fullmatch(command[0].rsplit("/", 1)[-1]):
        python, options = command[0], _interpreter_options(command)
    else:
        python, options = "python", []
    return [python, *options, "-m", LAUNCH_MODULE, *own_flags, "--", *command]


def _interpreter_options(command: list[str]) -> list[str]:
    parsed = python_command(command)
    return list(parsed.options) if parsed is not None else []


def runs_in_process(spec: TFClusterSpec, role: str) -> bool:
    """Whether the launcher can run the role's program in its own process when an exec
    would be refused: a Python script or module of the launcher's interpreter, with its
    options (the provider starts its launcher with the program's interpreter and options)."""
    command = role_command(spec, role)
    if provider_adds_launcher(spec, role):
        return python_command(command) is not None
    at = launcher_position(command)
    if at is None or "--" not in command[at:]:
        return False
    inner = python_command(command[command.index("--", at) + 1 :])
    return (
        inner is not None and inner.interpreter == command[0] and list(inner.options) == command[1 : at - 1]
    )


def _exec_strings(spec: TFClusterSpec, role: str, counts: dict[str, int]) -> list[tuple[str, int]]:
    """(what, characters) of each string that an exec of the role's task carries at full
    size, with ``counts`` replicas per role."""
    patterns = [(r, p, counts[r]) for r, p, _ in address_patterns(spec)]
    by_role = {r: (p, n) for r, p, n in patterns}
    compact = cluster_map_chars(patterns) > FULL_CLUSTER_MAX_BYTES
    if not compact:
        return []  # every string is under the threshold, far below the limit
    launched = provider_adds_launcher(spec, role) or launcher_position(role_command(spec, role)) is not None
    if launched and runs_in_process(spec, role):
        return []
    out: list[tuple[str, int]] = []
    if spec.legacy_tf1_flags:
        for flag, hosts in (("--ps_hosts", "ps"), ("--worker_hosts", "worker")):
            if hosts in by_role:
                out.append((f"{flag}=...", len(flag) + 1 + joined_chars(*by_role[hosts])))
    if launched:  # the launcher sets TF_CONFIG before its exec
        index = max(counts.get(role, 1) - 1, 0)
        out.append(("TF_CONFIG=...", len("TF_CONFIG=") + tf_config_chars(patterns, role, index)))
    return out


def _too_big(spec: TFClusterSpec, role: str, counts: dict[str, int]) -> tuple[str, int] | None:
    over = [(what, n) for what, n in _exec_strings(spec, role, counts) if n > MAX_STRING_CHARS]
    return max(over, key=lambda x: x[1]) if over else None


def _fits(spec: TFClusterSpec, role: str, counts: dict[str, int], grow: str, n: int) -> bool:
    return _too_big(spec, role, {**counts, grow: n}) is None


def _most(fits: Callable[[int], bool], hi: int) -> int:
    lo = 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def check_exec_sizes(spec: TFClusterSpec) -> None:
    """Refuse a spec with a task whose exec Linux would refuse (E2BIG), naming the role's
    replica count that makes it so and the most that fit."""
    counts = {r: rs.replicas for r, rs in spec.cluster_roles().items()}
    for role in spec.roles():
        over = _too_big(spec, role, counts)
        if over is None:
            continue
        what, size = over
        grow = "ps" if what.startswith("--ps_hosts") else "worker"
        most = _most(functools.partial(_fits, spec, role, counts, grow), counts[grow])
        raise SpecError(
            f"{grow}.replicas",
            f"with {counts[grow]} {grow} tasks, the {what} of a {role} task has {size:,} characters, "
            f"over Linux's limit of {MAX_STRING_CHARS:,} for one argument or environment string of an exec "
            f"(MAX_ARG_STRLEN: the task would fail with 'argument list too long'); with this name, "
            f"namespace and command at most {most} fit. A command that is a Python script or module "
            "(python [options] script.py | -m module) has no such limit: the runtime's launcher runs "
            "it in its own process",
            counts[grow],
        )


def _generated(name: str, chars: int) -> int:
    """Exec room of one generated ``NAME=value`` or ``--flag=value`` string of ASCII."""
    return len(name) + 1 + chars + 1 + POINTER_BYTES


def _env_room(env: Iterable[tuple[str, str]]) -> int:
    return exec_bytes(f"{k}={v}" for k, v in env)


def exec_footprint(spec: TFClusterSpec, role: str) -> dict[str, int]:
    """Bytes of exec room the role's last task takes, by where they come from, for the
    biggest exec it makes: the container's start (its command, args and environment as the
    backend builds them), or the launcher's exec of the script, which adds ``TF_CONFIG``
    and the legacy flags at full size. Keys: ``command``, ``args``, ``env`` (the spec's and
    the role's), ``cluster`` (what grows with the replica counts: the legacy host lists,
    ``TFK_CLUSTER``, ``TF_CONFIG``) and ``platform`` (the other variables it sets)."""
    from airflow_tfk.spec.roles import StorageSpec

    rs = spec.roles()[role]
    patterns = address_patterns(spec)
    by_role = {r: (p, n) for r, p, n in patterns}
    compact = cluster_map_chars(patterns) > FULL_CLUSTER_MAX_BYTES
    index = max(rs.replicas - 1, 0)
    args = rs.args if rs.args is not None else spec.args
    env = {**spec.env, **rs.env}
    platform = [
        ("TFK_ROLE", role),
        ("TFK_INDEX", str(index)),
        ("TFK_MODE", spec.mode.value),
        ("TFK_CLUSTER_NAME", spec.name),
        ("TFK_TERMINATION_GRACE_SECONDS", str(spec.termination_grace_seconds)),
        ("TMPDIR", f"{StorageSpec.MOUNT_ROOT}/scratch"),
        ("HOME", f"{StorageSpec.MOUNT_ROOT}/home"),
        *((f"TFK_{v.upper()}_DIR", f"{StorageSpec.MOUNT_ROOT}/{v}") for v in spec.storage.volumes()),
    ]
    if spec.metrics_port is not None:
        platform += [("TFK_METRICS_PORT", str(spec.metrics_port)), ("TFK_METRICS_PATH", spec.metrics_path)]
    if compact:
        cluster_value = len(
            json.dumps({r: {"pattern": p, "count": n} for r, p, n in patterns}, separators=(",", ":"))
        )
    else:
        cluster_value = cluster_map_chars(patterns)
    tf_config = _generated("TF_CONFIG", tf_config_chars(patterns, role, index))
    tf1 = 0
    if spec.legacy_tf1_flags:
        for flag, hosts in (("--ps_hosts", "ps"), ("--worker_hosts", "worker")):
            if hosts in by_role:
                tf1 += _generated(flag, joined_chars(*by_role[hosts]))
        tf1 += exec_bytes([f"--job_name={role}", f"--task_index={index}"])
    pod_tf1 = tf1 if not launcher_writes_tf1_flags(spec, role) else 0
    shared = {"args": exec_bytes(args), "env": _env_room(env.items()), "platform": _env_room(platform)}
    start = {
        **shared,
        "command": exec_bytes(task_command(spec, role)),
        "cluster": _generated("TFK_CLUSTER", cluster_value) + pod_tf1 + (0 if compact else tf_config),
    }
    launched = provider_adds_launcher(spec, role) or launcher_position(role_command(spec, role)) is not None
    if not launched or runs_in_process(spec, role):
        return start
    script = {
        **shared,
        "command": exec_bytes(role_command(spec, role)),
        "cluster": _generated("TFK_CLUSTER", cluster_value) + tf1 + tf_config,
    }
    return max(start, script, key=lambda room: sum(room.values()))


#: the exec room a spec may fill: what Linux gives, less what it cannot see
EXEC_BUDGET = MAX_EXEC_BYTES - UNSEEN_ENV_BYTES


def _surely_fits(spec: TFClusterSpec) -> bool:
    """A bound on every task's exec, from character counts alone (a character is at most 3
    UTF-8 bytes, the spec refusing those beyond U+FFFF; each generated cluster string - host
    lists, ``TFK_CLUSTER``, ``TF_CONFIG`` - at most the full address map, plus a little):
    most specs are far below the budget and need no per-role accounting, which runs on
    every validation, at DAG parse time too."""
    roles = spec.roles().values()
    words = [spec.command, spec.args, *(rs.command or () for rs in roles), *(rs.args or () for rs in roles)]
    chars = sum(len(w) + 1 + POINTER_BYTES for ws in words for w in ws)
    chars += sum(
        len(k) + len(v) + 2 + POINTER_BYTES
        for env in (spec.env, *(rs.env for rs in roles))
        for k, v in env.items()
    )
    # one address: <name>-<role>-<i>-<i>.<name>-<role>.<namespace>.svc:<port>, quoted, a comma
    each = 2 * len(spec.name) + 2 * len("evaluator") + len(spec.namespace_name) + 2 * 6 + 16
    cluster = sum(rs.replicas for rs in roles) * each + 64
    return 3 * chars + 4 * (cluster + 256) + 4096 <= EXEC_BUDGET


def check_exec_totals(spec: TFClusterSpec) -> None:
    """Refuse a spec with a task whose exec's arguments and environment together are over
    what Linux takes (E2BIG, 'argument list too long'), naming the field that holds the
    most of them."""
    if _surely_fits(spec):
        return
    for role, rs in spec.roles().items():
        room = exec_footprint(spec, role)
        total = sum(room.values())
        if total <= EXEC_BUDGET:
            continue
        part = max(("args", "env", "cluster", "command"), key=lambda k: room[k])
        if part == "cluster":
            grow = max(
                (r for r in ("worker", "ps") if r in spec.cluster_roles()),
                key=lambda r: spec.roles()[r].replicas,
            )
            field = f"{grow}.replicas"
        elif part == "env":
            field = f"{role}.env" if _env_room(rs.env.items()) > _env_room(spec.env.items()) else "env"
        else:
            field = f"{role}.{part}" if getattr(rs, part) is not None else part
        parts = ", ".join(f"{k} {v:,}" for k, v in room.items() if v)
        raise SpecError(
            field,
            f"a {role} task's exec would carry {total:,} bytes of arguments and environment ({parts}), "
            f"over the {EXEC_BUDGET:,} a spec may fill: Linux refuses an exec over {MAX_EXEC_BYTES:,} "
            f"(a quarter of an 8 MiB stack; 'argument list too long') and {UNSEEN_ENV_BYTES:,} are left "
            "for the image's and the kubelet's variables; pass large data in a file",
        )


def launched_program(spec: TFClusterSpec, role: str) -> list[str] | None:
    """The program the runtime's launcher would run for the role, read from the task's
    whole argv (command, args, the legacy flags the pod carries) as the launcher reads it
    (``runtime/launch.py``: the words after ``--``, or all of them unless the first is an
    option); None when the task does not run the launcher."""
    command = task_command(spec, role)
    at = launcher_position(command)
    if at is None:
        return None
    rs = spec.roles()[role]
    rest = [*command[at + 1 :], *(rs.args if rs.args is not None else spec.args)]
    if spec.legacy_tf1_flags and not launcher_writes_tf1_flags(spec, role):
        rest.append("--job_name=$(TFK_ROLE)")  # the pod's legacy flags follow the args
    if "--" in rest:
        return rest[rest.index("--") + 1 :]
    return [] if rest and rest[0].startswith("-") else rest


def check_launched_programs(spec: TFClusterSpec) -> None:
    """Refuse a command that runs the runtime's launcher with no program for it to run:
    the task would start and exit with a usage error (or exec a flag as a program)."""
    for role, rs in spec.roles().items():
        program = launched_program(spec, role)
        if program is None or (program and not program[0].startswith("-")):
            continue
        field = f"{role}.command" if rs.command is not None else "command"
        raise SpecError(
            field,
            f"runs the runtime's launcher (-m {LAUNCH_MODULE}) with no program to run: put the "
            "script after '--' (python -m airflow_tfk.runtime.launch -- python train.py)",
            list(role_command(spec, role)),
        )
