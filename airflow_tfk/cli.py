"""``airflow-tfk``: command-line access to the pure stages (no cluster needed).

``airflow-tfk render SPEC.yaml | kubectl apply -f -`` shows, and lets one apply, exactly
what the provider would create. A bad spec exits with status 1 and ``error: <field>:
<rule>`` on stderr; nothing is printed on stdout then.
"""

from __future__ import annotations

import argparse
import dataclasses
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
    return parser


def _read(path: str) -> bytes:
    """The spec file's bytes, at most one byte over the loader's bound (which refuses it)."""
    from airflow_tfk.spec_yaml import MAX_BYTES

    if path == "-":
        return sys.stdin.buffer.read(MAX_BYTES + 1)
    with open(path, "rb") as fh:
        return fh.read(MAX_BYTES + 1)


def _render(args: argparse.Namespace) -> str:
    from airflow_tfk.naming import RunIdentity
    from airflow_tfk.render import render, to_yaml_stream
    from airflow_tfk.spec import TFClusterSpec
    from airflow_tfk.spec_yaml import load_yaml_mapping

    spec = TFClusterSpec.from_dict(load_yaml_mapping(_read(args.spec)))
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
