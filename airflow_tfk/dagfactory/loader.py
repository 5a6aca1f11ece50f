"""A folder of training files -> DAGs, and one error per broken file.

Each file is read, checked and built on its own: a broken file yields a
:class:`TrainingFileError` (its path, the field, the rule, the line) and never stops the
others. The DAG file (``dags/tfk_trainings.py``) and ``airflow-tfk validate`` both call
:func:`load_folder`, so they report the same errors. Cost is linear in the number of files:
one read, one YAML parse and one DAG build each; no template, no cluster, no TensorFlow.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_tfk.core.errors import SpecError, short_repr
from airflow_tfk.core.printable import control_character, printable
from airflow_tfk.dagfactory.training import TrainingFile, parse_training
from airflow_tfk.spec.yaml_reader import MAX_BYTES, load_yaml_lines

if TYPE_CHECKING:
    from airflow.sdk import DAG

SUFFIXES = (".yaml", ".yml")
#: training files one DAG file loads well within the DAG processor's default timeouts:
#: 8.3 CPU-ms per file measured (load 3.5 + serialize 4.8), so 2,000 files take ~17 CPU-s
#: of the 50 s, leaving room for a busy machine (docs/dag-as-code.md)
FILES_PER_DAG_FILE = 2000
#: where the training files are; default: ``trainings/`` beside the DAGs folder
ENV_DIR = "TFK_TRAININGS_DIR"


class TrainingFileError(Exception):
    """What is wrong with one training file (raised, and collected per file).

    :param path: the file.
    :param field: dotted path of the offending field (``cluster.worker.replicas``), or
        ``spec`` for the file as a whole.
    :param message: the rule that was broken, with the offending value.
    :param line: 1-based line of the field (or of its closest parent) when known.
    """

    def __init__(self, path: Path, field: str, message: str, line: int | None = None) -> None:
        self.path = path
        self.field = field
        self.message = message
        self.line = line
        #: the file's other errors, found in the same pass (``validate`` prints them all)
        self.more: list[TrainingFileError] = []
        super().__init__(self.describe())

    def all(self) -> list[TrainingFileError]:
        """This error and the file's others, in file order."""
        return [self, *self.more]

    def describe(self, shown_path: str | None = None) -> str:
        """One line, whatever the file's name or content: control characters are escaped,
        so a name cannot start a line of its own or colour a terminal."""
        where = shown_path if shown_path is not None else str(self.path)
        at = f":{self.line}" if self.line else ""
        return printable(f"{where}{at}: {self.field}: {self.message}")


@dataclass
class FolderResult:
    """DAGs by dag_id (in file order), trainings by file, and the errors of broken files."""

    dags: dict[str, DAG] = field(default_factory=dict)
    trainings: dict[Path, TrainingFile] = field(default_factory=dict)
    errors: list[TrainingFileError] = field(default_factory=list)


def trainings_dir(dag_file: str | os.PathLike[str], folder: str | None = None) -> tuple[Path, bool]:
    """The folder to load and whether it was configured (``folder``, else
    ``$TFK_TRAININGS_DIR``; relative to the DAG file's folder) rather than the default
    ``<dags>/../trainings``."""
    here = Path(dag_file).resolve().parent
    configured = folder if folder is not None else os.environ.get(ENV_DIR, "").strip()
    if configured:
        return (here / configured).resolve(), True
    return (here.parent / "trainings").resolve(), False


def training_files(folder: Path, errors: list[TrainingFileError] | None = None) -> list[Path]:
    """Every ``*.yaml``/``*.yml`` under ``folder`` (recursively, hidden entries skipped), sorted.

    :param errors: receives one error per sub-folder that cannot be listed or is a symbolic
        link (not followed: it could lead out of the folder or back into it), so no folder
        is skipped silently.
    """
    found = []

    def unreadable(exc: OSError) -> None:
        if errors is not None:
            where = Path(exc.filename) if exc.filename else folder
            errors.append(TrainingFileError(where, "spec", f"folder cannot be read: {exc.strerror or exc}"))

    for root, dirs, files in os.walk(folder, onerror=unreadable, followlinks=False):
        visible = sorted(d for d in dirs if not d.startswith("."))
        dirs[:] = [d for d in visible if not os.path.islink(os.path.join(root, d))]
        if errors is not None:
            errors.extend(
                TrainingFileError(Path(root, d), "spec", "is a symbolic link to a folder; not followed")
                for d in visible
                if d not in dirs
            )
        for name in files:
            if name.endswith(SUFFIXES) and not name.startswith("."):
                found.append(Path(root, name))
    return sorted(found)


