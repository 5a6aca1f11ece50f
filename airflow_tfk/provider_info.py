"""Provider metadata read by Airflow's ProvidersManager (entry point ``apache_airflow_provider``).

Must stay import-light: Airflow calls it while it loads its own configuration.
"""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    from airflow_tfk import version

    return {
        "package-name": "airflow-tfk",
        # From the installed metadata, as ``--version`` reads it: pyproject.toml is the one
        # place the version is written (docs/releasing.md).
        "versions": [version()],
        "name": "TensorFlow on Kubernetes (airflow-tfk)",
        "description": "Distributed TensorFlow training clusters on Kubernetes: create, wait, "
        "clean up, and publish to TensorFlow Serving.",
        "integrations": [
            {
                "integration-name": "TensorFlow on Kubernetes",
                "external-doc-url": "https://www.tensorflow.org/guide/distributed_training",
                "tags": ["software"],
            }
        ],
        "operators": [
            {
                "integration-name": "TensorFlow on Kubernetes",
                "python-modules": [
                    "airflow_tfk.operators.cluster",
                    "airflow_tfk.operators.training",
                    "airflow_tfk.operators.serving",
                    "airflow_tfk.operators.tensorboard",
                    "airflow_tfk.operators.sweeper",
                    "airflow_tfk.operators.sweep",
                ],
            }
        ],
        "sensors": [
            {
                "integration-name": "TensorFlow on Kubernetes",
                "python-modules": ["airflow_tfk.sensors.cluster"],
            }
        ],
        "triggers": [
            {
                "integration-name": "TensorFlow on Kubernetes",
                "python-modules": ["airflow_tfk.triggers.cluster"],
            }
        ],
        # The cluster connection is the cncf provider's `kubernetes` connection type and
        # KubernetesHook: this provider adds no hook or connection type of its own.
        "hooks": [],
        "connection-types": [],
        "extra-links": ["airflow_tfk.operators.tensorboard.TensorBoardLink"],
        "config": _config(),
    }


#: the config sections, generated from the platform policy's declaration by
#: scripts/gen_spec_docs.py (:func:`airflow_tfk.dagfactory.config_docs.provider_config`; a
#: test fails when they drift): Airflow reads them while it loads its configuration, in
#: every Airflow process, where importing the policy's modules cost about 14 ms
CONFIG_FILE = "dagfactory/provider-config.json"


def _config() -> dict[str, Any]:
    """The provider's sections of Airflow's configuration, so ``airflow config list`` shows
    them and ``AIRFLOW__TFK_POLICY__<OPTION>`` is read (Airflow reads the environment only
    for sections it knows)."""
    import json
    from pathlib import Path

    config: dict[str, Any] = json.loads((Path(__file__).parent / CONFIG_FILE).read_text(encoding="utf-8"))
    return config
