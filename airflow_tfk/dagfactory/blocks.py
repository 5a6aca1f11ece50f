"""The blocks of a training file that configure an operator or a backend (``publish``,
``tensorboard``, ``backend_config``): each accepts exactly the keyword arguments of the class
it configures, read from its signature, so an option added there passes straight through."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from airflow_tfk import dag_env
from airflow_tfk.core.constants import BackendKind
from airflow_tfk.core.errors import SpecError, unknown_key
from airflow_tfk.dagfactory.params import param_refs

# Keys of the operators' __init__ that the training file sets itself.
_MANAGED = frozenset({"backend", "backend_config", "kubernetes_conn_id", "task_id", "action", "kwargs"})


@functools.cache
def _keywords(operator: type) -> frozenset[str]:
    """The keyword-only parameters of an operator's ``__init__`` the file may set."""
    import inspect

    return (
        frozenset(
            name
            for name, p in inspect.signature(operator).parameters.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY
        )
        - _MANAGED
    )


def _operator_options(value: object, key: str, operator: type, *, true_means: dict[str, Any]) -> dict | None:
    """The keyword arguments of one operator block; unknown keys are errors."""

    if value is None or value is False:
        return None
    if value is True:
        return dict(true_means)
    if not isinstance(value, Mapping):
        raise SpecError(key, "must be true, false or a mapping of the operator's options", value)
    accepted = _keywords(operator)
    unknown = sorted(set(value) - accepted)
    if unknown:
        raise SpecError(f"{key}.{unknown[0]}", unknown_key(unknown[0], sorted(accepted)))
    if "base_path" in value:  # a local directory instead of the cluster's claim
        return dict(value)
    return {**true_means, **dict(value)}


def backend_config(data: Mapping[str, Any], backend: str) -> dict[str, Any] | None:
    """``backend_config``: only the options of the chosen backend (a typo is not ignored)."""
    import inspect

    config = data.get("backend_config")
    if config is not None and not isinstance(config, Mapping):
        raise SpecError("backend_config", "must be a mapping", config)
    if not config:
        return None if config is None else dict(config)
    if backend == BackendKind.KUBERNETES:
        from airflow_tfk.backends.kubernetes.backend import KubernetesBackend as cls
    else:
        from airflow_tfk.backends.local.backend import LocalBackend as cls  # type: ignore[assignment]
    allowed = set(inspect.signature(cls).parameters)
    unknown = sorted(str(k) for k in set(config) - allowed)
    if unknown:
        raise SpecError(
            f"backend_config.{unknown[0]}",
            unknown_key(unknown[0], sorted(allowed), f"unknown option of the {backend} backend"),
        )
    return dict(config)


def _with_namespace(options: object, where: str) -> dict[str, Any]:
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise SpecError(where, "must be a mapping", options)
    return {"namespace": dag_env.NAMESPACE, **options}


def _claim_of(cluster: Mapping[str, Any], volume: str) -> str | None:
    storage = cluster.get("storage")
    if isinstance(storage, Mapping) and isinstance(storage.get(volume), Mapping):
        claim = storage[volume].get("claim")
        return claim if isinstance(claim, str) else None
    return None


def operator_blocks(
    data: Mapping[str, Any], params: Mapping[str, Mapping[str, Any]], cluster: dict[str, Any]
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The publish and tensorboard blocks, against their operators' signatures."""
    from airflow_tfk.operators.serving import TFPublishModelOperator
    from airflow_tfk.operators.tensorboard import TFStartTensorBoardOperator

    for block in ("publish", "tensorboard", "backend_config", "sweep"):
        for where, name in param_refs(data.get(block), block):
            if name not in params:
                raise SpecError(where, f"refers to params.{name}, which is not declared under params")
    publish = _operator_options(
        data.get("publish"),
        "publish",
        TFPublishModelOperator,
        true_means={"claim": _claim_of(cluster, "models")} if _claim_of(cluster, "models") else {},
    )
    if publish is not None and "model_name" not in publish:
        raise SpecError("publish.model_name", "is required: the model's name in TF Serving")
    tensorboard = _operator_options(
        data.get("tensorboard"),
        "tensorboard",
        TFStartTensorBoardOperator,
        true_means={"claim": _claim_of(cluster, "logs")} if _claim_of(cluster, "logs") else {},
    )
    if tensorboard is not None and not (tensorboard.get("claim") or tensorboard.get("base_path")):
        raise SpecError("tensorboard.claim", "is required (or give cluster.storage.logs.claim, or base_path)")
    # Like the example DAGs, a file that names no namespace uses the deployment's ($TFK_NAMESPACE).
    if publish is not None:
        publish["serving"] = _with_namespace(publish.get("serving"), "publish.serving")
    if tensorboard is not None:
        tensorboard["tensorboard"] = _with_namespace(
            tensorboard.get("tensorboard"), "tensorboard.tensorboard"
        )
    return publish, tensorboard
