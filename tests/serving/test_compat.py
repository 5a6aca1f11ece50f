"""The publish refuses a model server older than the TensorFlow that exported the version,
before anything is created or loaded; a version or a server that cannot say is let through
with a line saying so."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from airflow_tfk.serving.compat import ServerTooOld, check_server, image_tensorflow, version_of
from airflow_tfk.serving.kubernetes import reader_json
from airflow_tfk.serving.local import LocalServing
from airflow_tfk.serving.publish import publish
from airflow_tfk.serving.spec import DEFAULT_SERVING_IMAGE, ServingSpec
from tests.serving.test_files_reader import read


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2.21.0", (2, 21)),
        ("2.21.0-gpu", (2, 21)),
        ("2.21.0rc1", (2, 21)),
        ("2.9", (2, 9)),
        ("v2.19.1", (2, 19)),
        ("latest", None),
        ("nightly-gpu", None),
        ("", None),
        (None, None),
        (2.21, None),
    ],
)
def test_version_of(text, expected):
    assert version_of(text) == expected


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("tensorflow/serving:2.21.0", "2.21.0"),
        ("tensorflow/serving:2.19.0-gpu", "2.19.0-gpu"),
        ("docker.io/tensorflow/serving:2.18.1", "2.18.1"),
        ("mirror.example:5000/tensorflow/serving:2.17.0", "2.17.0"),
        ("tensorflow/serving:latest", None),
        ("tensorflow/serving", None),
        ("registry:5000/tensorflow/serving", None),  # a port, not a tag
        ("tensorflow/serving@sha256:" + "0" * 64, None),
        ("acme/tensorflow-serving:2.1.0", None),  # another repository: its tag means anything
        ("acme/serving:2.1.0", None),
    ],
)
def test_the_tensorflow_a_serving_image_names(image, expected):
    assert image_tensorflow(image) == expected


def test_the_default_serving_image_names_its_tensorflow():
    assert version_of(image_tensorflow(DEFAULT_SERVING_IMAGE)) is not None


def test_an_older_server_is_refused_naming_both_versions():
    lines: list[str] = []
    with pytest.raises(ServerTooOld) as info:
        check_server("m", 3, "2.21.0", "2.19.0", "the serving image tensorflow/serving:2.19.0", lines.append)
    text = str(info.value)
    assert "TensorFlow 2.21.0" in text and "TensorFlow 2.19.0" in text
    assert "tensorflow/serving:2.19.0" in text and "nothing was published" in text
    assert "2.21 or newer" in text
    # the same minor (an older patch) and newer servers pass, silently
    check_server("m", 3, "2.21.3", "2.21.0", "x", lines.append)
    check_server("m", 3, "2.21.0", "2.22.0", "x", lines.append)
    check_server("m", 3, "1.15.0", "2.21.0", "x", lines.append)
    assert lines == []


def test_a_version_or_server_that_cannot_say_is_let_through_with_a_line():
    lines: list[str] = []
    check_server("m", 3, None, "2.19.0", "x", lines.append)
    check_server("m", 3, "2.21.0", None, "the serving image acme/ts:prod", lines.append)
    check_server("m", 3, ["2.21.0"], "2.0.0", "x", lines.append)  # a training wrote nonsense
    assert len(lines) == 3
    assert "does not say which TensorFlow exported it" in lines[0]
    assert "acme/ts:prod does not name a TensorFlow version" in lines[1]


def test_the_store_reader_prints_what_exported_the_version(tmp_path: Path) -> None:
    extra = tmp_path / "3" / "assets.extra"
    extra.mkdir(parents=True)
    (tmp_path / "3" / "saved_model.pb").write_bytes(b"x")
    (extra / "tfk_export.json").write_text('{"tensorflow": "2.21.0"}')
    (extra / "tfk_sample_request.json").write_text(
        '{"instances": [[1.0]]}\ntfk-export: {"tensorflow": "0.1"}'
    )
    log = read(tmp_path, 3)
    assert reader_json(log, "tfk-export:") == {"tensorflow": "2.21.0"}
    # a sample's own line is never read as the export's record
    (extra / "tfk_export.json").unlink()
    assert reader_json(read(tmp_path, 3), "tfk-export:") is None


def test_a_local_publish_to_an_older_server_touches_nothing(tmp_path: Path) -> None:
    """No TensorFlow in this process: the version's files need not load, the refusal comes
    before any server starts or config is written."""
    root = tmp_path / "root"
    base = root / "default" / ".claims" / "models" / "linear" / "1"
    (base / "assets.extra").mkdir(parents=True)
    (base / "saved_model.pb").write_bytes(b"not read")
    (base / "assets.extra" / "tfk_export.json").write_text(json.dumps({"tensorflow": "99.0.0"}))
    spec = ServingSpec(model_name="linear", claim="models", name="tfs-compat")
    target = LocalServing(spec, root=str(root), server="stand-in")
    lines: list[str] = []
    try:
        with pytest.raises(ServerTooOld, match=r"exported with TensorFlow 99\.0\.0, and the local stand-in"):
            publish(target, emit=lines.append)
        assert not target.running()
    finally:  # a publish that got past the check started a server: never left behind
        if target.running():
            target.delete(print)
    assert target.read_config() is None
    # the stand-in's TensorFlow is this venv's, read without importing it
    assert version_of(target.server_tensorflow()[0]) is not None
    assert not os.path.exists(target.dir) or not any(Path(target.dir).iterdir())