def _line(lines: dict[str, int], where: str) -> int | None:
    """Line of ``where`` or of its closest parent present in the file."""
    while where:
        if where in lines:
            return lines[where]
        cut = max(where.rfind("."), where.rfind("["))
        where = where[:cut] if cut > 0 else ""
    return None


def default_dag_id(path: Path) -> str:
    name = path.name
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def _read_bounded(path: Path, root: Path | None) -> bytes:
    """At most ``MAX_BYTES + 1`` bytes of a regular file, never blocking: a FIFO or a device
    named ``*.yaml`` would hang the DAG processor, and a symbolic link may not lead out of
    ``root`` (``/proc/self/environ`` would end up in an import error)."""
    if root is not None and path.is_symlink():
        target = path.resolve()
        if not target.is_relative_to(root.resolve()):
            raise TrainingFileError(path, "spec", f"is a symbolic link out of {root}; not read")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise TrainingFileError(path, "spec", f"is not a regular file ({_kind(info.st_mode)}); not read")
        if info.st_size > MAX_BYTES:
            raise TrainingFileError(path, "spec", f"is larger than {MAX_BYTES} bytes ({info.st_size})")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read(MAX_BYTES + 1)
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return name
    return "not a plain file"


def read_training(
    path: Path, root: Path | None = None, *, stamps: bool = False
) -> tuple[TrainingFile, str, dict[str, int], str | None]:
    """Read and validate one file: the training, its text, its line map, and the name of
    the stamp to record once its DAG is built (None: not to record; with ``stamps``, a file
    already stamped skips the spec checks, :mod:`airflow_tfk.dagfactory.checked`).

    :param root: the folder the file was found in: a symbolic link may not lead out of it.

    Raises :class:`TrainingFileError`.
    """
    lines: dict[str, int] = {}
    bad = control_character(str(path))
    if bad is not None:
        raise TrainingFileError(path, "path", f"must not contain the control character {bad!r}")
    try:
        raw = _read_bounded(path, root)
        stamp = None
        if stamps:
            from airflow_tfk.dagfactory import checked

            stamp = checked.stamp_name(raw, str(path), str(root) if root is not None else None)
            if checked.is_checked(stamp):
                stamp = None  # nothing to record: ``specs_checked`` below
        text = raw.decode("utf-8")
        data, lines = load_yaml_lines(text)
        training = parse_training(
            data,
            default_dag_id=default_dag_id(path),
            source=str(path),
            root=str(root) if root is not None else None,
            specs_checked=stamps and stamp is None,
        )
    except SpecError as exc:
        raise _error(path, exc, lines) from None
    except UnicodeDecodeError as exc:
        raise TrainingFileError(path, "spec", f"is not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise TrainingFileError(path, "spec", f"cannot be read: {exc.strerror or exc}") from None
    return training, text, lines, stamp


def _error(path: Path, exc: SpecError, lines: dict[str, int]) -> TrainingFileError:
    """The file's error; every error of a :class:`SpecErrors`, each with its line."""
    found = []
    for one in getattr(exc, "errors", None) or [exc]:
        shown = "" if one.value is ... else f" (got {short_repr(one.value)})"
        line = getattr(one, "line", None) or _line(lines, one.field)  # the YAML reader's own, if any
        found.append(TrainingFileError(path, one.field, f"{one.rule}{shown}", line))
    found.sort(key=lambda e: e.line or 0)
    first, *rest = found
    first.more = rest
    return first


def _root_of(path: Path, folder: Path) -> Path:
    """The folder a symbolic link among the files may point into."""
    here, top = Path(os.path.abspath(path)), Path(os.path.abspath(folder))  # links kept
    return top if here.is_relative_to(top) else here.parent


def _load_one(
    path: Path, root: Path, owner_of: dict[str, Path], build: bool, stamps: bool
) -> tuple[TrainingFile, DAG | None]:
    """One file's training and DAG; every failure is a :class:`TrainingFileError` of that file."""
    from airflow_tfk.dagfactory.builder import build_dag

    lines: dict[str, int] = {}
    try:
        training, text, lines, stamp = read_training(path, root, stamps=stamps and build)
        if training.dag_id in owner_of:
            raise SpecError("dag_id", f"is already used by {owner_of[training.dag_id]}", training.dag_id)
        if not build:
            return training, None
        dag = build_dag(training, text, specs_checked=stamps and stamp is None)
        if stamp is not None:
            from airflow_tfk.dagfactory import checked

            checked.mark_checked(stamp)
        return training, dag
    except TrainingFileError:
        raise
    except SpecError as exc:
        raise _error(path, exc, lines) from None
    except Exception as exc:  # an operator's or Airflow's own check: still this file's error
        raise TrainingFileError(path, "spec", f"{type(exc).__name__}: {exc}") from None


def load_folder(
    folder: Path,
    *,
    build: bool = True,
    files: Iterable[Path] | None = None,
    budget: float | None = None,
    stamps: bool = False,
) -> FolderResult:
    """Load every training file of ``folder`` (or ``files``); never raises for a bad file.

    :param build: also build the DAGs (what the DAG file and ``validate`` do); without it
        only the files are checked.
    :param stamps: skip the spec checks of a file that passed them before in the same
        context, and stamp those that pass (the DAG file's repeated parses; never
        ``validate``): :mod:`airflow_tfk.dagfactory.checked`.
    :param budget: seconds; the files not reached by then are each reported as not loaded,
        so a folder too large for the DAG processor's timeout still loads what it can
        instead of timing out as a whole and loading nothing.
    """
    result = FolderResult()
    owner_of: dict[str, Path] = {}
    paths = list(files) if files is not None else training_files(folder, result.errors)
    deadline = None if budget is None else time.monotonic() + budget
    for index, path in enumerate(paths):
        if deadline is not None and time.monotonic() > deadline:
            result.errors.extend(
                TrainingFileError(
                    p,
                    "spec",
                    (
                        f"not loaded: this folder took longer than {budget:.0f} s to load ({index} of "
                        f"{len(paths)} files done); split it (docs/dag-as-code.md)"
                    ),
                )
                for p in paths[index:]
            )
            break
        try:
            training, dag = _load_one(path, _root_of(path, folder), owner_of, build, stamps)
        except TrainingFileError as exc:
            result.errors.append(exc)
            continue
        owner_of[training.dag_id] = path
        result.trainings[path] = training
        if dag is not None:
            result.dags[training.dag_id] = dag
    return result


def dag_variable(dag_id: str) -> str:
    """A module-level name for a DAG (Airflow finds DAGs among a module's globals)."""
    return "dag__" + "".join(c if c.isalnum() else "_" for c in dag_id)


def _parse_budget() -> float:
    """Seconds the trainings may take in one parse of the DAG file: half the import timeout
    ([core] dagbag_import_timeout, 30 s by default) and under a third of the DAG processor's
    ([dag_processor] dag_file_processor_timeout, 50 s), leaving the rest for reporting the
    files not reached, bagging the DAGs and serializing them (measured: 3.5 CPU-ms to load a
    file, 4.8 CPU-ms to serialize its DAG; on a loaded machine wall time is several times
    that)."""
    from airflow.configuration import conf

    limits = [0.3 * conf.getfloat("dag_processor", "dag_file_processor_timeout", fallback=50.0)]
    import_timeout = conf.getfloat("core", "dagbag_import_timeout", fallback=30.0)
    if import_timeout > 0:
        limits.append(0.5 * import_timeout)
    return min(limits)


def load_into(namespace: dict[str, Any], dag_file: str, folder: str | None = None) -> FolderResult:
    """What ``dags/tfk_trainings.py`` does: load the folder, put each DAG into the DAG
    file's globals, and report each broken file as an import error of that file.

    :param folder: the trainings folder of this DAG file (relative to its folder); default
        ``$TFK_TRAININGS_DIR`` or ``<dags>/../trainings``. Several DAG files, each with its
        own folder, spread a very large set of trainings over several DAG-processor parses.
    """
    import logging

    where, configured = trainings_dir(dag_file, folder)
    if not where.is_dir():
        if configured:
            # Nothing of this file can load: an import error of the DAG file itself is right.
            given = folder if folder is not None else f"{ENV_DIR}={os.environ[ENV_DIR]}"
            raise FileNotFoundError(f"{given}: no such directory {where}")
        logging.getLogger(__name__).warning("no training files: %s does not exist", where)
        return FolderResult()
    result = load_folder(where, budget=_parse_budget(), stamps=True)
    for dag_id, dag in result.dags.items():
        namespace[dag_variable(dag_id)] = dag
    if result.errors:
        from airflow_tfk.dagfactory.import_errors import report

        report(result.errors)
    return result
