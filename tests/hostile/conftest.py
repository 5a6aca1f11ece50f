"""The hostile corpora bound each case's CPU time: what every case shares is loaded once,
before the first one, so no case is charged for it. ``airflow-tfk render`` reads the
platform policy from Airflow's configuration (an import of Airflow's configuration: about
a CPU-second the first time)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _airflow_configuration_loaded() -> None:
    from airflow_tfk._airflow.platform_config import platform_policy

    platform_policy()
