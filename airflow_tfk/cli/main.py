# PYTHON_ARGCOMPLETE_OK  (argcomplete's global completion looks for this marker)
"""``airflow-tfk``: command-line access to the pure stages and to a local Airflow.

``airflow-tfk render SPEC.yaml | kubectl apply -f -`` shows, and lets one apply, exactly
what the provider would create. A bad spec exits with status 1 and ``error: <field>:
<rule>`` on stderr; nothing is printed on stdout then. ``--validate`` checks every object
offline against the Kubernetes schemas of ``--kubernetes-version`` (``schema_check``);
an object that version would reject exits with status 3, again with nothing on stdout.

``airflow-tfk --version`` prints the installed distribution's version (its metadata).

``airflow-tfk airflow [--dags-folder DIR] ARGS...`` runs Airflow's own CLI with the
project's local Airflow home and local backend (``airflow_tfk.core.local_env``), so a newcomer
runs their DAG folder with ``airflow-tfk airflow --dags-folder my_dags dags test my_dag``.
``airflow-tfk up`` runs Airflow's api-server, scheduler, dag-processor and triggerer in that
same environment (``airflow_tfk.cli.local_airflow``).

Shell completion is argcomplete's, as Airflow's own CLI has it (argcomplete comes with
Airflow): ``eval "$(register-python-argcomplete airflow-tfk)"``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_tfk.cli.table import Command, add_commands, arg, format_rows, output_arg

if TYPE_CHECKING:
    from airflow_tfk.core.local_env import LocalAirflowEnv

EXIT_SPEC_ERROR = 1
EXIT_USAGE = 2
EXIT_INVALID_MANIFEST = 3  # --validate: an object the chosen Kubernetes version would reject


_DAGS_FOLDER = "your DAGs folder (as for `airflow-tfk airflow`)"

COMMANDS = (
    Command(
        "render",
        "print the Kubernetes manifests of a cluster spec as a YAML stream",
        "Print the manifests of SPEC as a YAML stream for `kubectl apply -f -`.",
        (
            arg("spec", metavar="SPEC.yaml", help="cluster spec file ('-' for stdin)"),
            arg("--namespace", help="override the spec's namespace"),
            arg("--dag-id", help="Airflow DAG id (labels and annotations)"),
            arg("--task-id", help="Airflow task id"),
            arg("--run-id", help="Airflow run id"),
            arg("--map-index", type=int, default=-1, help="Airflow map index"),
            arg("--template-dir", help="directory of templates overriding the built-ins"),
            arg(
                "--validate",
                action="store_true",
                help="check every object offline against Kubernetes' schemas (no cluster needed)",
            ),
            arg(
                "--kubernetes-version",
                metavar="X.Y",
                help="the Kubernetes version --validate checks against (default: the oldest supported)",
            ),
        ),
    ),
    Command(
        "validate",
        "check training files (DAG-as-code) offline, with the errors Airflow would show",
        "Check every training file (*.yaml, *.yml) under each PATH, offline. "
        "Exit status: 0 all valid, 1 some invalid, 2 no such path or no training file.",
        (
            arg("paths", metavar="PATH", nargs="+", help="a folder of training files, or a file"),
            arg("-q", "--quiet", action="store_true", help="print only the errors"),
        ),
    ),
    Command(
        "airflow",
        "run Airflow's CLI with the project's local Airflow home and local backend",
        "Run `airflow ARGS...` with the project's local Airflow home (SQLite, migrated on "
        "first use), your DAGs folder, and the local backend's root; print where state, "
        "logs and models go. Example: airflow-tfk airflow --dags-folder my_dags dags test my_dag",
        (
            arg(
                "--dags-folder",
                help="your DAGs folder (default: $AIRFLOW__CORE__DAGS_FOLDER, $DAGS_FOLDER, else dags/)",
            ),
            arg("--quiet", action="store_true", help="do not print where things go"),
            arg("airflow_args", nargs=argparse.REMAINDER, metavar="ARGS", help="arguments of `airflow`"),
        ),
    ),
    Command(
        "up",
        "run Airflow's api-server, scheduler, dag-processor and triggerer on this machine",
        "Run Airflow's four components with the environment of `airflow-tfk airflow` "
        "(LocalExecutor, simple auth manager) until Ctrl-C; each logs to <home>/logs/<component>.log.",
        (
            arg("--dags-folder", help=_DAGS_FOLDER),
            arg("--port", type=int, default=8080, help="the api-server's port (default 8080)"),
            arg("--host", default="127.0.0.1", help="the api-server's address (default 127.0.0.1)"),
        ),
    ),
    Command(
        "env",
        "print the environment of `airflow-tfk airflow` as shell exports",
        'Print export lines for `eval "$(airflow-tfk env)"`, with where things go as comments.',
        (arg("--dags-folder", help=_DAGS_FOLDER),),
    ),
    Command(
        "sweep",
        "a sweep's table of trials and its picture (learning curves, parameter importance)",
        "Print the trials of a sweep's study (an SQLite file, e.g. .tfk-local/.sweeps/<study>.db, "
        "or a database URL), then its learning curves with the pruned trials marked and the "
        "importance of each parameter. Read-only.",
        (
            arg("action", choices=["trials"], help="what to show"),
            arg("storage", metavar="STORAGE", help="the study's SQLite file or database URL"),
            arg("--study", help="the study's name (default: the only study in STORAGE)"),
            output_arg(),
        ),
    ),
    Command(
        "stop",
        "stop local model servers or TensorBoards (they outlive their DAG runs)",
        "Stop a local model server or TensorBoard started by the local backend, "
        "found through its record under the local root. Without a name: list them.",
        (
            arg("kind", nargs="?", choices=["model-server", "tensorboard"], help="what to stop"),
            arg("name", nargs="?", help="server name, or a model name (its server tfs-<model>)"),
            arg("--all", action="store_true", help="stop every one (of KIND, if given)"),
            arg("--namespace", help="only this namespace of the local root"),
            output_arg(),
            arg(
                "--root",
                help="the local backend's root (default $TFK_LOCAL_ROOT, else .tfk-local in the "
                "checkout, else ~/.airflow-tfk/.tfk-local)",
            ),
        ),
    ),
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="airflow-tfk", description="Distributed TensorFlow on Kubernetes, from Airflow."
    )
    parser.add_argument("--version", action=_PrintVersion, help="print the installed version and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    add_commands(sub, COMMANDS)
    from airflow_tfk.cli import clusters as cli_clusters

    cli_clusters.add_parser(sub)
    return parser


class _PrintVersion(argparse.Action):
    """``--version``, read from the installed distribution's metadata only when asked: the
    lookup scans every distribution on sys.path, which no other command needs to pay."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        from importlib.metadata import PackageNotFoundError

        from airflow_tfk import DISTRIBUTION, version

        try:
            text = version()
        except PackageNotFoundError:
            parser.exit(
                EXIT_USAGE,
                f"error: --version: no installed distribution {DISTRIBUTION!r} (running from a "
                "source tree that was never installed? `pip install -e .` records one)\n",
            )
        # stdout, as argparse's own "version" action: `airflow-tfk --version | ...` works.
        print(f"{parser.prog} {text}")
        parser.exit()


