"""``airflow-tfk``: command-line access to the pure stages (no cluster needed).

``airflow-tfk render SPEC.yaml | kubectl apply -f -`` shows, and lets one apply, exactly
what the provider would create. A bad spec exits with status 1 and ``error: <field>:
<rule>`` on stderr; nothing is printed on stdout then.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Sequence

EXIT_SPEC_ERROR = 1
EXIT_USAGE = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="airflow-tfk", description="Distributed TensorFlow on Kubernetes, from Airflow."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    render = sub.add_parser(
        "render",
        help="print the Kubernetes manifests of a cluster spec as a YAML stream",
        description="Print the manifests of SPEC as a YAML stream for `kubectl apply -f -`.",
    )
    render.add_argument("spec", metavar="SPEC.yaml", help="cluster spec file ('-' for stdin)")
    render.add_argument("--namespace", help="override the spec's namespace")
    render.add_argument("--dag-id", help="Airflow DAG id (labels and annotations)")
    render.add_argument("--task-id", help="Airflow task id")
    render.add_argument("--run-id", help="Airflow run id")
    render.add_argument("--map-index", type=int, default=-1, help="Airflow map index")
    render.add_argument("--template-dir", help="directory of templates overriding the built-ins")
    _add_stop_parser(sub)
    return parser


def _add_stop_parser(sub: argparse._SubParsersAction) -> None:
    stop = sub.add_parser(
        "stop",
        help="stop local model servers or TensorBoards (they outlive their DAG runs)",
        description="Stop a local model server or TensorBoard started by the local backend, "
        "found through its record under the local root. Without a name: list them.",
    )
    stop.add_argument("kind", nargs="?", choices=["model-server", "tensorboard"], help="what to stop")
    stop.add_argument("name", nargs="?", help="server name, or a model name (its server tfs-<model>)")
    stop.add_argument("--all", action="store_true", help="stop every one (of KIND, if given)")
    stop.add_argument("--namespace", help="only this namespace of the local root")
    stop.add_argument("--root", help="the local backend's root (default $TFK_LOCAL_ROOT or ~/.tfk-local)")


def _stop(args: argparse.Namespace) -> int:
    from airflow_tfk.serving import local_servers
    from airflow_tfk.serving.local import default_root

    root = os.path.abspath(os.path.expanduser(args.root or default_root()))
    found = local_servers.find(root, args.kind, args.name, args.namespace)
    if args.name is None and not args.all:
        running = [s for s in found if s.running]
        for s in running:
            print(s.describe())
        if not running:
            print(f"no local model server or TensorBoard is running under {root}")
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


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def _render(args: argparse.Namespace) -> str:
    from airflow_tfk.naming import RunIdentity
    from airflow_tfk.render import render, to_yaml_stream
    from airflow_tfk.spec import TFClusterSpec

    spec = TFClusterSpec.from_yaml(_read(args.spec))
    if args.namespace is not None:
        spec = dataclasses.replace(spec, namespace=args.namespace)  # validated again
    identity = None
    if args.dag_id or args.task_id or args.run_id:
        identity = RunIdentity(args.dag_id, args.task_id, args.run_id, args.map_index)
    return to_yaml_stream(render(spec, identity, template_dir=args.template_dir))


def main(argv: Sequence[str] | None = None) -> int:
    from airflow_tfk.errors import SpecError
    from airflow_tfk.render import RenderError

    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "stop":
        if args.name is not None and args.kind is None:
            parser.error("stop: give KIND before NAME (model-server or tensorboard)")
        return _stop(args)
    if args.command == "render":
        given = [args.dag_id, args.task_id, args.run_id]
        if any(given) and not all(given):
            parser.error("--dag-id, --task-id and --run-id go together")
        try:
            out = _render(args)
        except SpecError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_SPEC_ERROR
        except (OSError, UnicodeDecodeError) as exc:
            print(f"error: {args.spec}: cannot read the spec: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except RenderError as exc:
            print(f"error: template: {exc}", file=sys.stderr)
            return EXIT_SPEC_ERROR
        sys.stdout.write(out)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
