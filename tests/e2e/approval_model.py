"""A digits SavedModel for the approval tests, without a training: the digits app's
model, untrained, exported by the platform's own export (sample request and metrics
included). Run as a script (TensorFlow loads there, never in the test process):
``python -m tests.e2e.approval_model <models dir> <version>...``."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def main(base: str, versions: list[int]) -> None:
    from airflow_tfk.runtime.examples.digits_app import DigitsApp
    from airflow_tfk.runtime.export import export_model

    app = DigitsApp.__new__(DigitsApp)
    app.args = None  # defaults: 64 hidden units
    model = app.build_model()
    first = export_model(
        model,
        base=base,
        name="digits",
        version=versions[0],
        signature=app.serving_input_signature(model),
        serve=app.serve,
        sample=app.sample_input(),
        metrics={"accuracy": 0.95, "loss": 0.2},
    )
    assert first is not None
    for v in versions[1:]:  # the same files under the next numbers: a new version each
        shutil.copytree(first, Path(base) / "digits" / str(v))


if __name__ == "__main__":
    main(sys.argv[1], [int(v) for v in sys.argv[2:]])