def _validate(args: argparse.Namespace) -> int:
    from airflow_tfk.dagfactory.validate import run

    return run(args.paths, sys.stdout, sys.stderr, quiet=args.quiet)


def _stop_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.name is not None and args.kind is None:
        parser.error("stop: give KIND before NAME (model-server or tensorboard)")
    return _stop(args)


def _stop(args: argparse.Namespace) -> int:
    from airflow_tfk.serving import local_servers
    from airflow_tfk.serving.local import default_root

    root = os.path.abspath(os.path.expanduser(args.root or default_root()))
    found = local_servers.find(root, args.kind, args.name, args.namespace)
    if args.name is None and not args.all:
        rows = [_server_row(s) for s in found if s.running]
        if not rows and args.output in ("table", "plain"):
            print(f"no local model server or TensorBoard is running under {root}")
        else:
            sys.stdout.write(format_rows(rows, args.output, ("kind", "server", "pid", "url")))
        return 0
    if not found:
        what = " ".join(x for x in (args.kind, args.name) if x) or "server"
        print(f"error: no local {what} recorded under {root}", file=sys.stderr)
        return EXIT_SPEC_ERROR
    for s in found:
        if local_servers.stop(s):
            print(f"stopped {s.kind} {s.namespace}/{s.name} (pid {(s.record or {}).get('pid')})")
        else:
            print(f"{s.kind} {s.namespace}/{s.name} was not running (record removed)")
    return 0


