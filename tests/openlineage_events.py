"""Checks of OpenLineage run events: the RunEvent rules of the OpenLineage spec (written
out here: the Python client does not ship the spec's JSON file) and this provider's own
facet schemas from docs/openlineage/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

ROOT = Path(__file__).resolve().parents[1]
_FACET = {
    "type": "object",
    "required": ["_producer", "_schemaURL"],
    "properties": {
        "_producer": {"type": "string", "format": "uri"},
        "_schemaURL": {"type": "string", "format": "uri"},
    },
}
_FACETS = {"type": "object", "additionalProperties": _FACET}
_DATASET = {
    "type": "object",
    "required": ["namespace", "name"],
    "properties": {
        "namespace": {"type": "string"},
        "name": {"type": "string"},
        "facets": _FACETS,
        "inputFacets": _FACETS,
        "outputFacets": _FACETS,
    },
}
RUN_EVENT: dict[str, Any] = {
    "type": "object",
    "required": ["run", "job", "eventTime", "producer"],
    "properties": {
        "eventType": {"enum": ["START", "COMPLETE", "ABORT", "FAIL", "OTHER"]},
        "eventTime": {"type": "string", "format": "date-time"},
        "producer": {"type": "string", "format": "uri"},
        "run": {
            "type": "object",
            "required": ["runId"],
            "properties": {"runId": {"type": "string", "format": "uuid"}, "facets": _FACETS},
        },
        "job": {
            "type": "object",
            "required": ["namespace", "name"],
            "properties": {"namespace": {"type": "string"}, "name": {"type": "string"}, "facets": _FACETS},
        },
        "inputs": {"type": "array", "items": _DATASET},
        "outputs": {"type": "array", "items": _DATASET},
    },
}
FACET_SCHEMAS = {
    name: json.loads((ROOT / "docs" / "openlineage" / f"{name}.json").read_text())
    for name in ("TfkClusterJobFacet", "TfkModelOutputFacet")
}
_CHECKER = jsonschema.FormatChecker()


def check_event(event: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``event`` is a valid RunEvent whose
    airflow-tfk facets match their published schemas."""
    jsonschema.validate(event, RUN_EVENT, format_checker=_CHECKER)
    facets = [*event["job"].get("facets", {}).values()]
    for dataset in event.get("outputs", []):
        facets += dataset.get("outputFacets", {}).values()
    for facet in facets:
        name = str(facet.get("_schemaURL", "")).rsplit("/", 1)[-1].removesuffix(".json")
        if name in FACET_SCHEMAS:
            jsonschema.validate(facet, FACET_SCHEMAS[name], format_checker=_CHECKER)
