"""What a training reads and produces, and what a publish serves, as Airflow Assets.

One function per kind of asset, so the DAG that produces an asset and the DAG scheduled
on it build the same name and URI from the same words (a claim, a path, a model name):

- data: ``x-tfk-pvc://<claim>/<path>?namespace=<ns>`` (a PersistentVolumeClaim; the
  namespace defaults to the deployment's), or ``file:///<path>`` for a local directory;
  group ``dataset``;
- model: the model's directory in the model store (``<claim>/<sub_path>/<model>``, or
  ``<base_path>/<model>``: TF Serving's layout, versions below it); group ``model``;
- serving: ``x-tfk-serving://<namespace>/<model>`` (``local`` for the local backend's
  model server); group ``serving``.

The ``x-`` prefix is Airflow's convention for a scheme no provider normalises: the URI is
kept as written. An asset's name is its URI (what Airflow uses when only a URI is given),
so two DAGs that build it independently agree. Building an Asset is pure: no provider
lookup, no I/O; DAG files call these at parse time.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_tfk.core.constants import BackendKind
from airflow_tfk.core.errors import SpecError
from airflow_tfk.spec.operator_options import holds_jinja

if TYPE_CHECKING:
    from airflow.sdk import Asset

PVC_SCHEME = "x-tfk-pvc"
SERVING_SCHEME = "x-tfk-serving"
DATA_GROUP = "dataset"
MODEL_GROUP = "model"
SERVING_GROUP = "serving"
# The runtime's flag that names the exported model (``<export_dir>/<model_name>/<version>``).
MODEL_NAME_FLAG = "--tfk_model_name"
_SEGMENT = re.compile(r"[A-Za-z0-9._-]+")


def _path(value: object, field: str) -> str:
    """A relative path of plain segments: it becomes part of a URI, so no '..', no
    query or fragment characters, nothing that would make two spellings of one place."""
    if value in (None, ""):
        return ""
    if not isinstance(value, str):
        raise SpecError(field, "must be a path (text)", value)
    parts = [p for p in value.strip("/").split("/") if p not in ("", ".")]
    for part in parts:
        if part == ".." or not _SEGMENT.fullmatch(part):
            raise SpecError(field, "must be a path of letters, digits, '.', '_' and '-' segments", value)
    return "/".join(parts)


def _name(value: object, field: str) -> str:
    if not isinstance(value, str) or not _SEGMENT.fullmatch(value) or value in (".", ".."):
        raise SpecError(field, "must be a name of letters, digits, '.', '_' and '-'", value)
    return value


def _absolute(value: object, field: str) -> str:
    from airflow_tfk.spec.checks import path_text

    return posixpath.normpath(path_text(value, field, kind="absolute"))


def _location(claim: str | None, path: str, base_path: str | None, namespace: str | None, what: str) -> str:
    if (claim is None) == (base_path is None):
        raise SpecError(f"{what}.claim", "give exactly one of claim (a PVC) or base_path (a local directory)")
    if base_path is not None:
        joined = posixpath.join(_absolute(base_path, f"{what}.base_path"), path)
        return f"file://{joined.rstrip('/') or '/'}"
    uri = f"{PVC_SCHEME}://{_name(claim, f'{what}.claim')}/{path}".rstrip("/")
    return f"{uri}?namespace={_namespace(namespace, what)}"


def _namespace(value: str | None, what: str) -> str:
    """A claim's namespace; unsaid, the deployment's (``TFK_NAMESPACE``), as for clusters:
    the producer and the consumer of an asset agree without both spelling it."""
    from airflow_tfk.dag_env import NAMESPACE

    return _name(value or NAMESPACE, f"{what}.namespace")


def _asset(uri: str, group: str, extra: dict[str, Any]) -> Asset:
    from airflow.sdk import Asset

    return Asset(name=uri, uri=uri, group=group, extra=extra)


def data_asset(
    claim: str | None = None,
    path: str = "",
    *,
    base_path: str | None = None,
    namespace: str | None = None,
) -> Asset:
    """The training data at ``path`` of ``claim`` (or under the local ``base_path``)."""
    rel = _path(path, "data.path")
    return _asset(_location(claim, rel, base_path, namespace, "data"), DATA_GROUP, {})


def model_asset(
    model_name: str,
    *,
    claim: str | None = None,
    sub_path: str = "",
    base_path: str | None = None,
    namespace: str | None = None,
) -> Asset:
    """The model store's directory of ``model_name``: every version a training exports
    lands below it, so one asset stands for the model and each event says which version."""
    name = _name(model_name, "model.model_name")
    rel = posixpath.join(_path(sub_path, "model.sub_path"), name)
    uri = _location(claim, rel, base_path, namespace, "model")
    return _asset(uri, MODEL_GROUP, {"model_name": name})


def serving_asset(model_name: str, *, namespace: str | None = None, backend: str = "kubernetes") -> Asset:
    """The model as clients reach it: its TF Serving in ``namespace`` on Kubernetes, or
    the local backend's model server."""
    from airflow_tfk.core.constants import BACKEND_KINDS

    name = _name(model_name, "serving.model_name")
    if backend not in BACKEND_KINDS:
        raise SpecError("serving.backend", f"must be one of {', '.join(BACKEND_KINDS)}", backend)
    where = "local" if backend == BackendKind.LOCAL else _namespace(namespace, "serving")
    return _asset(f"{SERVING_SCHEME}://{where}/{name}", SERVING_GROUP, {"model_name": name})


