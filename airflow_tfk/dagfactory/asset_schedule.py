"""``schedule:`` on assets in a training file: retrain on new data, publish on a new model.

```yaml
schedule: [{data: {claim: tfk-data, path: digits}}]          # a list: all of them
schedule:
  any:                                                        # a condition: any / all, nested
    - {model: {model_name: digits, claim: tfk-models}}
    - x-tfk-pvc://tfk-data/digits                             # a URI: an asset another DAG declares
    - {all: [{data: {claim: tfk-data, path: a}}, {data: {claim: tfk-data, path: b}}]}
```

An asset written as ``data``/``model``/``serving`` is built by :mod:`airflow_tfk._airflow.assets`,
so it is the very asset a training or publish of this provider declares; a string is a
reference to an asset by URI (``://`` in it) or by name, declared elsewhere. The file's
value is checked here as data (bounded size and depth, each error naming its path) and
kept as plain data; :func:`airflow_schedule` builds Airflow's objects from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_tfk.core.errors import SpecError, unknown_key
from airflow_tfk.core.printable import control_character

MAX_DEPTH = 6
MAX_ASSETS = 64
_KINDS = {
    "data": ("claim", "path", "base_path", "namespace"),
    "model": ("model_name", "claim", "sub_path", "base_path", "namespace"),
    "serving": ("model_name", "namespace", "backend"),
}
_CONDITIONS = ("any", "all")


def parse_asset_schedule(value: object) -> dict[str, Any]:
    """The schedule as ``{"all"|"any": [...]}`` with every asset checked (by building it:
    the asset functions' own errors, prefixed with where it stands)."""
    count = [0]
    if isinstance(value, list):
        value = {"all": value}
    return _node(value, "schedule", 0, count)


def _node(value: object, where: str, depth: int, count: list[int]) -> Any:
    if depth > MAX_DEPTH:
        raise SpecError(where, f"nests conditions deeper than {MAX_DEPTH}")
    if isinstance(value, str):
        count[0] += 1
        _check_count(where, count)
        return _reference(value, where)
    if not isinstance(value, Mapping) or len(value) != 1:
        raise SpecError(
            where,
            "must be an asset (a URI or name; {data: ...}, {model: ...}, {serving: ...}) "
            "or one condition ({any: [...]} or {all: [...]})",
            value,
        )
    ((key, body),) = value.items()
    if key in _CONDITIONS:
        if not isinstance(body, list) or not body:
            raise SpecError(f"{where}.{key}", "must be a non-empty list of assets or conditions", body)
        return {key: [_node(item, f"{where}.{key}[{i}]", depth + 1, count) for i, item in enumerate(body)]}
    if key in _KINDS:
        count[0] += 1
        _check_count(where, count)
        if not isinstance(body, Mapping):
            raise SpecError(f"{where}.{key}", f"must be a mapping of {', '.join(_KINDS[key])}", body)
        unknown = sorted(str(k) for k in set(body) - set(_KINDS[key]))
        if unknown:
            raise SpecError(f"{where}.{key}.{unknown[0]}", unknown_key(unknown[0], _KINDS[key]))
        try:
            _asset({key: dict(body)})
        except SpecError as exc:
            field = exc.field.split(".", 1)[-1]
            raise SpecError(f"{where}.{key}.{field}", exc.rule, exc.value) from None
        except (TypeError, ValueError) as exc:
            raise SpecError(f"{where}.{key}", str(exc), body) from None
        return {key: dict(body)}
    raise SpecError(f"{where}.{key}", unknown_key(key, (*_CONDITIONS, *_KINDS)))


def _reference(value: str, where: str) -> str:
    """An asset named by URI or name: one printable line, as the UI and the logs show it
    and as another DAG names the same asset."""
    if not value.strip() or len(value) > 1500:
        raise SpecError(where, "must be an asset's URI or name (1 to 1500 characters)", value)
    bad = control_character(value)
    if bad is not None:
        raise SpecError(where, f"must not contain the control character {bad!r}", value)
    return value


def _check_count(where: str, count: list[int]) -> None:
    if count[0] > MAX_ASSETS:
        raise SpecError(where, f"names more than {MAX_ASSETS} assets")


def _asset(node: Mapping[str, Any]) -> Any:
    from airflow_tfk._airflow.assets import data_asset, model_asset, serving_asset

    ((kind, body),) = node.items()
    if kind == "data":
        return data_asset(**body)
    if kind == "model":
        if "model_name" not in body:
            raise SpecError("model.model_name", "is required")
        return model_asset(**body)
    if "model_name" not in body:
        raise SpecError("serving.model_name", "is required")
    return serving_asset(**body)


def airflow_schedule(node: Any) -> Any:
    """Airflow's asset expression of a parsed schedule."""
    from airflow.sdk import Asset, AssetAll, AssetAny

    if isinstance(node, str):
        return Asset.ref(uri=node) if "://" in node else Asset.ref(name=node)
    ((key, body),) = node.items()
    if key == "any":
        return AssetAny(*(airflow_schedule(item) for item in body))
    if key == "all":
        return AssetAll(*(airflow_schedule(item) for item in body))
    return _asset(node)
