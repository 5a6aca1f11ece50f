"""The SavedModel export in TF Serving's ``<base>/<model>/<int version>/`` layout.

Written to a temporary sibling and renamed, so TF Serving never sees a half-written
version; the sample request, its warm-up record (:mod:`.warmup`) and the metrics go to
``assets.extra/`` next to it.

Versions are small integers, and the published ones only increase: an export without
``--tfk_model_version`` takes one more than the newest published version in the model's
directory at the moment it is published, and the rename is the claim. Two writers that
pick the same number (concurrent sweep trials, a training beside a sweep) cannot both win
it: the loser takes the next one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

from airflow_tfk.protocol.digits import MAX_VERSION, model_version
from airflow_tfk.runtime import progress as _progress
from airflow_tfk.runtime import warmup as _warmup
from airflow_tfk.runtime.exits import UsageError, log

SAMPLE_REQUEST = "tfk_sample_request.json"
METRICS_FILE = "tfk_metrics.json"
#: what wrote the export: ``{"tensorflow": "2.21.0"}`` (the publish refuses an older server)
EXPORT_INFO_FILE = "tfk_export.json"


def version_of(name: str) -> int | None:
    """The version a directory name stands for, or None.

    Only plain ASCII digits count, as for TF Serving (:mod:`airflow_tfk.protocol.digits`).
    """
    return model_version(name)


def next_version(model_dir: str) -> int:
    """One more than the newest published version under ``model_dir`` (1 if none): a
    failed or pruned run's export was set aside (``.failed-<N>-<uid>``) with its number,
    so the run that replaces it takes that number again instead of building on it."""
    try:
        names = os.listdir(model_dir)
    except FileNotFoundError:
        names = []
    versions = [v for v in map(version_of, names) if v is not None]
    newest = max(versions, default=0)
    if newest >= MAX_VERSION:
        raise ValueError(f"{model_dir} holds version {newest}, int64's maximum: there is no next version")
    return newest + 1


#: how many times a version another writer claimed first is skipped before giving up
CLAIM_ATTEMPTS = 100


def publish_version(tmp: str, model_dir: str, version: int | None) -> tuple[int, str]:
    """Rename the finished ``tmp`` to its version directory: ``version``, or the next free
    one. The rename is atomic, and fails when another writer's version of that number is
    there (a non-empty directory), so no two exports ever share a version."""
    for _ in range(CLAIM_ATTEMPTS):
        number = version if version is not None else next_version(model_dir)
        final = os.path.join(model_dir, str(number))
        try:
            os.rename(tmp, final)
        except OSError as exc:
            if not os.path.isdir(final):
                raise
            if version is not None:
                raise UsageError(f"export: {final} already exists") from exc
            continue  # another writer published this number first: take the next
        return number, final
    raise UsageError(f"export: {CLAIM_ATTEMPTS} versions under {model_dir} were claimed first; giving up")


def write_saved_model(model: Any, serving_fn: Callable[..., Any], signature: list[Any], path: str) -> None:
    import tensorflow as tf

    try:
        from keras.export import ExportArchive
    except ImportError:  # pragma: no cover - Keras 2
        ExportArchive = None
    if ExportArchive is not None:
        archive = ExportArchive()
        archive.track(model)
        archive.add_endpoint(name="serving_default", fn=serving_fn, input_signature=signature)
        archive.write_out(path, verbose=False)
    else:  # pragma: no cover
        fn = tf.function(serving_fn, input_signature=signature)
        tf.saved_model.save(model, path, signatures={"serving_default": fn})


def export_model(
    model: Any,
    *,
    base: str | None,
    name: str,
    version: int | None,
    signature: list[Any],
    serve: Callable[[Any, Any], Mapping[str, Any]],
    sample: Any = None,
    metrics: Mapping[str, Any] | None = None,
) -> str | None:
    """Write ``model`` as ``<base>/<name>/<version>/``; returns that directory (None when
    there is no export base). Prints an ``export`` event line for the provider."""
    import numpy as np
    import tensorflow as tf

    if not base:
        log("no export: neither --tfk_export_dir nor TFK_MODEL_DIR is set")
        return None
    model_dir = os.path.join(base, name)
    os.makedirs(model_dir, exist_ok=True)
    chosen = version or None  # 0 or None: the next free version
    if chosen is not None and os.path.exists(os.path.join(model_dir, str(chosen))):
        raise UsageError(f"export: {os.path.join(model_dir, str(chosen))} already exists")
    tmp = tempfile.mkdtemp(prefix=".tmp-export-", dir=model_dir)
    try:

        def serving_fn(inputs: Any) -> Mapping[str, Any]:
            return serve(model, inputs)

        write_saved_model(model, serving_fn, signature, tmp)
        extra = os.path.join(tmp, "assets.extra")
        os.makedirs(extra, exist_ok=True)
        with open(os.path.join(extra, EXPORT_INFO_FILE), "w") as f:
            json.dump({"tensorflow": tf.__version__}, f)
        if sample is not None:
            sample = np.asarray(sample)
            with open(os.path.join(extra, SAMPLE_REQUEST), "w") as f:
                json.dump({"instances": sample.tolist()}, f)
            # smoke test: the exported signature answers the sample request
            loaded = tf.saved_model.load(tmp)
            fn = loaded.signatures["serving_default"]
            out = fn(tf.constant(sample))
            if not out:
                raise RuntimeError("export: serving_default returned nothing")
            # the model server replays it before it reports the version available
            names = _warmup.signature_inputs(fn)
            if len(names) == 1:
                _warmup.write(extra, name, {names[0]: sample})
        if metrics:
            with open(os.path.join(extra, METRICS_FILE), "w") as f:
                json.dump(dict(metrics), f, default=str)
        version, final = publish_version(tmp, model_dir, chosen)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print(_progress.event_line("export", path=final, model_name=name, version=version), flush=True)
    return final
