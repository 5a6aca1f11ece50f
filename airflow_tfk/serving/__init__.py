"""Publishing models to TensorFlow Serving.

Names load lazily, so importing this package costs neither TensorFlow, the Kubernetes
client nor Jinja2. (TensorBoard lives in :mod:`airflow_tfk.tensorboard`; the model-config
format the runtime's model server reads lives in :mod:`airflow_tfk.protocol`.)
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ServingSpec": "airflow_tfk.serving.spec",
    "TensorBoardSpec": "airflow_tfk.serving.spec",
    "ServingError": "airflow_tfk.serving.base",
    "ServingTarget": "airflow_tfk.serving.base",
    "PublishResult": "airflow_tfk.serving.publish",
    "publish": "airflow_tfk.serving.publish",
    "get_serving_target": "airflow_tfk.serving.targets",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'airflow_tfk.serving' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
