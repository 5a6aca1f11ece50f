"""``airflow-tfk clusters``: the provider's clusters, in the manner of ``kubectl``.

    airflow-tfk clusters list [-A | -n NS] [-o table|json|yaml|plain]
    airflow-tfk clusters status NAME [-n NS] [-o table|json|yaml|plain]
    airflow-tfk clusters logs NAME [TASK] [--tail N] [-f]    (default: the last 200 lines)
    airflow-tfk clusters delete NAME [-n NS] [--dag-id D --task-id T --run-id R [--map-index I]]
    airflow-tfk clusters sweep [-A | -n NS] [--dry-run]

It talks to the cluster through the same backend as the operators (the ``kubernetes``
connection ``--conn-id``, or a ``--kubeconfig``), and applies their rules: ``delete``
removes a cluster only for the task instance that owns it (named with ``--dag-id`` ...),
or one created outside Airflow when no owner is named, through the same end-of-run path
(its exports set aside, a reason recorded). ``sweep`` is the orphan sweeper of
``TFSweepOrphansOperator``; it reads the task instances' states from the Airflow
metadata database of the environment it runs in (``AIRFLOW_HOME``).

``--backend local`` runs the same commands on the local backend's root; without
``--backend`` the environment's ``TFK_BACKEND`` decides (``airflow-tfk airflow``, ``up`` and
``eval "$(airflow-tfk env)"`` set it to ``local``), else ``kubernetes``, the product.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from airflow_tfk.cli.table import Command, add_commands, arg, format_record, format_rows, output_arg
from airflow_tfk.core.constants import BACKEND, BACKEND_KINDS, KUBERNETES_CONN_ID, NAMESPACE, BackendKind

if TYPE_CHECKING:
    from airflow_tfk.backends.base import Backend, ClusterOwner, ClusterRef
    from airflow_tfk.core.naming import RunIdentity
    from airflow_tfk.core.status import ClusterStatus
    from airflow_tfk.run.usage import Usage

EXIT_ERROR = 1
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports it
#: Seconds between two reads of a followed log (and of its task's phase).
FOLLOW_INTERVAL_SECONDS = 1.0
# ``logs`` shows the end of a log unless asked for more: a training's log may be gigabytes.
LOGS_TAIL = 200


_ALL_NAMESPACES = arg("-A", "--all-namespaces", action="store_true")
COMMON = (
    arg(
        "--backend",
        choices=BACKEND_KINDS,
        default=None,
        help=f"where the clusters run (default: $TFK_BACKEND, else {BACKEND})",
    ),
    arg("--conn-id", default=KUBERNETES_CONN_ID, help="Airflow `kubernetes` connection"),
    arg("--kubeconfig", help="a kubeconfig file instead of the connection's"),
    arg("--context", help="the kubeconfig context"),
    arg("-n", "--namespace", default=None, help=f"namespace (default: {NAMESPACE!r})"),
)
ACTIONS = (
    Command("list", "the clusters with their status and owner", None, (_ALL_NAMESPACES, output_arg())),
    Command("status", "roles, progress and owner of one cluster", None, (arg("name"), output_arg())),
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
            arg(
                "-f",
                "--follow",
                action="store_true",
                help="keep printing what the task writes until it ends (Ctrl-C stops)",
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
        args.backend = backend_kind(args.backend)
        backend = _backend(args)
        return int(_ACTIONS[args.action](backend, args))
    except (ClusterOwnershipError, SpecError, LookupError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:  # Ctrl-C, most often ending `logs --follow`: no traceback
        return EXIT_INTERRUPTED
    except RuntimeError as exc:  # the backend's own errors (an API call that failed for good)
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:  # a file refused (a log that is a FIFO or a link) or unreadable
        print(f"error: {printable(str(exc))}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:
        if not _is_kube_config_error(exc):
            raise
        # The first day runs on the local backend, where no kubeconfig exists: one line
        # that says so and what to type, instead of the client's traceback.
        print(f"error: {no_kubeconfig_message(exc, args)}", file=sys.stderr)
        return EXIT_ERROR


def backend_kind(given: str | None, environ: dict[str, str] | None = None) -> str:
    """``--backend``, else the environment's ``TFK_BACKEND`` (what a local Airflow's
    environment sets), else the provider's default."""
    from airflow_tfk.core.constants import backend_kind as checked
    from airflow_tfk.core.errors import SpecError

    if given:
        return given
    env = os.environ if environ is None else environ
    try:
        return checked(env.get("TFK_BACKEND") or BACKEND, "TFK_BACKEND")
    except ValueError as exc:
        raise SpecError("TFK_BACKEND", "must be 'kubernetes' or 'local'", env.get("TFK_BACKEND")) from exc


