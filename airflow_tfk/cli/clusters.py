"""``airflow-tfk clusters``: the provider's clusters, in the manner of ``kubectl``.

    airflow-tfk clusters list [-A | -n NS]
    airflow-tfk clusters status NAME [-n NS]
    airflow-tfk clusters logs NAME [TASK] [--tail N]    (default: the last 200 lines)
    airflow-tfk clusters delete NAME [-n NS] [--dag-id D --task-id T --run-id R [--map-index I]]
    airflow-tfk clusters sweep [-A | -n NS] [--dry-run]

It talks to the cluster through the same backend as the operators (the ``kubernetes``
connection ``--conn-id``, or a ``--kubeconfig``), and applies their rules: ``delete``
removes a cluster only for the task instance that owns it (named with ``--dag-id`` ...),
or one created outside Airflow when no owner is named, through the same end-of-run path
(its exports set aside, a reason recorded). ``sweep`` is the orphan sweeper of
``TFSweepOrphansOperator``; it reads the task instances' states from the Airflow
metadata database of the environment it runs in (``AIRFLOW_HOME``).

``--backend local`` runs the same commands on the local backend's root.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from airflow_tfk.cli.table import Command, add_commands, arg
from airflow_tfk.core.constants import BACKEND, BACKEND_KINDS, KUBERNETES_CONN_ID, NAMESPACE

if TYPE_CHECKING:
    from airflow_tfk.backends.base import Backend, ClusterOwner, ClusterRef
    from airflow_tfk.core.naming import RunIdentity
    from airflow_tfk.core.status import ClusterStatus

EXIT_ERROR = 1
# ``logs`` shows the end of a log unless asked for more: a training's log may be gigabytes.
LOGS_TAIL = 200


_ALL_NAMESPACES = arg("-A", "--all-namespaces", action="store_true")
COMMON = (
    arg("--backend", choices=BACKEND_KINDS, default=BACKEND),
    arg("--conn-id", default=KUBERNETES_CONN_ID, help="Airflow `kubernetes` connection"),
    arg("--kubeconfig", help="a kubeconfig file instead of the connection's"),
    arg("--context", help="the kubeconfig context"),
    arg("-n", "--namespace", default=None, help=f"namespace (default: {NAMESPACE!r})"),
)
ACTIONS = (
    Command("list", "the clusters with their status and owner", None, (_ALL_NAMESPACES,)),
    Command("status", "roles, progress and owner of one cluster", None, (arg("name"),)),
    Command(
        "logs",
        "one task's log (default: the progress task)",
        None,
        (
            arg("name"),
            arg("task", nargs="?", help="ROLE-INDEX, e.g. worker-1 (default: chief-0, else worker-0)"),
            arg(
                "--tail",
                type=int,
                default=LOGS_TAIL,
                help=f"the last N lines (default {LOGS_TAIL}; -1: all the backend reads at once)",
            ),
        ),
    ),
    Command(
        "delete",
        "delete a cluster its owner names",
        None,
        (
            arg("name"),
            arg("--dag-id"),
            arg("--task-id"),
            arg("--run-id"),
            arg("--map-index", type=int, default=-1),
            arg("--reason", default="deleted with airflow-tfk clusters delete"),
        ),
    ),
    Command(
        "sweep",
        "delete clusters no task instance waits on",
        None,
        (_ALL_NAMESPACES, arg("--dry-run", action="store_true", help="only say what would be deleted")),
    ),
)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    clusters = sub.add_parser(
        "clusters",
        help="list, inspect, read the logs of, delete or sweep the provider's clusters",
        description="The provider's TF clusters on Kubernetes (or the local backend), "
        "as the operators see them.",
    )
    common = argparse.ArgumentParser(add_help=False)
    for flags, options in COMMON:
        common.add_argument(*flags, **options)
    add_commands(clusters.add_subparsers(dest="action", required=True), ACTIONS, parents=[common])


def run(args: argparse.Namespace) -> int:
    from airflow_tfk.core.errors import ClusterOwnershipError, SpecError
    from airflow_tfk.core.printable import printable

    try:
        _check_args(args)
        backend = _backend(args)
        return int(_ACTIONS[args.action](backend, args))
    except (ClusterOwnershipError, SpecError, LookupError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except RuntimeError as exc:  # the backend's own errors (an API call that failed for good)
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:  # a file refused (a log that is a FIFO or a link) or unreadable
        print(f"error: {printable(str(exc))}", file=sys.stderr)
        return EXIT_ERROR


def _check_args(args: argparse.Namespace) -> None:
    """The names the command line gives, checked before any backend is asked: a name goes
    into a label selector, a namespace into an API path or a local directory."""
    from airflow_tfk.core import naming
    from airflow_tfk.core.errors import SpecError
    from airflow_tfk.spec.roles import ROLES

    name = getattr(args, "name", None)
    if name is not None and not naming.is_dns1035_label(name):
        raise SpecError("NAME", "is not a cluster name (a DNS-1035 label)", name)
    if args.namespace is not None and not naming.is_dns1123_label(args.namespace):
        raise SpecError("--namespace", "is not a namespace name (a DNS-1123 label)", args.namespace)
    if getattr(args, "tail", None) is not None and args.tail < -1:
        raise SpecError("--tail", "must be 0 or more lines, or -1 for all", args.tail)
    if getattr(args, "kubeconfig", None):
        from airflow_tfk.core.bounded_files import check_kubeconfig

        check_kubeconfig(args.kubeconfig, "--kubeconfig")
    task = getattr(args, "task", None)
    if task:
        role, _, index = task.rpartition("-")
        if role not in ROLES or not index.isdigit() or len(index) > 6:
            raise SpecError("TASK", f"expected ROLE-INDEX such as worker-1 (roles: {', '.join(ROLES)})", task)


def _backend(args: argparse.Namespace) -> Backend:
    from airflow_tfk.backends import get_backend

    if args.backend == "local":
        return get_backend("local")
    return get_backend(
        "kubernetes", conn_id=args.conn_id, config_file=args.kubeconfig, cluster_context=args.context
    )


def _namespace(args: argparse.Namespace) -> str | None:
    if getattr(args, "all_namespaces", False):
        return None
    return args.namespace or NAMESPACE


def _ref(args: argparse.Namespace) -> ClusterRef:
    from airflow_tfk.backends.base import ClusterRef

    return ClusterRef(args.name, args.namespace or NAMESPACE)


def _owner_text(owner: ClusterOwner | None) -> str:
    return "-" if owner is None else owner.describe()


def _age(owner: ClusterOwner | None) -> str:
    if owner is None or owner.created_at is None:
        return "-"
    from airflow_tfk.run.wait import format_duration

    return format_duration(max(0.0, time.time() - owner.created_at))


def _list(backend: Backend, args: argparse.Namespace) -> int:
    refs = sorted(backend.clusters(_namespace(args)), key=lambda r: (r.namespace, r.name))
    rows = [("NAMESPACE", "NAME", "AGE", "TASKS", "OWNER")]
    for ref in refs:
        owner = backend.owner(ref)
        rows.append((ref.namespace, ref.name, _age(owner), backend.status(ref).summary(), _owner_text(owner)))
    if len(rows) == 1:
        where = "any namespace" if _namespace(args) is None else f"namespace {_namespace(args)}"
        print(f"no clusters in {where}")
        return 0
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:4])) + "  " + row[4])
    return 0


def _progress_task(status: ClusterStatus) -> tuple[str, int]:
    roles = {t.role for t in status.tasks}
    return ("chief", 0) if "chief" in roles else ("worker", 0)


def _status(backend: Backend, args: argparse.Namespace) -> int:
    from airflow_tfk.core.printable import printable
    from airflow_tfk.core.status import Phase
    from airflow_tfk.protocol.progress import last_progress
    from airflow_tfk.run.wait import format_progress

    ref = _ref(args)
    owner = backend.owner(ref)
    status = backend.status(ref)
    if owner is None and not status.tasks:
        raise LookupError(f"cluster {ref.name} not found in namespace {ref.namespace}")
    print(f"cluster:   {ref.name} (namespace {ref.namespace}, selector {ref.label_selector})")
    print(f"owner:     {_owner_text(owner)}")
    print(f"age:       {_age(owner)}")
    print(f"tasks:     {status.summary()}")
    for task in sorted(status.tasks, key=lambda t: (t.role, t.index)):
        # The reason may quote the task's own termination message: shown, never obeyed
        # by the terminal.
        why = f" ({printable(task.reason)})" if task.reason else ""
        if task.reason and task.message and task.phase in (Phase.PENDING, Phase.FAILED):
            # why it waits or failed, in the words of whoever refused it (one line)
            detail = printable(task.message.strip().splitlines()[0] if task.message.strip() else "")
            why = f" ({printable(task.reason)}: {detail[:300]})"
        code = f", exit code {task.exit_code}" if task.exit_code is not None else ""
        print(f"  {task.name:<12} {task.phase.value.lower()}{why}{code}, restarts {task.restarts}")
    role, index = _progress_task(status)
    try:
        progress = last_progress(backend.logs(ref, role, index, tail_lines=200)) if status.tasks else None
        shown = f"[{role}-{index}] {format_progress(progress)}" if progress else "none reported yet"
    except (RuntimeError, OSError) as exc:  # the log is not readable (yet): the status above still holds
        shown = f"unknown: {exc}"
    print(f"progress:  {shown}")
    return 0


def _logs(backend: Backend, args: argparse.Namespace) -> int:
    ref = _ref(args)
    if args.task:
        role, _, index = args.task.rpartition("-")  # checked by _check_args
        task = (role, int(index))
    else:
        task = _progress_task(backend.status(ref))
    sys.stdout.write(backend.logs(ref, task[0], task[1], tail_lines=None if args.tail == -1 else args.tail))
    return 0


def _identity(args: argparse.Namespace) -> RunIdentity | None:
    from airflow_tfk.core.naming import RunIdentity

    given = [args.dag_id, args.task_id, args.run_id]
    if not any(given):
        return None
    if not all(given):
        raise LookupError("--dag-id, --task-id and --run-id name the owning task instance together")
    return RunIdentity(args.dag_id, args.task_id, args.run_id, args.map_index)


def _delete(backend: Backend, args: argparse.Namespace) -> int:
    from airflow_tfk.run.ending import RunResult, decisive_succeeded, end_run
    from airflow_tfk.run.handle import ClusterHandle
    from airflow_tfk.run.lifecycle import check_owner

    ref = _ref(args)
    owner = backend.owner(ref)
    if owner is None:
        raise LookupError(f"cluster {ref.name} not found in namespace {ref.namespace}")
    identity = _identity(args)
    check_owner(ref, owner, identity, "delete")  # an error (exit 1) naming the owner
    status = backend.status(ref)
    # A run ended before it succeeded is not publishable.
    result = RunResult.ACCEPTED if decisive_succeeded(status) else RunResult.REJECTED
    handle = ClusterHandle.for_ref(ref, backend, identity)
    end_run(handle, args.reason, result=result, emit=print, status=status, grace_seconds=0, log_lines=0)
    return 0


def _sweep(backend: Backend, args: argparse.Namespace) -> int:
    from airflow_tfk.run.orphans import sweep

    sweep(backend, _namespace(args), _task_instance_state, dry_run=args.dry_run, emit=print)
    return 0


def _task_instance_state(identity: RunIdentity) -> str | None:
    """The state of a task instance in this environment's Airflow metadata database."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        state: Any = session.scalar(
            select(TaskInstance.state).where(
                TaskInstance.dag_id == identity.dag_id,
                TaskInstance.task_id == identity.task_id,
                TaskInstance.run_id == identity.run_id,
                TaskInstance.map_index == identity.map_index,
            )
        )
    return None if state is None else str(getattr(state, "value", state))


_ACTIONS = {"list": _list, "status": _status, "logs": _logs, "delete": _delete, "sweep": _sweep}