# -- what an operator's arguments say about its assets --------------------------------------


def model_name_of_args(args: object) -> str | None:
    """The model name a training's ``args`` pass to the runtime (``--tfk_model_name X``
    or ``--tfk_model_name=X``), if written literally."""
    if not isinstance(args, (list, tuple)):
        return None
    for i, arg in enumerate(args):
        if not isinstance(arg, str):
            continue
        if arg == MODEL_NAME_FLAG and i + 1 < len(args) and isinstance(args[i + 1], str):
            value = args[i + 1]
        elif arg.startswith(MODEL_NAME_FLAG + "="):
            value = arg.split("=", 1)[1]
        else:
            continue
        return None if holds_jinja(value) or not _SEGMENT.fullmatch(value) else value
    return None


def _claim(storage: object, volume: str) -> str | None:
    if isinstance(storage, Mapping) and isinstance(storage.get(volume), Mapping):
        claim = storage[volume].get("claim")
        return claim if isinstance(claim, str) and not holds_jinja(claim) else None
    return None


def training_assets(cluster_spec: object) -> tuple[list[Asset], list[Asset]]:
    """Inlets and outlets a training's cluster spec says literally: the data claim (its
    root: which directory of it the app reads is the app's business) as inlet, and the
    model (``--tfk_model_name``) in the models claim as outlet. A templated or unsaid part
    leaves that asset out; ``inlets``/``outlets`` given to the operator say it instead."""
    if not isinstance(cluster_spec, Mapping):
        fields = getattr(cluster_spec, "to_dict", None)
        if not callable(fields):
            return [], []
        cluster_spec = fields()
        if not isinstance(cluster_spec, Mapping):
            return [], []
    storage = cluster_spec.get("storage")
    namespace = cluster_spec.get("namespace")
    namespace = namespace if isinstance(namespace, str) and _SEGMENT.fullmatch(namespace) else None
    inlets: list[Asset] = []
    outlets: list[Asset] = []
    data = _claim(storage, "data")
    if data is not None:
        inlets.append(data_asset(data, namespace=namespace))
    models = _claim(storage, "models")
    model = model_name_of_args(cluster_spec.get("args"))
    if models is not None and model is not None:
        outlets.append(model_asset(model, claim=models, namespace=namespace))
    return inlets, outlets


def publish_assets(
    model_name: object, claim: object, sub_path: object, base_path: object, serving: object, backend: object
) -> tuple[list[Asset], list[Asset]]:
    """A publish reads the model from the store and produces the serving model."""
    if not isinstance(model_name, str) or holds_jinja(
        [model_name, claim, sub_path, base_path, serving, backend]
    ):
        return [], []
    namespace = serving.get("namespace") if isinstance(serving, Mapping) else None
    namespace = namespace if isinstance(namespace, str) else None
    try:
        inlets = []
        if claim is not None or base_path is not None:
            inlets.append(
                model_asset(
                    model_name,
                    claim=claim if isinstance(claim, str) else None,
                    sub_path=sub_path if isinstance(sub_path, str) else "",
                    base_path=base_path if isinstance(base_path, str) else None,
                    namespace=namespace if base_path is None else None,
                )
            )
        return inlets, [serving_asset(model_name, namespace=namespace, backend=str(backend))]
    except SpecError:
        return [], []  # the operator's own checks name the field