def _server_row(server: Any) -> dict[str, Any]:
    """A running local server as a listing row (``stop`` without a name)."""
    record = server.record or {}
    port = record.get("rest_port") or record.get("port")
    return {
        "kind": server.kind,
        "server": f"{server.namespace}/{server.name}",
        "namespace": server.namespace,
        "name": server.name,
        "pid": record.get("pid"),
        "url": f"http://127.0.0.1:{port}" if port else None,
    }


def _read(path: str) -> bytes:
    """The spec file's bytes, at most one byte over the loader's bound (which refuses it)."""
    from airflow_tfk.spec.yaml_reader import MAX_BYTES

    if path == "-":
        return sys.stdin.buffer.read(MAX_BYTES + 1)
    with open(path, "rb") as fh:
        return fh.read(MAX_BYTES + 1)


def _render(args: argparse.Namespace) -> list[dict]:
    from airflow_tfk.core.naming import RunIdentity
    from airflow_tfk.spec.cluster import TFClusterSpec
    from airflow_tfk.spec.yaml_reader import load_yaml_mapping

    data = load_yaml_mapping(_read(args.spec))
    _refuse_training_file(data, args.spec)
    spec = TFClusterSpec.from_dict(data)
    if args.namespace is not None:
        spec = dataclasses.replace(spec, namespace=args.namespace)  # validated again
    identity = None
    if args.dag_id or args.task_id or args.run_id:
        identity = RunIdentity(args.dag_id, args.task_id, args.run_id, args.map_index)
    # The final pod templates, every patch applied, against the platform's policy (Pod
    # Security restricted unless [tfk_policy] says otherwise): every violation named, and
    # a per-training namespace at the policy's level, as the backend would create it.
    from airflow_tfk._airflow.platform_config import platform_policy
    from airflow_tfk.render.checked import render_checked
    from airflow_tfk.spec.platform_policy import raise_for

    manifests, found = render_checked(spec, platform_policy(), identity, args.template_dir)
    raise_for(found)
    return manifests


