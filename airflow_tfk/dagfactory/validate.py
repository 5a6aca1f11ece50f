"""``airflow-tfk validate PATH...``: check training files offline, as the DAG file would.

Runs :func:`~airflow_tfk.dagfactory.loader.load_folder` (read, validate, build the DAG)
on every file, so the messages are the import errors Airflow would show. No database,
no cluster, no network: a repository's CI can run it on every pull request.

Exit status: 0 every file is valid; 1 at least one file is invalid; 2 a path does not
exist or holds no training file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2


def run(paths: Sequence[str], out: TextIO, err: TextIO, *, quiet: bool = False) -> int:
    from airflow_tfk.dagfactory.loader import SUFFIXES, load_folder, training_files

    files: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            files.extend(training_files(path))
        elif path.is_file():
            if not path.name.endswith(SUFFIXES):
                print(f"error: {given}: not a training file (*.yaml, *.yml)", file=err)
                return EXIT_USAGE
            files.append(path)
        else:
            print(f"error: {given}: no such file or directory", file=err)
            return EXIT_USAGE
    if not files:
        print(f"error: no training files (*.yaml, *.yml) in {', '.join(paths)}", file=err)
        return EXIT_USAGE
    result = load_folder(Path("."), files=files)
    for error in result.errors:
        print(f"error: {error}", file=err)
    if not quiet:
        for path, training in result.trainings.items():
            dag = result.dags[training.dag_id]
            tasks = ", ".join(t.task_id for t in dag.tasks)
            schedule = training.schedule or "manual"
            print(f"ok: {path}: dag {training.dag_id} ({schedule}; tasks {tasks})", file=out)
    bad = len({e.path for e in result.errors})
    print(f"{len(result.trainings)} valid, {bad} invalid training file(s)", file=err if bad else out)
    return EXIT_INVALID if bad else EXIT_OK
