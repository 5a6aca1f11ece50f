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


def _config() -> dict[str, Any]:
    """The provider's sections of Airflow's configuration, so ``airflow config list`` shows
    them and ``AIRFLOW__TFK_POLICY__<OPTION>`` is read (Airflow reads the environment only
    for sections it knows). The platform policy's options come from its own declaration
    (stdlib only: cheap while Airflow loads its configuration)."""
    import dataclasses

    from airflow_tfk.dagfactory.config_docs import param_docs
    from airflow_tfk.spec.platform_policy import PlatformPolicy

    docs = param_docs(PlatformPolicy)
    options: dict[str, Any] = {}
    for f in dataclasses.fields(PlatformPolicy):
        default = f.default
        value = getattr(default, "value", default)
        if isinstance(value, bool):
            text, kind = str(value), "boolean"
        elif value in (None, ()):
            text, kind = "", "string"
        else:
            text, kind = str(value), "string"
        options[f.name] = {
            "description": docs.get(f.name, ""),
            "version_added": None,
            "type": kind,
            "example": None,
            "default": text,
        }
    sweep = {
        "sweep_root": "the directory sweep studies (SQLite files) live in; default: the local backend's "
        "<root>/.sweeps",
        "sweep_storage_url_prefixes": "comma-separated database URLs a sweep's study may use; default: none",
        "prices": "the price table of a training's usage, JSON: cpu_core_hour, memory_gib_hour, "
        'accelerator_hour, currency (e.g. {"cpu_core_hour": 0.031, "currency": "USD"}); '
        "default: none (usage is reported without a cost)",
    }
    return {
        "tfk_policy": {
            "description": "The platform's policy for every pod a training makes (docs/deployment.md): set "
            "by the platform team only, never by a spec, a training file, Params or conf.",
            "options": options,
        },
        "tfk": {
            "description": "Where hyperparameter sweeps keep their studies, and the price table of usage.",
            "options": {
                name: {
                    "description": text,
                    "version_added": None,
                    "type": "string",
                    "example": None,
                    "default": "",
                }
                for name, text in sweep.items()
            },
        },
    }
