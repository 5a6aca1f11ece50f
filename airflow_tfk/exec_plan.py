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
from collections.abc import Callable
from typing import TYPE_CHECKING

from airflow_tfk import naming
from airflow_tfk.admission import Layout
from airflow_tfk.errors import SpecError
from airflow_tfk.protocol.exec_limits import (
    MAX_STRING_CHARS,
    cluster_map_chars,
    joined_chars,
    python_command,
    tf_config_chars,
)

if TYPE_CHECKING:
    from airflow_tfk.spec import TFClusterSpec

# Up to this size every pod carries the full address map, and Kubernetes builds TF_CONFIG
# from it, so any TensorFlow image works (about 250 tasks). Above it, TFK_CLUSTER holds a
# name pattern and a count per role - the same few hundred bytes at 10,000 tasks instead
# of ~460 KB in every pod - and the project's runtime expands it and sets TF_CONFIG.
FULL_CLUSTER_MAX_BYTES = 16 * 1024
LAUNCH_MODULE = "airflow_tfk.runtime.launch"
TF1_FLAGS_OPTION = "--tf1-flags"


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
    """A ``between_graph`` cluster with ``legacy_tf1_flags`` runs each command behind the
    launcher (for its device-filter shim), unless the command runs it already."""
    from airflow_tfk.spec import Mode

    if not spec.legacy_tf1_flags or spec.mode is not Mode.BETWEEN_GRAPH:
        return False
    return launcher_position(role_command(spec, role)) is None


def launcher_writes_tf1_flags(spec: TFClusterSpec, role: str) -> bool:
    """Whether the launcher builds the legacy flags (from the compact map) instead of the
    pod carrying them."""
    if not spec.legacy_tf1_flags or not compact_cluster(spec):
        return False
    return provider_adds_launcher(spec, role) or launcher_position(role_command(spec, role)) is not None


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
