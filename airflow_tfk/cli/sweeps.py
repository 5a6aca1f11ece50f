"""``airflow-tfk sweep trials STORAGE``: a sweep's table of trials and its picture, read
from its study (an SQLite file such as ``.tfk-local/.sweeps/<study>.db``, or a database
URL), while it runs or after.

``-o table`` (default) prints the table, then the learning curves and the parameter
importance (:mod:`airflow_tfk.sweep.picture`); ``json``/``yaml``/``plain`` print the rows
only, for scripts. Read-only: the study is loaded, never changed.
"""

from __future__ import annotations

import argparse
import os
import sys

from airflow_tfk.cli.table import format_rows

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
COLUMNS = ("number", "state", "value", "steps", "seconds", "model_version", "params", "note")


def _url(storage: str) -> str:
    """A database URL as given; a file as an SQLite URL opened read-only (Optuna would
    otherwise create its tables in a file that has none)."""
    if "://" in storage:
        return storage
    return f"sqlite:///file:{os.path.abspath(storage)}?mode=ro&uri=true"


def run(args: argparse.Namespace) -> int:
    import optuna

    from airflow_tfk.core.printable import printable
    from airflow_tfk.sweep import study as studies
    from airflow_tfk.sweep.picture import draw

    if "://" not in args.storage and not os.path.isfile(args.storage):
        print(f"error: {printable(args.storage)}: no such study file", file=sys.stderr)
        return EXIT_USAGE
    url = _url(args.storage)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        names = [s.study_name for s in optuna.study.get_all_study_summaries(url, include_best_trial=False)]
    except Exception as exc:  # not a study database: say so in one line
        cause = (str(exc).splitlines() or [type(exc).__name__])[0]
        print(
            f"error: {printable(args.storage)}: not a readable study ({printable(cause)})"[:500],
            file=sys.stderr,
        )
        return EXIT_ERROR
    name = args.study
    if name is None:
        if len(names) != 1:
            listed = ", ".join(names) or "none"
            print(
                f"error: --study: {len(names)} studies in the file ({printable(listed)}); name one",
                file=sys.stderr,
            )
            return EXIT_USAGE
        name = names[0]
    elif name not in names:
        print(
            f"error: --study: no study {printable(name)!r} (there: {printable(', '.join(names))})",
            file=sys.stderr,
        )
        return EXIT_USAGE
    study = optuna.load_study(study_name=name, storage=url)
    rows = [studies.trial_row(t) for t in study.get_trials(deepcopy=False)]
    if args.output != "table":
        sys.stdout.write(format_rows(rows, args.output, COLUMNS if args.output == "plain" else None))
        return EXIT_OK
    sys.stdout.write(format_rows(rows, "table", COLUMNS))
    text, svg = draw(
        study,
        "sqlite:///" + os.path.abspath(args.storage) if "://" not in args.storage else url,
        f"sweep {name}",
    )
    print(text)
    if svg is not None:
        print(f"(as SVG: {svg})")
    return EXIT_OK
