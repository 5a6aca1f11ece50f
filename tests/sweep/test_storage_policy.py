"""A sweep's storage lives only under the sweep root, or in a database the platform
allows; never in Airflow's own metadata database. Refusals name ``sweep.storage`` and
come before any directory or study exists."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.sweep import study as studies
from airflow_tfk.sweep.storage import StoragePolicy, resolve_storage
from tests.helpers import task_context
from tests.sweep.sweep_helpers import make_op


def tree(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


@pytest.fixture
def place(tmp_path: Path) -> dict[str, Path]:
    """A sweep root with a link out of it, a dangling link, a link to Airflow's database
    (which lives beside the root, or in it), a FIFO and a directory."""
    root, outside = tmp_path / "sweeps", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    metadata = tmp_path / "airflow.db"
    metadata.write_bytes(b"")
    (root / "out").symlink_to(outside)
    (root / "dangling.db").symlink_to(outside / "missing" / "x.db")
    (root / "meta.db").symlink_to(metadata)
    (root / "inner").mkdir()
    (root / "to-inner").symlink_to(root / "inner")
    (root / "meta-in-root.db").write_bytes(b"")
    os.mkfifo(root / "fifo.db")
    return {"root": root, "outside": outside, "metadata": metadata, "tmp": tmp_path}


# (storage as a template on the fixture's paths, why it is refused)
REFUSED_FILES: list[tuple[Callable[[dict[str, Path]], str], str]] = [
    (lambda p: str(p["outside"] / "a.db"), "outside the sweep root"),
    (lambda p: str(p["outside"] / "new" / "deep" / "a.db"), "outside the sweep root"),
    (lambda p: str(p["tmp"] / "sweeps-sibling" / "a.db"), "outside the sweep root"),  # a shared prefix
    (lambda p: "/etc/a.db", "outside the sweep root"),
    (lambda p: "../a.db", "'..'"),
    (lambda p: "a/../../a.db", "'..'"),
    (lambda p: f"{p['root']}/../outside/a.db", "'..'"),
    (lambda p: "out/a.db", "outside the sweep root"),  # a symlink out
    (lambda p: "out/new/a.db", "outside the sweep root"),
    (lambda p: "dangling.db", "outside the sweep root"),
    (lambda p: "meta.db", "outside the sweep root"),  # a link to Airflow's database
    (lambda p: str(p["metadata"]), "outside the sweep root"),
    (lambda p: ".", "outside the sweep root"),  # the root itself
    (lambda p: str(p["root"]), "outside the sweep root"),
    (lambda p: "fifo.db", "not a regular file"),
    (lambda p: "inner", "not a regular file"),
    (lambda p: "a\nb.db", "newline"),
    (lambda p: f"sqlite:///{p['outside']}/a.db", "outside the sweep root"),
    (lambda p: f"sqlite:///{p['metadata']}", "outside the sweep root"),
    (lambda p: "sqlite:///../a.db", "'..'"),
    (lambda p: "sqlite:///out/a.db", "outside the sweep root"),
    (lambda p: "sqlite://", "must name a file"),
    (lambda p: "sqlite:///:memory:", "must name a file"),
    (lambda p: f"sqlite:///file:{p['outside']}/a.db?mode=rwc&uri=true", "must name a file"),
    (lambda p: "sqlite:///a.db?uri=true", "must name a file"),
]


@pytest.mark.parametrize(
    ("storage", "why"), REFUSED_FILES, ids=[f"file{i}" for i in range(len(REFUSED_FILES))]
)
def test_a_study_file_outside_the_root_is_refused_before_anything_is_made(place, storage, why) -> None:
    before = tree(place["tmp"])
    policy = StoragePolicy(str(place["root"]), (), f"sqlite:///{place['metadata']}")
    with pytest.raises(SpecError) as caught:
        resolve_storage(storage(place), "s", policy)
    assert caught.value.field == "sweep.storage" and why in caught.value.rule, caught.value
    assert tree(place["tmp"]) == before


def test_airflow_s_database_in_the_root_is_refused_by_any_spelling(place) -> None:
    """The platform's root holds Airflow's database (a sweep root of AIRFLOW_HOME): every
    path to it is refused, through a link, a URL or an inner directory's '..'-free link."""
    metadata = place["root"] / "meta-in-root.db"
    (place["root"] / "inner" / "m.db").symlink_to(metadata)
    policy = StoragePolicy(str(place["root"]), (), f"sqlite:///{metadata}")
    for storage in ("meta-in-root.db", str(metadata), f"sqlite:///{metadata}", "to-inner/m.db", "inner/m.db"):
        with pytest.raises(SpecError, match="sweep.storage: is Airflow's own metadata database"):
            resolve_storage(storage, "s", policy)


