"""The end of a training on the exporting task: evaluate a plain local copy of the model,
print its metrics, and export it for TF Serving. A mixin of
:class:`~airflow_tfk.runtime.app.TrainingApp`; :meth:`serving_input_signature` and
:meth:`export` may be overridden there like any hook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_tfk.runtime import progress as _progress
from airflow_tfk.runtime.exits import UsageError
from airflow_tfk.runtime.export import export_model

if TYPE_CHECKING:
    from airflow_tfk.runtime.flags import PlatformFlags


class FinishSteps:
    if TYPE_CHECKING:  # TrainingApp's (declared only, so its hooks are never shadowed)
        flags: PlatformFlags
        model_name: str

        @property
        def is_chief(self) -> bool: ...

        def build_model(self) -> Any: ...

        def sample_input(self) -> Any: ...

        def after_train(self, model: Any) -> dict | None: ...

        def serve(self, model: Any, inputs: Any) -> dict: ...

    def finish(self, model: Any, fresh_copy: bool = True) -> None:
        """On the exporting task: :meth:`after_train` on a plain local copy of ``model``,
        its metrics as a ``metrics`` line, then :meth:`export`."""
        if not self.is_chief:
            return
        local = self.local_copy(model) if fresh_copy else model
        metrics = self.after_train(local)
        if metrics:
            print(_progress.event_line("metrics", **metrics), flush=True)
        self.export(local, metrics)

    def local_copy(self, model: Any) -> Any:
        """A fresh, undistributed model with ``model``'s weights: what is exported."""
        fresh = self.local_copy_for_eval()
        fresh.set_weights(model.get_weights())
        return fresh

    def local_copy_for_eval(self) -> Any:
        """A fresh, built, undistributed model (weights to be restored or set)."""
        fresh = self.build_model()
        if not fresh.built:
            sample = self.sample_input()
            if sample is not None:
                fresh(sample)
        return fresh

    def serving_input_signature(self, model: Any) -> list[Any]:
        """The ``serving_default`` input: from :meth:`sample_input`, else the model's input."""
        import tensorflow as tf

        sample = self.sample_input()
        if sample is not None:
            import numpy as np

            sample = np.asarray(sample)
            return [tf.TensorSpec([None, *sample.shape[1:]], tf.as_dtype(sample.dtype), name="inputs")]
        inputs = getattr(model, "inputs", None)
        if not inputs or len(inputs) != 1:
            raise UsageError(
                "cannot tell the serving input: define sample_input() or serving_input_signature()"
            )
        shape = list(inputs[0].shape)
        return [tf.TensorSpec([None, *shape[1:]], inputs[0].dtype, name="inputs")]

    def export(self, model: Any, metrics: dict[str, Any] | None = None) -> str | None:
        """Write ``model`` as ``<export_dir>/<model_name>/<version>/`` with a
        ``serving_default`` signature and the sample request; returns the version dir.

        Written to a temporary sibling first and renamed, so TF Serving never sees a
        half-written version.
        """
        return export_model(
            model,
            base=self.flags.export_dir,
            name=self.flags.model_name or self.model_name,
            version=self.flags.model_version,
            signature=self.serving_input_signature(model) if self.flags.export_dir else [],
            serve=self.serve,
            sample=self.sample_input(),
            metrics=metrics,
        )
