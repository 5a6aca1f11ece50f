"""What the asset events of a finished training or publish say (their ``extra``).

Airflow emits one event per outlet when the task succeeds; the task only fills the
event's ``extra`` through ``context["outlet_events"]``. A model event says which version
the training exported, its metrics and the run; a serving event says which version
serves, where, and what served before. Consumers (a DAG scheduled on the asset, the UI)
read it from ``triggering_asset_events``. Only JSON values go in: the extra is stored in
Airflow's database.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from airflow_tfk._airflow.assets import MODEL_GROUP, SERVING_GROUP


def run_of(context: Mapping[str, Any]) -> dict[str, Any]:
    """The task instance that produced an event (dag, run, task, map index, try)."""
    ti = context.get("ti") or context.get("task_instance")
    out: dict[str, Any] = {}
    for key in ("dag_id", "run_id", "task_id", "map_index", "try_number"):
        value = getattr(ti, key, None)
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            out[key] = value
    return out


def json_value(value: Any) -> Any:
    """``value`` as JSON data: non-finite numbers (a diverged loss) become text."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def training_extra(result: Mapping[str, Any], run: Mapping[str, Any]) -> dict[str, Any]:
    """The model event of a training's XCom result."""
    found = result.get("export")
    export: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    extra = {
        "model_name": export.get("model_name"),
        "version": export.get("version"),
        "path": export.get("path"),
        "metrics": result.get("metrics") or {},
        "eval_metrics": result.get("eval_metrics") or {},
        "cluster": result.get("name"),
        "run": dict(run),
        # what the training held (and cost, when priced): its total, not per role
        "usage": usage_total(result.get("usage")),
    }
    return json_value({k: v for k, v in extra.items() if v is not None})


def usage_total(usage: Any) -> dict[str, Any] | None:
    """The total of a training's XCom ``usage``, with its cost and currency when priced."""
    if not isinstance(usage, Mapping) or not isinstance(usage.get("total"), Mapping):
        return None
    out = dict(usage["total"])
    for key in ("cost", "currency"):
        if key in usage:
            out[key] = usage[key]
    return out


def publish_extra(result: Mapping[str, Any], run: Mapping[str, Any]) -> dict[str, Any]:
    """The serving event of a publish's XCom result."""
    extra = {
        "model_name": result.get("model_name"),
        "version": result.get("version"),
        "previous_version": result.get("previous_version"),
        "endpoint": result.get("endpoint"),
        "backend": result.get("backend"),
        "metrics": result.get("metrics") or {},
        "run": dict(run),
    }
    return json_value({k: v for k, v in extra.items() if v is not None})


def _matching(outlets: Iterable[Any], group: str, model_name: Any) -> list[Any]:
    """The outlets of ``group`` this event is about: the one naming ``model_name`` (its
    static extra), else every one of the group when the model is not named."""
    ours = [a for a in outlets if getattr(a, "group", None) == group and hasattr(a, "uri")]
    named = [a for a in ours if (getattr(a, "extra", None) or {}).get("model_name") == model_name]
    return (
        named
        or [a for a in ours if not (getattr(a, "extra", None) or {}).get("model_name")]
        or (ours if model_name is None else [])
    )


def fill(context: Mapping[str, Any], outlets: Iterable[Any], group: str, extra: dict[str, Any]) -> list[str]:
    """Put ``extra`` on the events of the outlets it is about; the URIs filled. Never fails
    the task: an event without extra is still an event."""
    events = context.get("outlet_events")
    if events is None:
        return []
    json.dumps(extra)  # what Airflow will store; fails here, not in the API call
    filled = []
    for asset in _matching(outlets, group, extra.get("model_name")):
        try:
            events[asset].extra.update(extra)
        except (KeyError, TypeError, AttributeError):
            continue
        filled.append(asset.uri)
    return filled


def record_training(
    context: Mapping[str, Any], outlets: Iterable[Any], result: Mapping[str, Any]
) -> list[str]:
    return fill(context, outlets, MODEL_GROUP, training_extra(result, run_of(context)))


def record_publish(
    context: Mapping[str, Any], outlets: Iterable[Any], result: Mapping[str, Any]
) -> list[str]:
    return fill(context, outlets, SERVING_GROUP, publish_extra(result, run_of(context)))


def triggering_model_event(context: Mapping[str, Any], model_name: str) -> dict[str, Any] | None:
    """The newest model event of ``model_name`` that triggered this run (a DAG scheduled on
    the model asset): its extra, with ``version`` and ``metrics``; None if there is none."""
    events = context.get("triggering_asset_events")
    if not events:
        return None
    found = None
    for asset in list(events):
        for event in events[asset]:
            extra = getattr(event, "extra", None) or {}
            if extra.get("model_name") != model_name or not isinstance(extra.get("version"), int):
                continue
            stamp = str(getattr(event, "timestamp", ""))
            if found is None or stamp >= found[0]:
                found = (stamp, dict(extra))
    return found[1] if found else None
