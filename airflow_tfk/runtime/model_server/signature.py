"""Running a serving signature on a request: REST's JSON bodies, and the numpy arrays
the gRPC API decodes from TensorProtos. Shared checks: every input named, values that fit
the signature's dtype (``1e400`` or ``1e39`` for a float32 is a 400, never a NaN/inf
answered with 200)."""

from __future__ import annotations

import json
import math
from typing import Any

from airflow_tfk.runtime.model_server.limits import MAX_DIMS, declared_bytes, list_shape
from airflow_tfk.runtime.model_server.manager import RequestError


def _reject_constant(name: str) -> float:
    raise RequestError(400, f"JSON Parse error: {name} is not a number this server accepts")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise RequestError(400, f"JSON Parse error: {text} is out of the range of a double")
    return value


def loads(raw: bytes) -> Any:
    """Strict JSON: no NaN/Infinity literals, no number that overflows to infinity, no
    nesting deeper than the parser's recursion bound."""
    try:
        return json.loads(raw or b"null", parse_constant=_reject_constant, parse_float=_finite_float)
    except RequestError:
        raise
    except RecursionError:
        # the C parser stops at the interpreter's recursion limit; no tensor is that deep
        raise RequestError(
            400, f"JSON Parse error: nested too deeply (a tensor has at most {MAX_DIMS} dimensions)"
        ) from None
    except ValueError as exc:  # also UnicodeDecodeError
        raise RequestError(400, f"JSON Parse error: {exc}"[:2000]) from None


def input_specs(fn: Any) -> dict[str, Any]:
    _, specs = fn.structured_input_signature
    return dict(specs)


def run_arrays(fn: Any, feeds: dict[str, Any], max_bytes: int = 64 << 20) -> dict[str, Any]:
    """Run ``fn`` on named inputs (lists or numpy arrays); numpy outputs by name. Lists
    whose shape declares more than ``max_bytes`` in the signature's dtypes are refused
    before numpy makes an array of them."""
    import numpy as np
    import tensorflow as tf

    specs = input_specs(fn)
    unknown = sorted(set(feeds) - set(specs))
    if unknown:
        raise RequestError(400, f"unknown inputs {unknown}; the signature takes {sorted(specs)}")
    tensors = {}
    left = max_bytes
    for name, spec in specs.items():
        value = feeds.get(name)
        if value is None or (isinstance(value, list) and None in value):
            raise RequestError(400, f"missing input '{name}'")
        if isinstance(value, list):
            itemsize = max(spec.dtype.size, 8)  # numpy first makes int64/float64 of JSON numbers
            left -= declared_bytes(name, list_shape(value), itemsize, left)
        try:
            array = np.asarray(value)
            if spec.dtype.is_floating or spec.dtype.is_integer:
                with np.errstate(over="raise", invalid="raise"):
                    array = array.astype(spec.dtype.as_numpy_dtype)
                if spec.dtype.is_floating and not np.all(np.isfinite(array)):
                    raise FloatingPointError("non-finite value")
        except FloatingPointError:
            raise RequestError(
                400, f"input '{name}' holds a value that is not a finite {spec.dtype.name}"
            ) from None
        except (TypeError, ValueError, OverflowError) as exc:
            raise RequestError(400, f"input '{name}': {exc}"[:2000]) from None
        tensors[name] = tf.constant(array, dtype=spec.dtype)
    try:
        outputs = fn(**tensors)
    except Exception as exc:  # TF's own errors, shape/dtype mismatches
        raise RequestError(400, f"{type(exc).__name__}: {exc}"[:2000]) from None
    return {k: v.numpy() for k, v in outputs.items()}


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return [_jsonable(x) for x in value]
    return value


def run_signature(fn: Any, body: Any, max_bytes: int = 64 << 20) -> dict[str, Any]:
    """Run a serving signature on a REST predict body (row or columnar format)."""
    if not isinstance(body, dict) or ("instances" in body) == ("inputs" in body):
        raise RequestError(400, "JSON object must have exactly one of 'instances' or 'inputs'")
    names = sorted(input_specs(fn))
    row = "instances" in body
    data = body["instances" if row else "inputs"]
    if row and not (isinstance(data, list) and data):
        raise RequestError(400, "'instances' must be a non-empty list")
    if row and isinstance(data[0], dict):
        if not all(isinstance(r, dict) for r in data):
            raise RequestError(400, "'instances' mixes objects and values")
        feeds = {n: [r.get(n) for r in data] for n in names}
    elif not row and isinstance(data, dict):
        feeds = dict(data)
    elif len(names) == 1:
        feeds = {names[0]: data}
    else:
        raise RequestError(400, f"the signature takes inputs {names}; name them")
    arrays = {k: _jsonable(v.tolist()) for k, v in run_arrays(fn, feeds, max_bytes).items()}
    if not row:
        return {"outputs": next(iter(arrays.values())) if len(arrays) == 1 else arrays}
    if len(arrays) == 1:
        return {"predictions": next(iter(arrays.values()))}
    rows = len(next(iter(arrays.values())))
    return {"predictions": [{k: v[i] for k, v in arrays.items()} for i in range(rows)]}
