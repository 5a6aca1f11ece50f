"""OpenLineage facets of a training and a publish, for the ``openlineage`` provider.

The provider's default extractor calls an operator's ``get_openlineage_facets_on_start``
and ``..._on_complete``; the operators delegate here, so OpenLineage is imported only
when the provider is installed and asks (nothing at parse time, nothing without it).

- inputs and outputs: the operator's inlets and outlets (this provider's assets), as
  OpenLineage datasets: ``x-tfk-pvc://<k8s namespace>`` + ``<claim>/<path>``, ``file`` +
  ``<path>``, ``x-tfk-serving://<where>`` + ``<model>``;
- job facet ``tfkCluster``: the cluster's shape (mode, replicas per role) and image;
- output facet ``tfkModel`` on the model (and serving) dataset: version, metrics, endpoint.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

PRODUCER = "https://github.com/airflow-tfk/airflow-tfk"
_SCHEMA = "https://github.com/airflow-tfk/airflow-tfk/blob/main/docs/openlineage"
CLUSTER_FACET = "tfkCluster"
MODEL_FACET = "tfkModel"


def dataset_name(uri: str) -> tuple[str, str]:
    """OpenLineage's (namespace, name) of one of this provider's asset URIs."""
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme == "file":
        return "file", parts.path
    if parts.scheme == "x-tfk-pvc":
        k8s_namespace = dict(urllib.parse.parse_qsl(parts.query)).get("namespace", "default")
        return f"x-tfk-pvc://{k8s_namespace}", f"{parts.netloc}{parts.path}"
    return f"{parts.scheme}://{parts.netloc}", parts.path.lstrip("/") or parts.netloc


def _facets() -> Any:
    """Facet classes defined against the installed OpenLineage client (its attrs base
    classes carry ``_producer`` and ``_schemaURL``, which the JSON schema requires)."""
    import attrs
    from openlineage.client.facet_v2 import JobFacet, OutputDatasetFacet

    @attrs.define
    class TfkClusterJobFacet(JobFacet):
        mode: str | None = None
        image: str | None = None
        replicas: dict[str, int] = attrs.field(factory=dict)
        images: dict[str, str] = attrs.field(factory=dict)
        namespace: str | None = None
        layout: str | None = None

        @staticmethod
        def _get_schema() -> str:
            return f"{_SCHEMA}/TfkClusterJobFacet.json"

    @attrs.define
    class TfkModelOutputFacet(OutputDatasetFacet):
        model_name: str | None = None
        version: int | None = None
        metrics: dict[str, Any] = attrs.field(factory=dict)
        eval_metrics: dict[str, Any] = attrs.field(factory=dict)
        endpoint: str | None = None
        previous_version: int | None = None
        usage: dict[str, Any] | None = None

        @staticmethod
        def _get_schema() -> str:
            return f"{_SCHEMA}/TfkModelOutputFacet.json"

    return TfkClusterJobFacet, TfkModelOutputFacet


def _datasets(assets: Iterable[Any], kind: str, facets: Mapping[str, Any] | None = None) -> list[Any]:
    from airflow.providers.common.compat.openlineage.facet import InputDataset, OutputDataset

    out: list[Any] = []
    for asset in assets:
        uri = getattr(asset, "uri", None)
        if not isinstance(uri, str):
            continue
        namespace, name = dataset_name(uri)
        if kind == "input":
            out.append(InputDataset(namespace=namespace, name=name))
        else:
            out.append(OutputDataset(namespace=namespace, name=name, outputFacets=dict(facets or {})))
    return out


def cluster_shape(cluster_spec: Any) -> dict[str, Any]:
    """Mode, image(s), replicas per role, namespace and layout of a (rendered) spec; what
    cannot be read (a spec still templated, YAML text) is left out."""
    fields = cluster_spec.to_dict() if hasattr(cluster_spec, "to_dict") else cluster_spec
    if isinstance(fields, str):
        from airflow_tfk.spec.yaml_reader import load_yaml_mapping

        try:
            fields = load_yaml_mapping(fields)
        except Exception:  # lineage never fails a task
            return {}
    if not isinstance(fields, Mapping):
        return {}
    replicas: dict[str, int] = {}
    images: dict[str, str] = {}
    for role in ("chief", "ps", "worker", "evaluator"):
        block = fields.get(role)
        if not isinstance(block, Mapping):
            continue
        count = block.get("replicas", 1)
        if isinstance(count, int) and not isinstance(count, bool) and 0 <= count <= _MAX_REPLICAS:
            replicas[role] = count
        image = _short(block.get("image"))
        if image is not None:
            images[role] = image
    shape = {
        "mode": _short(fields.get("mode")),
        "image": _short(fields.get("image")),
        "replicas": replicas,
        "images": images,
        "namespace": _short(fields.get("namespace")),
        "layout": _short(fields.get("layout")),
    }
    return {k: v for k, v in shape.items() if v is not None}


# The facet is read before the task has validated its spec (on start): only what a valid
# spec could hold is reported, so a templated or hostile value never reaches the lineage
# backend as a nested object or megabytes of text.
_MAX_TEXT = 512
_MAX_REPLICAS = 100_000


def _short(value: Any) -> str | None:
    return value if isinstance(value, str) and len(value) <= _MAX_TEXT else None


def training_lineage(operator: Any, result: Mapping[str, Any] | None) -> Any:
    """The OperatorLineage of a training task (``result``: its XCom, None at start)."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    from airflow_tfk._airflow.asset_events import usage_total

    cluster_facet, model_facet = _facets()
    facets = {}
    if result is not None:
        found = result.get("export")
        export: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        facets[MODEL_FACET] = model_facet(
            model_name=export.get("model_name"),
            version=export.get("version"),
            metrics=_plain(result.get("metrics")),
            eval_metrics=_plain(result.get("eval_metrics")),
            usage=usage_total(result.get("usage")),
        )
    return OperatorLineage(
        inputs=_datasets(operator.inlets, "input"),
        outputs=_datasets(operator.outlets, "output", facets),
        job_facets={CLUSTER_FACET: cluster_facet(**cluster_shape(operator.cluster_spec))},
    )


def publish_lineage(operator: Any, result: Mapping[str, Any] | None) -> Any:
    """The OperatorLineage of a publish task (``result``: its XCom, None at start)."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    _, model_facet = _facets()
    facets = {}
    if result is not None:
        facets[MODEL_FACET] = model_facet(
            model_name=result.get("model_name"),
            version=result.get("version"),
            metrics=_plain(result.get("metrics")),
            endpoint=result.get("endpoint"),
            previous_version=result.get("previous_version"),
        )
    return OperatorLineage(
        inputs=_datasets(operator.inlets, "input"),
        outputs=_datasets(operator.outlets, "output", facets),
    )


def _plain(value: Any) -> dict[str, Any]:
    from airflow_tfk._airflow.asset_events import json_value

    return json_value(dict(value)) if isinstance(value, Mapping) else {}