def _is_kube_config_error(exc: BaseException) -> bool:
    """The Kubernetes client found no configuration (no kubeconfig, not in a pod). Told
    by the class, so the client is not imported to catch it."""
    return any(
        c.__name__ == "ConfigException" and c.__module__.startswith("kubernetes") for c in type(exc).__mro__
    )


def no_kubeconfig_message(exc: BaseException, args: argparse.Namespace) -> str:
    where = (
        f"--kubeconfig {args.kubeconfig}"
        if args.kubeconfig
        else f"connection {args.conn_id!r}, $KUBECONFIG or ~/.kube/config"
    )
    detail = " ".join(str(exc).split())[:200]
    return (
        f"no Kubernetes cluster configured ({where}: {detail}); for the local backend's "
        "clusters add --backend local (or export TFK_BACKEND=local)"
    )


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

    if args.backend == BackendKind.LOCAL:
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


def _owner_data(owner: ClusterOwner | None) -> dict[str, Any] | None:
    """The owning task instance as data (``-o json|yaml``); None when not from Airflow."""
    if owner is None or owner.identity is None:
        return None
    i = owner.identity
    return {"dag_id": i.dag_id, "task_id": i.task_id, "run_id": i.run_id, "map_index": i.map_index}


def _created_at(owner: ClusterOwner | None) -> str | None:
    if owner is None or owner.created_at is None:
        return None
    import datetime as dt

    return dt.datetime.fromtimestamp(owner.created_at, dt.UTC).isoformat(timespec="seconds")


def _owner_cell(value: dict[str, Any] | None) -> str:
    if value is None:
        return _owner_text(None)
    mapped = f", map index {value['map_index']}" if value["map_index"] >= 0 else ""
    return f"dag {value['dag_id']!r}, task {value['task_id']!r}, run {value['run_id']!r}{mapped}"


def _list(backend: Backend, args: argparse.Namespace) -> int:
    from airflow_tfk.cli.task_view import summary

    refs = sorted(backend.clusters(_namespace(args)), key=lambda r: (r.namespace, r.name))
    rows = []
    for ref in refs:
        owner = backend.owner(ref)
        rows.append(
            {
                "namespace": ref.namespace,
                "name": ref.name,
                "age": _age(owner),
                "tasks": summary(backend.status(ref)),
                "owner": _owner_data(owner),
                "created_at": _created_at(owner),
            }
        )
    if not rows and args.output in ("table", "plain"):
        where = "any namespace" if _namespace(args) is None else f"namespace {_namespace(args)}"
        print(f"no clusters in {where}")
        return 0
    columns = ("namespace", "name", "age", "tasks", "owner")
    sys.stdout.write(format_rows(rows, args.output, columns, {"owner": _owner_cell}))
    return 0


def _progress_task(status: ClusterStatus) -> tuple[str, int]:
    roles = {t.role for t in status.tasks}
    return ("chief", 0) if "chief" in roles else ("worker", 0)


def _status(backend: Backend, args: argparse.Namespace) -> int:
    from airflow_tfk.cli.task_view import shown, summary
    from airflow_tfk.core.printable import printable
    from airflow_tfk.protocol.progress import last_progress
    from airflow_tfk.run.wait import format_progress

    ref = _ref(args)
    owner = backend.owner(ref)
    status = backend.status(ref)
    if owner is None and not status.tasks:
        raise LookupError(f"cluster {ref.name} not found in namespace {ref.namespace}")
    role, index = _progress_task(status)
    try:
        progress = last_progress(backend.logs(ref, role, index, tail_lines=200)) if status.tasks else None
        shown_progress = f"[{role}-{index}] {format_progress(progress)}" if progress else "none reported yet"
    except (RuntimeError, OSError) as exc:  # the log is not readable (yet): the status above still holds
        shown_progress = f"unknown: {exc}"
    tasks = sorted(status.tasks, key=lambda t: (t.role, t.index))
    usage = _usage_so_far(backend, ref)
    if args.output in ("json", "yaml"):
        record = {
            "name": ref.name,
            "namespace": ref.namespace,
            "selector": ref.label_selector,
            "owner": _owner_data(owner),
            "created_at": _created_at(owner),
            "age": _age(owner),
            "summary": summary(status),
            "tasks": [shown(t, status).data() for t in tasks],
            "progress": shown_progress,
            "usage": usage.to_dict() if usage is not None else None,
        }
        sys.stdout.write(format_record(record, args.output))
        return 0
    print(f"cluster:   {ref.name} (namespace {ref.namespace}, selector {ref.label_selector})")
    print(f"owner:     {_owner_text(owner)}")
    print(f"age:       {_age(owner)}")
    print(f"tasks:     {summary(status)}")
    for task in tasks:
        view = shown(task, status)
        # The reason may quote the task's own termination message: shown, never obeyed
        # by the terminal.
        why = f" ({printable(view.why)})" if view.why else ""
        code = f", exit code {view.exit_code}" if view.exit_code is not None else ""
        print(f"  {task.name:<12} {view.phase}{why}{code}, restarts {task.restarts}")
    print(f"progress:  {printable(shown_progress)}")
    if usage is not None:
        print(f"usage:     {usage.summary().removeprefix('usage: ')} so far")
    return 0


