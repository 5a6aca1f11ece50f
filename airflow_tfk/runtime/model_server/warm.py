"""Replay a version's warm-up records before it is reported available (TF Serving's
"SavedModel Warmup"): ``assets.extra/tf_serving_warmup_requests``, a TFRecord file of
``PredictionLog`` messages (:mod:`airflow_tfk.runtime.warmup` writes it at export).

As in TF Serving, at most :data:`~airflow_tfk.runtime.warmup.MAX_RECORDS` records are
replayed, only predict requests are accepted, and a record that fails fails the load:
a version whose own warm-up request fails would fail its clients too.
"""

from __future__ import annotations

import os
from typing import Any

from airflow_tfk.runtime.warmup import MAX_RECORDS, WARMUP_FILE

#: the largest warm-up file replayed (TF Serving sets none; this server bounds what it reads)
MAX_WARMUP_BYTES = 64 << 20


def replay(version_dir: str, fn: Any, max_request_bytes: int = 64 << 20) -> int:
    """Run ``fn`` (the loaded ``serving_default``) on each warm-up request of the version
    in ``version_dir``; returns how many ran (0: the export has none). Raises
    ``ValueError`` naming the record that could not be replayed."""
    path = os.path.join(version_dir, "assets.extra", WARMUP_FILE)
    if not os.path.isfile(path):
        return 0
    size = os.path.getsize(path)
    if size > MAX_WARMUP_BYTES:
        raise ValueError(f"{WARMUP_FILE} is {size} bytes; this server replays at most {MAX_WARMUP_BYTES}")
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    from airflow_tfk.runtime.model_server.signature import run_arrays

    count = 0
    for raw in tf.data.TFRecordDataset(path).take(MAX_RECORDS):
        count += 1
        try:
            record = prediction_log_pb2.PredictionLog.FromString(raw.numpy())
            kind = record.WhichOneof("log_type")
            if kind != "predict_log":
                raise ValueError(f"a {kind or 'empty'} record; only predict requests are replayed")
            feeds = {k: tf.make_ndarray(v) for k, v in record.predict_log.request.inputs.items()}
            run_arrays(fn, feeds, max_request_bytes)
        except Exception as exc:
            raise ValueError(f"{WARMUP_FILE} record {count}: {exc}"[:2000]) from None
    return count
