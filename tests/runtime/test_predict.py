"""runtime.predict: which version directories count (no TensorFlow needed for that)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_tfk.runtime.predict import version_dir, versions


def _version(root: Path, name: str, saved_model: bool = True) -> None:
    (root / "m" / name).mkdir(parents=True)
    if saved_model:
        (root / "m" / name / "saved_model.pb").write_bytes(b"")


def test_only_plain_ascii_integer_directories_with_a_saved_model_are_versions(tmp_path):
    # '²'.isdigit() is true and int('²') raises; int('٣') is 3: neither is a version,
    # as for TF Serving (a base-10 ASCII name).
    for name in ("1", "10", "²", "٣", "tmp-2", "-3", "+4", "0x5", " 6"):
        _version(tmp_path, name)
    _version(tmp_path, "11", saved_model=False)  # half-written: no saved_model.pb yet
    assert versions(str(tmp_path), "m") == [1, 10]
    assert version_dir(str(tmp_path), "m") == str(tmp_path / "m" / "10")
    with pytest.raises(FileNotFoundError, match="version 3 of m not found"):
        version_dir(str(tmp_path), "m", 3)


def test_no_model_directory(tmp_path):
    assert versions(str(tmp_path), "absent") == []
    with pytest.raises(FileNotFoundError, match="no SavedModel version"):
        version_dir(str(tmp_path), "absent")