def _complete(parser: argparse.ArgumentParser) -> None:
    """Answer the shell's completion request and exit, when this run is one (argcomplete's
    protocol: ``_ARGCOMPLETE`` set); imported only then, so a command pays nothing."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    import argcomplete

    argcomplete.autocomplete(parser)


class TrainingFileGiven(Exception):
    """``render`` was given a training file, whose errors would all read as unknown keys."""


def _refuse_training_file(data: dict, path: str) -> None:
    """A training file (DAG-as-code) has keys no cluster spec has; ``validate`` checks it."""
    import dataclasses

    from airflow_tfk.dagfactory.training_keys import KEYS
    from airflow_tfk.spec.cluster import TFClusterSpec

    spec_fields = {f.name for f in dataclasses.fields(TFClusterSpec)}
    training_only = sorted({k.name for k in KEYS} - spec_fields)
    found = [k for k in training_only if k in data]
    if "cluster" in data or (found and not spec_fields & set(data)):
        keys = ", ".join(f"{k}:" for k in found[:4])
        raise TrainingFileGiven(
            f"{path} is a training file ({keys}), not a cluster spec: check it with "
            f"`airflow-tfk validate {path}`; `render` takes a cluster spec, such as its cluster: block"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    _complete(parser)
    args = parser.parse_args(argv)
    commands = {
        "validate": _validate,
        "airflow": _run_airflow,
        "up": _up,
        "env": _print_env,
        "render": lambda a: _render_command(parser, a),
        "stop": lambda a: _stop_command(parser, a),
        "clusters": _clusters,
        "sweep": _sweep,
    }
    command = commands.get(args.command)
    return command(args) if command is not None else 0


def _sweep(args: argparse.Namespace) -> int:
    from airflow_tfk.cli import sweeps

    return sweeps.run(args)


def _clusters(args: argparse.Namespace) -> int:
    from airflow_tfk.cli import clusters as cli_clusters

    return cli_clusters.run(args)


def _render_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from airflow_tfk.core.errors import SpecError
    from airflow_tfk.render.manifests import RenderError

    given = [args.dag_id, args.task_id, args.run_id]
    if any(given) and not all(given):
        parser.error("--dag-id, --task-id and --run-id go together")
    if args.kubernetes_version is not None and not args.validate:
        parser.error("--kubernetes-version goes with --validate")
    version = None
    if args.validate:
        from airflow_tfk.render.schema_check import SchemaCheckUnavailable, check_version

        try:
            version = check_version(args.kubernetes_version)
        except SchemaCheckUnavailable as exc:
            print(f"error: --validate: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except ValueError as exc:
            print(f"error: --kubernetes-version: {exc}", file=sys.stderr)
            return EXIT_USAGE
    try:
        manifests = _render(args)
    except TrainingFileGiven as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_SPEC_ERROR
    except SpecError as exc:
        for one in getattr(exc, "errors", None) or [exc]:  # every error, each with its line
            at = f" ({args.spec}, line {one.line})" if one.line else ""
            print(f"error: {one}{at}", file=sys.stderr)
        return EXIT_SPEC_ERROR
    except (OSError, UnicodeDecodeError) as exc:
        print(f"error: {args.spec}: cannot read the spec: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except RenderError as exc:
        print(f"error: template: {exc}", file=sys.stderr)
        return EXIT_SPEC_ERROR
    if version is not None and not _report_validation(manifests, version):
        return EXIT_INVALID_MANIFEST
    from airflow_tfk.render.manifests import to_yaml_stream

    sys.stdout.write(to_yaml_stream(manifests))
    return 0


def _report_validation(manifests: list[dict], version: str) -> bool:
    """Print what --validate found on stderr; True when every checkable object is valid."""
    from airflow_tfk.render.schema_check import validate_manifests

    findings = validate_manifests(manifests, version)
    invalid = [f for f in findings if f.checked]
    for f in findings:
        print(f"{'error' if f.checked else 'note'}: {f} (Kubernetes {version})", file=sys.stderr)
    if invalid:
        print(
            f"error: {len(invalid)} of {len(manifests)} objects are not valid for Kubernetes {version}",
            file=sys.stderr,
        )
        return False
    checked = len(manifests) - len(findings)
    print(
        f"valid: {checked} of {len(manifests)} objects against the Kubernetes {version} schemas",
        file=sys.stderr,
    )
    return True


# -- a local Airflow: `airflow-tfk airflow ...` and `airflow-tfk env` -------------------
MIGRATED_MARKER = ".airflow-tfk-migrated"


def _print_env(args: argparse.Namespace) -> int:
    import shlex

    from airflow_tfk.core.local_env import resolve

    where = resolve(dags_folder=args.dags_folder)
    for line in where.describe():
        print(f"# {line}")
    env = where.environ(os.environ)
    for name in (
        "AIRFLOW_HOME",
        "AIRFLOW__CORE__DAGS_FOLDER",
        "TFK_LOCAL_ROOT",
        "TFK_BACKEND",
        "AIRFLOW__CORE__LOAD_EXAMPLES",
        "AIRFLOW__CORE__UNIT_TEST_MODE",
        "TF_CPP_MIN_LOG_LEVEL",
        "PATH",
    ):
        print(f"export {name}={shlex.quote(env[name])}")
    return 0


def _migrate_once(airflow: str, env: dict[str, str], home: str) -> int:
    """`airflow db migrate` when this home has not been migrated by this Airflow version."""
    from importlib.metadata import version

    marker = os.path.join(home, MIGRATED_MARKER)
    wanted = version("apache-airflow")
    try:
        with open(marker, encoding="utf-8") as fh:
            if fh.read().strip() == wanted:
                return 0
    except OSError:
        pass
    os.makedirs(home, exist_ok=True)
    log_path = os.path.join(home, "db-migrate.log")
    print(f"airflow-tfk: preparing the Airflow database (log: {log_path})", file=sys.stderr)
    with open(log_path, "wb") as log:
        code = subprocess.call(
            [airflow, "db", "migrate"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    if code != 0:
        with open(log_path, encoding="utf-8", errors="replace") as fh:
            sys.stderr.write(fh.read()[-4000:])
        print(f"error: airflow db migrate failed (exit code {code}); see {log_path}", file=sys.stderr)
        return code
    with open(marker, "w", encoding="utf-8") as fh:
        fh.write(wanted + "\n")
    return 0


def _local_env(args: argparse.Namespace) -> LocalAirflowEnv | None:
    """The environment of ``--dags-folder``; None (said) when that is not a directory."""
    from airflow_tfk.core.local_env import resolve

    where = resolve(dags_folder=args.dags_folder)
    if not where.dags_folder.is_dir():
        print(f"error: --dags-folder: {where.dags_folder} is not a directory", file=sys.stderr)
        return None
    return where


def _prepare(where: LocalAirflowEnv, env: dict[str, str], quiet: bool = False) -> tuple[str, int]:
    """Say which environment this is (unless ``quiet``) and migrate its database once: the
    ``airflow`` executable, and the migration's exit code."""
    if not quiet:
        for line in where.describe():
            print(f"airflow-tfk: {line}", file=sys.stderr)
    airflow = str(where.bin_dir / "airflow")
    return airflow, _migrate_once(airflow, env, str(where.airflow_home))