@pytest.mark.parametrize(
    ("storage", "where"),
    [
        ("a.db", "a.db"),
        ("deep/er/a.db", "deep/er/a.db"),
        ("to-inner/a.db", "inner/a.db"),  # a link that stays inside
        ("inner/../b.db", None),  # '..' is refused even when it would stay inside
        ("sqlite:///c.db", "c.db"),
        (None, "dag.task.run.-1.db"),
    ],
)
def test_a_study_file_under_the_root_is_made_there(place, storage, where) -> None:
    policy = StoragePolicy(str(place["root"]), (), f"sqlite:///{place['metadata']}")
    if where is None:
        with pytest.raises(SpecError, match="sweep.storage"):
            resolve_storage(storage, "dag.task.run.-1", policy)
        return
    url = resolve_storage(storage, "dag.task.run.-1", policy)
    real = place["root"].resolve() / where
    assert url == f"sqlite:///{real}" and real.parent.is_dir()
    if storage is not None and not storage.startswith("sqlite"):
        absolute = resolve_storage(str(place["root"] / storage), "x", policy)  # the same file, absolute
        assert absolute == url


METADATA = "postgresql+psycopg2://airflow:secret@pg.internal:5432/airflow"
ALLOWED = ("postgresql://pg.internal/", "mysql://studies:3306/optuna", "postgresql+psycopg2://optuna@pgu/")


@pytest.mark.parametrize(
    ("storage", "why"),
    [
        ("postgresql://pg.internal/airflow", "metadata database"),
        ("postgresql://other:pw@PG.INTERNAL:5432/airflow?sslmode=require", "metadata database"),
        ("postgresql+asyncpg://pg.internal./airflow", "metadata database"),
        ("postgresql://db.example.org/optuna", "does not allow"),
        ("postgresql://pg.internal.evil.org/optuna", "does not allow"),
        ("postgresql://pg.internalx/optuna", "does not allow"),
        ("mysql://studies:33061/optuna", "does not allow"),
        ("mysql://studies:3306/optuna_other", "does not allow"),
        ("oracle://pg.internal/optuna", "does not allow"),
        ("postgresql://optuna@pgu/s", "does not allow"),  # the prefix names its driver
        ("postgresql+psycopg2://other@pgu/s", "does not allow"),  # and its user
        ("not a url://x", "not a database URL"),
    ],
)
def test_a_database_url_must_be_allowed_and_never_airflow_s(storage: str, why: str) -> None:
    policy = StoragePolicy(None, ALLOWED, METADATA)
    with pytest.raises(SpecError) as caught:
        resolve_storage(storage, "s", policy)
    assert caught.value.field == "sweep.storage"
    assert (why if why != "does not allow" else "is not a database the platform allows") in str(caught.value)
    assert "secret" not in str(caught.value) and "pw@" not in str(caught.value)


@pytest.mark.parametrize(
    "storage",
    [
        "postgresql://pg.internal/optuna",
        "postgresql://u:p@pg.internal:5432/optuna",
        "mysql://studies:3306/optuna",
        "postgresql+psycopg2://optuna:pw@pgu:5432/s",
    ],
)
def test_an_allowed_database_is_used_as_given(storage: str) -> None:
    assert resolve_storage(storage, "s", StoragePolicy(None, ALLOWED, METADATA)) == storage


def test_no_database_is_allowed_by_default() -> None:
    with pytest.raises(SpecError, match=r"sweep_storage_url_prefixes: none"):
        studies.storage_url("postgresql://db/optuna", "kubernetes", None, "x")


def test_the_platform_s_settings_come_from_airflow_s_configuration(monkeypatch, tmp_path) -> None:
    from airflow_tfk._airflow.platform_config import sweep_storage_policy

    monkeypatch.setenv("AIRFLOW__TFK__SWEEP_ROOT", str(tmp_path))
    monkeypatch.setenv("AIRFLOW__TFK__SWEEP_STORAGE_URL_PREFIXES", " postgresql://a/ ,, mysql://b/")
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "sqlite:////x/airflow.db")
    assert sweep_storage_policy() == StoragePolicy(
        str(tmp_path), ("postgresql://a/", "mysql://b/"), "sqlite:////x/airflow.db"
    )
    monkeypatch.delenv("AIRFLOW__TFK__SWEEP_ROOT")
    monkeypatch.delenv("AIRFLOW__TFK__SWEEP_STORAGE_URL_PREFIXES")
    assert sweep_storage_policy() == StoragePolicy(None, (), "sqlite:////x/airflow.db")


@pytest.mark.parametrize("storage", ["airflow.db", "link.db", "../outside.db", "{tmp}/elsewhere/x.db"])
def test_the_operator_refuses_before_any_study_or_cluster(local_root, tmp_path, monkeypatch, storage) -> None:
    """Airflow's database (here in the local root's sweep dir, as a sweep root of
    AIRFLOW_HOME would hold it) or a path out: the task fails naming sweep.storage, and
    no study, directory or cluster is made."""
    sweeps = local_root / ".sweeps"
    sweeps.mkdir(parents=True)
    metadata = sweeps / "airflow.db"
    metadata.write_bytes(b"")
    (sweeps / "link.db").symlink_to(metadata)
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{metadata}")
    monkeypatch.delenv("AIRFLOW__TFK__SWEEP_ROOT", raising=False)
    before = tree(tmp_path)
    with pytest.raises(SpecError) as caught:
        op = make_op(tmp_path, n_trials=1, storage=storage.format(tmp=tmp_path))
        op.execute(task_context(run_id="manual__s", task_id="sweep"))
    assert caught.value.field == "sweep.storage", caught.value
    assert tree(tmp_path) == before and metadata.read_bytes() == b""
