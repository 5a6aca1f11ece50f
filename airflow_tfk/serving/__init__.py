"""Publishing models to TensorFlow Serving.

Names load lazily, so importing this package costs neither TensorFlow, the Kubernetes
client nor Jinja2. (TensorBoard lives in :mod:`airflow_tfk.tensorboard`; the model-config
format the runtime's model server reads lives in :mod:`airflow_tfk.protocol`.)
"""

from __future__ import annotations

from airflow_tfk.core.lazy import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "airflow_tfk.serving.spec": ("ServingSpec", "TensorBoardSpec"),
        "airflow_tfk.serving.base": ("ServingError", "ServingTarget"),
        "airflow_tfk.serving.publish": ("PublishResult", "publish"),
        "airflow_tfk.serving.targets": ("get_serving_target",),
    },
)
