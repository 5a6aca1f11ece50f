"""Report broken training files to Airflow as import errors of the YAML files themselves.

One Python DAG file builds many DAGs here, and Airflow 3 attributes an exception raised
by a DAG file to that whole file: the import error would hide every valid training, and
an error recorded under the DAG file's path marks every DAG of that file stale. So the
loader never raises for a bad training file. Instead each error is added to the
``DagImportResult`` that Airflow's ``PythonDagImporter.import_file`` is filling for the
DAG file being imported (the structured-error API of Airflow 3's pluggable importers),
with ``file_path`` set to the training file, relative to the bundle. The DagBag then
records ``import_errors["trainings/bad.yaml"]``, the DAG processor stores it as that
file's ``ParseImportError`` (shown in the UI and by ``airflow dags list-import-errors``),
and the valid DAGs of the same DAG file load and stay active.

Airflow has no public hook for a Python file to report errors of other files, so the
result is found on the call stack; ``tests/dagfactory/test_dagbag.py`` pins the behaviour
against the installed Airflow. Outside an importer (``python dags/tfk_trainings.py``,
``runpy``) or if a future Airflow changes the importer, each error is logged and
emitted as a warning attributed to the YAML file and line instead.
"""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_tfk.dagfactory.loader import TrainingFileError

log = logging.getLogger(__name__)
ERROR_TYPE = "tfk-training-file"
# Errors logged one by one; the rest are counted. Each is still an import error of its file:
# the log is for the DAG processor's output, where 10,000 lines would cost the parse time
# that the loader's budget just saved.
LOGGED = 20


def _summary(errors: Sequence[TrainingFileError]) -> None:
    if len(errors) > LOGGED:
        log.error(
            "... and %d more broken training files (each is an import error of its file)",
            len(errors) - LOGGED,
        )


class TrainingFileWarning(UserWarning):
    """A training file was skipped (used when no Airflow importer is active)."""


def _active_import() -> tuple[Any, Any, Path | None] | None:
    """(importer, DagImportResult, bundle_path) of the DAG file import running now."""
    try:
        from airflow.dag_processing.importers.base import AbstractDagImporter, DagImportResult
    except ImportError:  # Airflow before pluggable importers
        return None
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "import_file":
            local = frame.f_locals
            result, importer = local.get("result"), local.get("self")
            if isinstance(result, DagImportResult) and isinstance(importer, AbstractDagImporter):
                bundle = local.get("bundle_path")
                return importer, result, Path(bundle) if bundle is not None else None
        frame = frame.f_back  # type: ignore[assignment]
    return None


def report(errors: Sequence[TrainingFileError]) -> bool:
    """Report each error against its own file; True if Airflow's importer took them."""
    active = _active_import()
    if active is None:
        for index, error in enumerate(errors):
            if index < LOGGED:
                log.error("skipped training file %s", error)
            warnings.warn_explicit(
                str(error),
                TrainingFileWarning,
                filename=str(error.path),
                lineno=error.line or 0,
            )
        _summary(errors)
        return False
    from airflow.dag_processing.importers.base import DagImportError

    importer, result, bundle = active
    for error in errors:
        shown = importer.get_relative_path(str(error.path), bundle)
        result.errors.append(
            DagImportError(
                file_path=shown,
                message="\n".join(e.describe(shown) for e in error.all()),
                error_type=ERROR_TYPE,
                line_number=error.line,
            )
        )
    for error in errors[:LOGGED]:
        log.error("skipped training file %s", error)
    _summary(errors)
    return True
