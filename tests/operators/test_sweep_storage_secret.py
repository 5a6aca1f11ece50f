"""A sweep's ``storage`` URL may carry a database password: the task's log and what
Airflow redacts never show it."""

from __future__ import annotations

import pytest

from airflow_tfk.operators.sweep import _mask_password


@pytest.mark.parametrize("url", ["postgresql://user:s3cr%40t@db.example/optuna", "mysql://u:pw-xyz-1@h/x"])
def test_the_storage_password_is_masked(url: str) -> None:
    from airflow.sdk.log import _secrets_masker

    _mask_password(url)
    password = url.split(":")[2].split("@")[0]
    shown = _secrets_masker().redact(f"study in {url}")
    assert password not in shown and "***" in shown


@pytest.mark.parametrize(
    "url", ["sqlite:////tmp/s.db", "postgresql://db.example/optuna", "postgresql://[bad"]
)
def test_urls_without_a_password_are_left_alone(url: str) -> None:
    _mask_password(url)  # no error, nothing to hide
