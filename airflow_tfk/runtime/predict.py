"""Answer a TF Serving REST ``:predict`` body from a SavedModel, without TF Serving.

The local stand-in where ``tensorflow_model_server`` is not installed: it loads the
version from TF Serving's ``<base>/<model>/<version>/`` layout and runs its
``serving_default`` signature on the request's ``instances`` (row format), returning
``{"predictions": [...]}`` as TF Serving would. Never imports Airflow.

    python -m airflow_tfk.runtime.predict BASE MODEL [--version V] [--request FILE]

Without ``--request`` it sends the sample request the training app exported
(``assets.extra/tfk_sample_request.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from airflow_tfk.runtime.export import version_of

SAMPLE_REQUEST = os.path.join("assets.extra", "tfk_sample_request.json")


def versions(base: str, model: str) -> list[int]:
    """Integer versions present under ``<base>/<model>``, ascending."""
    root = os.path.join(base, model)
    if not os.path.isdir(root):
        return []
    found = ((version_of(d), d) for d in os.listdir(root))
    return sorted(
        v for v, d in found if v is not None and os.path.exists(os.path.join(root, d, "saved_model.pb"))
    )


def version_dir(base: str, model: str, version: int | None = None) -> str:
    found = versions(base, model)
    if not found:
        raise FileNotFoundError(f"no SavedModel version under {os.path.join(base, model)}")
    if version is None:
        version = found[-1]
    elif version not in found:
        raise FileNotFoundError(f"version {version} of {model} not found (have {found})")
    return os.path.join(base, model, str(version))


def sample_request(path: str) -> dict[str, Any]:
    with open(os.path.join(path, SAMPLE_REQUEST)) as fh:
        return json.load(fh)


def predict(path: str, request: dict[str, Any]) -> dict[str, Any]:
    """Run ``serving_default`` of the SavedModel at ``path`` on a REST predict body."""
    import numpy as np
    import tensorflow as tf

    if "instances" not in request:
        raise ValueError("request: only the row format {'instances': [...]} is supported")
    fn = tf.saved_model.load(path).signatures["serving_default"]
    _, kwargs = fn.structured_input_signature
    if len(kwargs) != 1:
        raise ValueError(f"request: the signature takes {sorted(kwargs)}; send one named input")
    ((name, spec),) = kwargs.items()
    instances = request["instances"]
    if instances and isinstance(instances[0], dict):
        instances = [row[name] for row in instances]
    outputs = fn(**{name: tf.constant(np.asarray(instances), dtype=spec.dtype)})
    arrays = {k: v.numpy().tolist() for k, v in outputs.items()}
    if len(arrays) == 1:
        return {"predictions": next(iter(arrays.values()))}
    rows = len(next(iter(arrays.values())))
    return {"predictions": [{k: v[i] for k, v in arrays.items()} for i in range(rows)]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="TF Serving-style predict from a SavedModel")
    parser.add_argument("base", help="model base path (TF Serving layout)")
    parser.add_argument("model", help="model name")
    parser.add_argument("--version", type=int, default=None, help="default: the newest")
    parser.add_argument("--request", default=None, help="JSON body; default: the sample request")
    args = parser.parse_args(argv)
    path = version_dir(args.base, args.model, args.version)
    if args.request:
        with open(args.request) as fh:
            request = json.load(fh)
    else:
        request = sample_request(path)
    json.dump(predict(path, request), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
