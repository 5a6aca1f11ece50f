"""``airflow-tfk validate PATH...``: check training files offline, as the DAG file would.

Runs :func:`~airflow_tfk.dagfactory.loader.load_folder` (read, validate, build the DAG)
on every file, so the messages are the import errors Airflow would show. No database,
no cluster, no network: a repository's CI can run it on every pull request.

Every line it prints is one line: file names and messages are printed with their control
characters escaped, so a file named ``x\\nok: y.yaml`` cannot forge an ``ok:`` line.

Exit status: 0 every file is valid; 1 at least one file (or folder) is invalid; 2 a path
does not exist or holds no training file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2


def _collect(paths: Sequence[str], err: TextIO) -> tuple[list[Path], list, int | None]:
    """The files to check, the folders' own errors, and an exit status on a usage error."""
    from airflow_tfk.core.printable import printable
    from airflow_tfk.dagfactory.loader import SUFFIXES, TrainingFileError, training_files

    files: list[Path] = []
    errors: list[TrainingFileError] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            files.extend(training_files(path, errors))
        elif path.exists() or path.is_symlink():  # a FIFO too: the loader says what it is
            if not path.name.endswith(SUFFIXES):
                print(f"error: {printable(given)}: not a training file (*.yaml, *.yml)", file=err)
                return [], [], EXIT_USAGE
            files.append(path)
        else:
            print(f"error: {printable(given)}: no such file or directory", file=err)
            return [], [], EXIT_USAGE
    return files, errors, None


def run(paths: Sequence[str], out: TextIO, err: TextIO, *, quiet: bool = False) -> int:
    from airflow_tfk.core.printable import printable
    from airflow_tfk.dagfactory.loader import FILES_PER_DAG_FILE, load_folder

    files, folder_errors, usage = _collect(paths, err)
    if usage is not None:
        return usage
    if not files and not folder_errors:
        print(f"error: no training files (*.yaml, *.yml) in {printable(', '.join(paths))}", file=err)
        return EXIT_USAGE
    if len(files) > FILES_PER_DAG_FILE:
        print(
            f"warning: {len(files)} training files; one DAG file loads about {FILES_PER_DAG_FILE} within "
            "the DAG processor's default timeout (50 s): split them over several DAG files "
            "(docs/dag-as-code.md)",
            file=err,
        )
    result = load_folder(Path("."), files=files)
    errors = [*folder_errors, *result.errors]
    # The DAG file renders no template; validate renders each template_dir once, bounded.
    from airflow_tfk.dagfactory.template_check import check_template_dir

    for path, training in list(result.trainings.items()):
        error = check_template_dir(path, training)
        if error is not None:
            errors.append(error)
            del result.trainings[path]
    for error in errors:
        for one in error.all():  # every error of the file, each with its field and line
            print(f"error: {one.describe()}", file=err)
    if not quiet:
        for path, training in result.trainings.items():
            dag = result.dags[training.dag_id]
            tasks = ", ".join(t.task_id for t in dag.tasks)
            schedule = training.schedule or "manual"
            line = f"ok: {path}: dag {training.dag_id} ({schedule}; tasks {tasks})"
            print(printable(line), file=out)
    bad = len({e.path for e in errors})
    print(f"{len(result.trainings)} valid, {bad} invalid training file(s)", file=err if bad else out)
    return EXIT_INVALID if bad else EXIT_OK
