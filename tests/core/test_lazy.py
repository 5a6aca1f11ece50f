"""``lazy_exports``: the public names of ``airflow_tfk`` and ``airflow_tfk.serving``."""

from __future__ import annotations

import subprocess
import sys

import pytest

from airflow_tfk.core.lazy import lazy_exports


def test_a_name_is_imported_from_its_module_when_first_used() -> None:
    names, getattr_ = lazy_exports("pkg", {"json": ("dumps", "loads"), "os.path": ("join",)})
    assert names == ["dumps", "join", "loads"]
    assert getattr_("join")("a", "b") == "a/b"
    with pytest.raises(AttributeError, match="module 'pkg' has no attribute 'nope'"):
        getattr_("nope")


def test_the_packages_import_their_names_only_when_used() -> None:
    code = (
        "import sys, airflow_tfk, airflow_tfk.serving as s\n"
        "assert 'airflow_tfk.spec.cluster' not in sys.modules\n"
        "assert 'airflow_tfk.serving.publish' not in sys.modules\n"
        "assert airflow_tfk.TFClusterSpec.__module__ == 'airflow_tfk.spec.cluster'\n"
        "assert s.publish.__name__ == 'publish'\n"
        "assert 'TrainingFailed' in airflow_tfk.__all__ and 'get_serving_target' in s.__all__\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
