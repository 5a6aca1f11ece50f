"""Model versions are TF Serving's int64: every reader of a version (the operator's
argument, the model store's directories, the stand-in's ``/versions/N`` path, the
recorded metrics) accepts up to 2**63-1 and refuses above, naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.operators.serving import TFPublishModelOperator
from airflow_tfk.protocol.digits import MAX_VERSION, model_version
from airflow_tfk.runtime.export import next_version, version_of
from airflow_tfk.runtime.model_server.manager import version_dirs
from airflow_tfk.serving.local import LocalServing
from airflow_tfk.serving.spec import ServingSpec

INT64_MAX = "9223372036854775807"
OVER = "9223372036854775808"


def test_int64_bounds() -> None:
    assert MAX_VERSION == int(INT64_MAX)
    assert model_version(INT64_MAX) == int(INT64_MAX)
    for bad in (OVER, "9" * 20, "1" * 31, "-1", "", "²", " 1", "1_0", 7):
        assert model_version(bad) is None, bad


def _op(version: object) -> TFPublishModelOperator:
    return TFPublishModelOperator(task_id="publish", model_name="digits", claim="models", version=version)


@pytest.mark.parametrize(
    "version", [INT64_MAX, int(INT64_MAX), "+" + INT64_MAX, "1234567890123456789", 0, "0"]
)
def test_the_operator_accepts_every_int64_version(version) -> None:
    assert _op(version)._version() == int(str(version).lstrip("+"))


@pytest.mark.parametrize(
    "version", [OVER, int(OVER), 2**64, "9" * 19, "9" * 400, 10**400, -1, True, 3.0, "3.0"]
)
def test_the_operator_refuses_versions_beyond_int64_naming_the_field(version) -> None:
    with pytest.raises(SpecError) as err:
        _op(version)._version()
    assert err.value.field == "version"


def test_store_readers_see_a_19_digit_version_and_skip_one_beyond_int64(tmp_path: Path) -> None:
    model = tmp_path / "digits"
    for name in ("1", INT64_MAX, OVER, "9" * 25):
        (model / name).mkdir(parents=True)
        (model / name / "saved_model.pb").write_bytes(b"")
    assert version_dirs(str(model)) == [1, int(INT64_MAX)]
    assert version_of(INT64_MAX) == int(INT64_MAX) and version_of(OVER) is None
    with pytest.raises(ValueError, match="no next version"):
        next_version(str(model))
    target = LocalServing(ServingSpec(model_name="digits", base_path=str(tmp_path)), root=str(tmp_path / "s"))
    assert target.exported_versions() == [1, int(INT64_MAX)]
