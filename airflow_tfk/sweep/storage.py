"""Where a sweep's study may live: an SQLite file under the sweep root, or a database URL
the platform allows; never Airflow's own metadata database.

``sweep.storage`` comes from a training file, Params or conf: data. Where it may point is
the platform team's choice (:class:`StoragePolicy`, from the provider's Airflow
configuration, read by the operator through :mod:`airflow_tfk._airflow.platform_config`). Every
rule is checked before a directory or a study is created, and a refusal names
``sweep.storage``: a study opened on a database adds its tables there (Airflow's own
database got 12), and the directories of a file path are made wherever it points.

Pure: no Optuna, no Airflow; SQLAlchemy's URL parser (Optuna's dependency) is imported
when a URL is given.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from airflow_tfk.core.errors import SpecError

FIELD = "sweep.storage"
#: The local backend's sweep root, below its own root (``<root>/.sweeps``).
SWEEPS_DIR = ".sweeps"
#: The provider's configuration options that set the policy (``[tfk] <option>``).
ROOT_OPTION = "[tfk] sweep_root"
URLS_OPTION = "[tfk] sweep_storage_url_prefixes"
METADATA_OPTION = "[database] sql_alchemy_conn"
#: The ports a URL without one means, so that ``db`` and ``db:5432`` are one server.
_DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306, "mariadb": 3306, "mssql": 1433, "oracle": 1521}


@dataclass(frozen=True)
class StoragePolicy:
    """What the platform lets a sweep's storage be.

    :param root: the directory SQLite studies live in, at any depth (a relative
        ``sweep.storage`` is taken from it; the default file is ``<root>/<study>.db``);
        None: no file storage.
    :param allowed_url_prefixes: the databases a study may use, as URLs: a server
        (``postgresql://db.internal/``) allows its every database, a URL with a database,
        user or driver allows only those (:func:`_allows`); empty: none.
    :param metadata_url: Airflow's own database: never a study's, even under an allowed
        prefix or in the root.
    """

    root: str | None
    allowed_url_prefixes: tuple[str, ...] = ()
    metadata_url: str | None = None


def resolve_storage(
    storage: str | None, study_name: str, policy: StoragePolicy, *, required: str = ""
) -> str:
    """The study's storage as a database URL, once it passes the policy; the directory of
    an SQLite file is made only then.

    ``required``: why a storage must be given when the policy has no root (the backend's
    reason), shown in the refusal."""
    if storage is not None and "://" in storage:
        url = _parse(storage)
        if url.get_backend_name() == "sqlite":
            return _sqlite_file(_sqlite_path(url, storage), policy, storage)
        return _database(storage, url, policy)
    if storage is None:
        if policy.root is None:
            raise SpecError(FIELD, required or f"is required: the platform sets no {ROOT_OPTION}")
        return _sqlite_file(f"{_file_name(study_name)}.db", policy, None)
    return _sqlite_file(storage, policy, storage)


def _file_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:200]


def _parse(text: str) -> Any:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(text)
    except (ArgumentError, ValueError):
        raise SpecError(FIELD, "is not a database URL (scheme://...)", _shown(text)) from None


def _shown(text: str) -> str:
    from airflow_tfk.sweep.study import display_url

    return display_url(text)


def _sqlite_path(url: Any, text: str) -> str:
    """The file of an ``sqlite:///<path>`` URL; an in-memory database or options are
    refused (a retry could not find the study, and ``uri=true`` options open files of
    their own choosing)."""
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:") or url.query:
        raise SpecError(
            FIELD,
            "an sqlite URL must name a file (sqlite:///<path>), without options or :memory:",
            _shown(text),
        )
    return str(database)


def _sqlite_file(path: str, policy: StoragePolicy, given: str | None) -> str:
    """An SQLite file: under the root after '..' and symlinks are resolved, not Airflow's
    database, not something other than a file; then its directory is made."""
    from airflow_tfk.spec.checks import path_text

    path_text(path, FIELD, kind="any")
    if policy.root is None:
        raise SpecError(
            FIELD,
            f"is a file, but the platform sets no sweep root ({ROOT_OPTION}) for study files "
            f"here: give a database URL the platform allows ({URLS_OPTION})",
            given,
        )
    root = os.path.realpath(policy.root)
    # realpath follows every symlink, a dangling one too: the file is judged where it is.
    real = os.path.realpath(os.path.join(root, path))
    if real == root or os.path.commonpath([real, root]) != root:
        raise SpecError(
            FIELD,
            f"resolves to {real}, outside the sweep root {root} (after '..' and symlinks): a "
            "study file lives under it, and a relative path is taken from it",
            given,
        )
    metadata = _metadata_file(policy.metadata_url)
    if metadata is not None and real == metadata:
        raise SpecError(FIELD, _METADATA_RULE, given)
    if os.path.lexists(real) and not os.path.isfile(real):
        raise SpecError(FIELD, f"{real} exists and is not a regular file", given)
    os.makedirs(os.path.dirname(real), exist_ok=True)
    return f"sqlite:///{real}"


_METADATA_RULE = (
    f"is Airflow's own metadata database ({METADATA_OPTION}): a study would add its tables "
    "there; give a file under the sweep root or a database of its own"
)


def _metadata_file(metadata_url: str | None) -> str | None:
    """The real path of Airflow's database when it is an SQLite file."""
    url = _metadata(metadata_url)
    if url is None or url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    return os.path.realpath(str(url.database))


def _metadata(metadata_url: str | None) -> Any:
    if not metadata_url:
        return None
    try:
        return _parse(metadata_url)
    except SpecError:
        return None  # Airflow itself would not run on it


def _server(url: Any) -> tuple[str, str, int | None, str]:
    """(backend, host, port, database): one database however its URL spells it (driver,
    credentials, options, an implied port, the host's case)."""
    backend = str(url.get_backend_name())
    port = url.port or _DEFAULT_PORTS.get(backend)
    return backend, str(url.host or "localhost").lower().rstrip("."), port, str(url.database or "")


def _database(text: str, url: Any, policy: StoragePolicy) -> str:
    metadata = _metadata(policy.metadata_url)
    if metadata is not None and _server(url) == _server(metadata):
        raise SpecError(FIELD, _METADATA_RULE, _shown(text))
    if not any(_allows(prefix, url) for prefix in policy.allowed_url_prefixes):
        allowed = ", ".join(policy.allowed_url_prefixes) or "none"
        raise SpecError(
            FIELD,
            f"is not a database the platform allows for studies ({URLS_OPTION}: {allowed}); "
            "or give a file under the sweep root",
            _shown(text),
        )
    return text


def _allows(prefix: str, url: Any) -> bool:
    """Does the allowed URL ``prefix`` cover ``url``? The same server (backend, host and
    port, an implied port included), and, where the prefix names them, the same database,
    user and driver. Compared as parsed, not as text: ``postgresql://db`` allows
    ``postgresql://u:p@db:5432/optuna``, never ``postgresql://db.example.org/``."""
    allowed = _metadata(prefix)  # parsed, or None when it does not parse
    if allowed is None:
        return False
    backend, host, port, database = _server(allowed)
    if (backend, host, port) != _server(url)[:3] or (database and database != _server(url)[3]):
        return False
    if allowed.username is not None and allowed.username != url.username:
        return False
    return "+" not in str(allowed.drivername) or allowed.drivername == url.drivername
