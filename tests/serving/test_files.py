"""A version's files checked between the gate (or the approval) and promotion: a version
swapped, rewritten or relinked in the shared model store after its check is not promoted,
and the version that served before still serves."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from airflow_tfk.serving.base import ServingError
from airflow_tfk.serving.files import tree_digest
from airflow_tfk.serving.gate import QualityGate
from airflow_tfk.serving.publish import NotApproved, same_files
from tests.serving.test_publish import make, model, run


def _version(root: Path, n: int) -> Path:
    d = root / str(n)
    (d / "variables").mkdir(parents=True)
    (d / "saved_model.pb").write_bytes(b"graph-%d" % n)
    (d / "variables" / "variables.data").write_bytes(b"weights")
    return d


def _swap_dir(d: Path) -> None:
    other = d.with_name("evil")
    shutil.copytree(d, other)
    (other / "saved_model.pb").write_bytes(b"graph-X")  # same size, other content
    shutil.rmtree(d)
    other.rename(d)


def _rewrite_same_bytes(d: Path) -> None:
    data = (d / "variables" / "variables.data").read_bytes()
    (d / "variables" / "variables.data").write_bytes(data)


def _relink(d: Path) -> None:
    elsewhere = d.parent / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "variables.data").write_bytes(b"weights")
    shutil.rmtree(d / "variables")
    os.symlink(elsewhere, d / "variables")


def _back_dated(d: Path) -> None:
    f = d / "saved_model.pb"
    st = f.stat()
    f.write_bytes(b"graph-X")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime forged back; ctime moves anyway


SWAPS = [_swap_dir, _rewrite_same_bytes, _relink, _back_dated]


@pytest.mark.parametrize("swap", SWAPS, ids=[s.__name__.strip("_") for s in SWAPS])
def test_the_digest_sees_every_kind_of_swap(tmp_path: Path, swap) -> None:
    d = _version(tmp_path, 2)
    before = tree_digest(str(d))
    assert before == tree_digest(str(d))  # reading changes nothing
    swap(d)
    assert tree_digest(str(d)) != before
    assert tree_digest(str(tmp_path / "9")) is None


@pytest.mark.parametrize("swap", SWAPS, ids=[s.__name__.strip("_") for s in SWAPS])
def test_a_version_swapped_after_the_gate_is_not_promoted(tmp_path: Path, swap) -> None:
    target = make({1: "ok", 2: "ok"})
    target.version_files = lambda v: tree_digest(str(tmp_path / str(v)))  # type: ignore[method-assign]
    _version(tmp_path, 1)
    run(target, 1)
    d = _version(tmp_path, 2)
    smoke = target.predict

    def swapped_during_the_smoke_test(*args, **kwargs):
        swap(d)
        target.predict = smoke  # type: ignore[method-assign]
        return smoke(*args, **kwargs)

    target.predict = swapped_during_the_smoke_test  # type: ignore[method-assign]
    gate = QualityGate.from_dict({"thresholds": {"accuracy": 0.9}})
    with pytest.raises(ServingError, match="changed after the quality gate"):
        run(target, 2, gate=gate, metrics={"accuracy": 0.95})
    assert model(target).stable == 1 and 2 not in model(target).versions


def test_a_swap_while_the_replicas_load_the_promoted_version_is_caught(tmp_path: Path) -> None:
    """The last chance: after the candidate's smoke test and the approval, while every
    replica loads the version under the model's own name. The check comes after that load
    and before the label moves, and the refusal names the version and what changed."""
    target = make({1: "ok", 2: "ok"})
    target.version_files = lambda v: tree_digest(str(tmp_path / str(v)))  # type: ignore[method-assign]
    _version(tmp_path, 1)
    run(target, 1)
    d = _version(tmp_path, 2)
    write = target.write_config

    def swapped_as_it_loads(config):
        entry = config.get("digits")
        if entry is not None and 2 in entry.versions:
            (d / "saved_model.pb").write_bytes(b"graph-X")
        write(config)

    target.write_config = swapped_as_it_loads  # type: ignore[method-assign]
    approved: list[dict] = []
    with pytest.raises(ServingError) as err:
        run(target, 2, approve=lambda request: approved.append(request) or True)
    assert approved and approved[0]["files"] is not None  # the approval saw the unswapped files
    assert "digits version 2 changed after the quality gate" in str(err.value), err.value
    assert "changed: saved_model.pb" in str(err.value) and "version 1 is still serving" in str(err.value)
    assert all(m.stable in (None, 1) for c in target.writes if (m := c.get("digits")) is not None)
    assert model(target).stable == 1 and 2 not in model(target).versions


def test_an_unchanged_version_is_promoted(tmp_path: Path) -> None:
    target = make({1: "ok"})
    target.version_files = lambda v: tree_digest(str(tmp_path / str(v)))  # type: ignore[method-assign]
    _version(tmp_path, 1)
    assert run(target, 1).version == 1 and model(target).stable == 1


def test_a_resumed_approval_promotes_only_the_files_that_were_shown() -> None:
    approve = same_files({"version": 2, "files": "abc"})
    assert approve({"version": 2, "files": "abc"}) is True
    with pytest.raises(NotApproved, match="changed after they were approved"):
        approve({"version": 2, "files": "abd"})