def _up(args: argparse.Namespace) -> int:
    from airflow_tfk.cli.local_airflow import main_up

    if not 0 < args.port < 65536:
        print(f"error: --port: {args.port} is not a TCP port (1 to 65535)", file=sys.stderr)
        return EXIT_USAGE
    from airflow_tfk.cli.local_airflow import check_host

    why = check_host(args.host)
    if why is not None:
        print(f"error: --host: {why} (got {args.host!r})", file=sys.stderr)
        return EXIT_USAGE
    where = _local_env(args)
    if where is None:
        return EXIT_USAGE
    return main_up(where, args.port, args.host, _prepare)


def _run_airflow(args: argparse.Namespace) -> int:
    airflow_args = list(args.airflow_args)
    if airflow_args[:1] == ["--"]:
        airflow_args = airflow_args[1:]
    if not airflow_args:
        print("error: ARGS: give the airflow command to run, e.g. `dags test my_dag`", file=sys.stderr)
        return EXIT_USAGE
    where = _local_env(args)
    if where is None:
        return EXIT_USAGE
    env = where.environ(os.environ)
    airflow, code = _prepare(where, env, args.quiet)
    if code != 0:
        return code
    sys.stdout.flush()
    sys.stderr.flush()
    # exec, so Ctrl-C, exit codes and signals behave exactly as with `airflow` itself.
    os.execve(airflow, [airflow, *airflow_args], env)
    return 0  # pragma: no cover - execve does not return


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