def _usage_so_far(backend: Backend, ref: ClusterRef) -> Usage | None:
    """What the cluster's tasks have held so far (None when the backend cannot tell)."""
    from airflow_tfk.run.usage import Usage

    try:
        tasks = backend.usage(ref)
    except (RuntimeError, OSError):  # the figures are extra: the status above still holds
        return None
    return Usage.of(tasks) if tasks else None


def _named_task(args: argparse.Namespace) -> tuple[str, int] | None:
    if not args.task:
        return None
    role, _, index = args.task.rpartition("-")  # checked by _check_args
    return role, int(index)


def _gone_cluster_log(backend: Backend, ref: ClusterRef, args: argparse.Namespace) -> str:
    """The log a deleted cluster left (the local backend keeps its tasks' logs), else a
    not-found error: nothing is left to tell a typo from a task that was there."""
    named = _named_task(args)
    for role, index in [named] if named else [("chief", 0), ("worker", 0)]:
        try:
            text = backend.logs(ref, role, index, tail_lines=None if args.tail == -1 else args.tail)
        except RuntimeError:  # no such pod any more
            text = ""
        if text:
            return text
    raise LookupError(f"cluster {ref.name} not found in namespace {ref.namespace}")


def _logs(backend: Backend, args: argparse.Namespace) -> int:
    ref = _ref(args)
    status = backend.status(ref)
    if not status.tasks:
        sys.stdout.write(_gone_cluster_log(backend, ref, args))
        return 0
    named = _named_task(args)
    if named is not None and status.task(*named) is None:
        # a typo (worker-5 of two workers) is an error naming the tasks there are, not an
        # empty log
        names = ", ".join(t.name for t in sorted(status.tasks, key=lambda t: (t.role, t.index)))
        raise LookupError(f"cluster {ref.name} has no task {args.task} (its tasks: {names})")
    role, index = named or _progress_task(status)
    if not args.follow:
        sys.stdout.write(backend.logs(ref, role, index, tail_lines=None if args.tail == -1 else args.tail))
        return 0
    from airflow_tfk.cli.follow import follow

    # The whole log is where the follow starts from; --tail only limits what is shown of it.
    text = backend.logs(ref, role, index)
    lines = text.splitlines(keepends=True)
    sys.stdout.write("".join(lines if args.tail == -1 else lines[max(0, len(lines) - args.tail) :]))
    sys.stdout.flush()
    follow(backend, ref, role, index, text, FOLLOW_INTERVAL_SECONDS, sys.stdout)
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

    ref = _ref(args)
    owner = backend.owner(ref)
    if owner is None:
        raise LookupError(f"cluster {ref.name} not found in namespace {ref.namespace}")
    identity = _identity(args)
    _check_delete_owner(ref, owner, identity)  # an error (exit 1) naming the owner
    status = backend.status(ref)
    # A run ended before it succeeded is not publishable.
    result = RunResult.ACCEPTED if decisive_succeeded(status) else RunResult.REJECTED
    handle = ClusterHandle.for_ref(ref, backend, identity)
    end_run(handle, args.reason, result=result, emit=print, status=status, grace_seconds=0, log_lines=0)
    return 0


def _check_delete_owner(ref: ClusterRef, owner: ClusterOwner, identity: RunIdentity | None) -> None:
    """The operators' ownership rule, refused in the command line's words: which flags name
    the owner (the create-time message would tell a person to rename a training)."""
    from airflow_tfk.core.errors import ClusterOwnershipError

    if owner.identity == identity:
        return
    asked = "without --dag-id/--task-id/--run-id" if identity is None else f"for {_owner_text_of(identity)}"
    if owner.identity is None:
        how = "it was created outside Airflow: delete it without --dag-id, --task-id and --run-id"
    else:
        mapped = " and --map-index" if owner.identity.map_index >= 0 else ""
        how = f"only its owner deletes it: name that task instance with --dag-id, --task-id, --run-id{mapped}"
    raise ClusterOwnershipError(
        ref.name,
        f"cluster {ref.name} in namespace {ref.namespace} belongs to {owner.describe()}; "
        f"refusing to delete it {asked}; {how}",
    )


def _owner_text_of(identity: RunIdentity) -> str:
    from airflow_tfk.backends.base import ClusterOwner

    return ClusterOwner(identity, None).describe()


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
