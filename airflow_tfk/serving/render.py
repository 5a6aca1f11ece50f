"""Render TF Serving objects from ``templates/serving/``. A leaf module (Jinja2 and YAML
load on first use), with the training templates' rules: a sandbox, ``StrictUndefined``, and
values printed only through ``tojson``.
"""

from __future__ import annotations

import dataclasses
import math
import posixpath
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow_tfk.core import naming
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.protocol.model_config import STABLE_LABEL
from airflow_tfk.render.templating import (
    RenderError,
    k8s_escape,
    template_dirs,
    template_environment,
    yaml_loader,
)
from airflow_tfk.serving.files import DIGEST_SCRIPT, MAX_ENTRIES, MAX_LISTING_BYTES, MAX_STORE_JSON, PARTS
from airflow_tfk.serving.replicas import disruption_budget
from airflow_tfk.serving.scaling import Autoscaling, HTTPRouteSpec, IngressSpec, ParentRef
from airflow_tfk.serving.spec import (
    CONFIG_FILE,
    MODELS_MOUNT,
    PUBLISHED_METRICS,
    ServingSpec,
    TensorBoardSpec,
    batching_text,
    monitoring_text,
)

LABEL_SERVING = f"{naming.LABEL_PREFIX}/serving"
LABEL_MODEL = f"{naming.LABEL_PREFIX}/model"
CONFIG_MOUNT = "/etc/tfk"  # as in images/serving
MONITORING_FILE = "monitoring.config"
BATCHING_FILE = "batching.config"
# Prints "tfk-versions: 1 2 3", "tfk-version: 3", the digest of that version's files
# ("tfk-files:", taken before its metrics and sample are read, so a swap between them is a
# change the publish sees), its metrics ("tfk-metrics:") and what exported it ("tfk-export:"),
# the sample request after "tfk-sample:", and last "tfk-end": a log
# without it was read before the container runtime had written all of it.
# Arguments: the model's directory, the version (empty: the newest), then the digest's
# bounds and parts (airflow_tfk.serving.files), then the largest metrics or sample file read.
READER_SCRIPT = (
    DIGEST_SCRIPT
    + r"""set -eu
# No model directory yet: no versions (a version the publish names is then not there,
# which its digest and the server's load both say).
if ! cd "$1" 2>/dev/null; then echo "tfk-versions:"; echo "tfk-end"; exit 0; fi
base=$(pwd -P)
vs=""
# A version is a name of digits TF Serving numbers (an int64; protocol.digits.model_version):
# a name past it is no version, and never the newest.
for d in */; do
  d="${d%/}"
  case "$d" in *[!0-9]*|""|???????????????????????????????*) continue ;; esac
  n="${d#"${d%%[!0]*}"}"
  case "$n" in
    ????????????????????*) continue ;;
    ???????????????????)
      m=$(printf '%s\n' "$n" 9223372036854775807 | LC_ALL=C sort | head -n 1)
      [ "$m" = "$n" ] || continue ;;
  esac
  if [ -f "$d/saved_model.pb" ]; then vs="$vs $d"; fi
done
echo "tfk-versions:$vs"
v="$2"
if [ -z "$v" ]; then v=$(for x in $vs; do echo "$x"; done | sort -n | tail -n 1); fi
[ -n "$v" ] || { echo "tfk-end"; exit 0; }
echo "tfk-version: $v"
tfk_files "$v" "$3" "$4" "$5"
# A metrics file or sample over $6 bytes is not printed (as on the local backend, it is
# then missing), and no more than that is copied if it grows meanwhile: the log stays
# small whatever a training wrote.
# Nor is one that resolves outside the model's directory (a link to a credentials file or
# /proc/self/environ, a version directory linked elsewhere): the local backend reads
# neither, and the log must not show another file as the model's.
max_json="$6"
inside() { r=$(readlink -f "$1" 2>/dev/null) && case "$r" in "$base"/*) true ;; *) false ;; esac; }
small() { inside "$1" && [ -f "$1" ] && [ "$(wc -c < "$1")" -le "$max_json" ]; }
m="$v/assets.extra/tfk_metrics.json"
if small "$m"; then printf 'tfk-metrics: '; head -c "$max_json" "$m" | tr -d '\n'; echo; fi
e="$v/assets.extra/tfk_export.json"
if small "$e"; then printf 'tfk-export: '; head -c "$max_json" "$e" | tr -d '\n'; echo; fi
f="$v/assets.extra/tfk_sample_request.json"
if small "$f"; then echo "tfk-sample:"; head -c "$max_json" "$f"; echo; fi
echo "tfk-end"
"""
)


#: prints one file of the model store (an evaluation data set) as base64, between
#: ``tfk-file: <bytes>`` and ``tfk-end``; or ``tfk-no-file: <why>``. The same bounds as the
#: store reader's: a regular file that resolves inside the store, of at most $3 bytes.
FILE_SCRIPT = r"""set -eu
no() { echo "tfk-no-file: $1"; echo "tfk-end"; exit 0; }
cd "$1" 2>/dev/null || no "there is no model store at $1"
base=$(pwd -P)
r=$(readlink -f "$2" 2>/dev/null) || r=""
case "$r" in "$base"/*) ;; *) no "it resolves outside the store" ;; esac
[ -f "$r" ] || no "no regular file there"
n=$(wc -c < "$r")
[ "$n" -le "$3" ] || no "$n bytes, more than $3"
echo "tfk-file: $n"
head -c "$3" "$r" | base64
echo "tfk-end"
"""


def render_file_reader(
    spec: ServingSpec,
    job_name: str,
    path: str,
    max_bytes: int,
    identity: RunIdentity | None = None,
    deadline_seconds: int = 300,
    template_dir: str | Path | None = None,
) -> dict[str, Any]:
    """A store-reader Job that prints one file of the model store (``path``, relative to
    the store: the directory that holds the models' folders)."""
    c = serving_context(spec, identity)
    c.update(
        {
            "job_name": job_name,
            "reader_deadline": deadline_seconds,
            "reader_script": k8s_escape(FILE_SCRIPT),
            "model_dir": k8s_escape(posixpath.dirname(spec.pod_base_path)),
            "reader_version": k8s_escape(path),
            "reader_bounds": [str(int(max_bytes))],
            "reader_labels": {**c["labels"], "app.kubernetes.io/component": "store-reader"},
        }
    )
    return render_object(
        "serving/sample-reader-job.yaml.j2", "Job", job_name, spec.namespace, c, template_dir
    )


def render_object(
    template: str, kind: str, name: str, namespace: str, c: dict[str, Any], template_dir: str | Path | None
) -> dict[str, Any]:
    import yaml
    from jinja2 import TemplateError

    env = template_environment(tuple(template_dirs(template_dir)))
    try:
        text = env.get_template(template).render(c=c)
    except TemplateError as exc:  # a user's template: missing, refused, over its bounds
        raise RenderError(f"{template} failed to render {kind} {name}: {exc}"[:1000]) from None
    except (RecursionError, MemoryError, ArithmeticError, TypeError, ValueError) as exc:
        raise RenderError(f"{template} failed to render {kind} {name}: {exc!r}"[:1000]) from None
    try:
        doc = yaml.load(text, Loader=yaml_loader())  # a safe loader
    except yaml.YAMLError as exc:
        raise RenderError(f"{template} rendered invalid YAML for {name}: {exc}") from None
    meta = doc.get("metadata") if isinstance(doc, dict) else None
    if (
        not isinstance(meta, dict)
        or doc.get("kind") != kind
        or meta.get("name") != name
        or meta.get("namespace") != namespace
    ):
        raise RenderError(f"{template}: expected {kind} {name!r} in {namespace!r}")
    return doc


def _resources(spec: ServingSpec | TensorBoardSpec) -> dict[str, dict[str, str]]:
    out = {}
    if spec.resources.requests:  # type: ignore[union-attr]
        out["requests"] = spec.resources.requests  # type: ignore[union-attr]
    if spec.resources.limits:  # type: ignore[union-attr]
        out["limits"] = spec.resources.limits  # type: ignore[union-attr]
    return out


def server_context(
    spec: ServingSpec | TensorBoardSpec, app: str, component: str, key: str, identity: RunIdentity | None
) -> dict[str, Any]:
    labels = {
        "app.kubernetes.io/name": app,
        "app.kubernetes.io/instance": spec.name,
        "app.kubernetes.io/managed-by": naming.MANAGED_BY,
        "app.kubernetes.io/component": component,
        key: spec.name,
    }
    if identity is not None:
        labels.update(identity.labels())
    labels.update(spec.labels)
    return {
        "name": spec.name,
        "namespace": spec.namespace,
        "labels": labels,
        "selector": {key: spec.name},
        "annotations": identity.annotations() if identity else {},
        "image": spec.image,
        "image_pull_policy": spec.image_pull_policy,
        "image_pull_secrets": [{"name": s} for s in spec.image_pull_secrets],
        "node_selector": dict(spec.node_selector),
        "tolerations": [t.to_k8s() for t in spec.tolerations],  # type: ignore[union-attr]
        "priority_class": spec.priority_class,
        "service_account": spec.service_account,
        "resources": _resources(spec),
        "claim": spec.claim,
    }


def server_network_policy(
    spec: ServingSpec | TensorBoardSpec,
    c: dict[str, Any],
    ports: list[int],
    proxy_port: int,
    api_server_cidrs: Sequence[str] | None,
    template_dir: str | Path | None,
) -> list[dict[str, Any]]:
    """The service's NetworkPolicy (first, so the pods are never reachable unprotected),
    or nothing when it is switched off. ``api_server_cidrs`` are the discovered sources
    of the API server's service proxy, used when the spec does not name them."""
    policy = spec.network_policy
    if not policy.enabled:
        return []
    blocks = policy.api_server_cidrs
    if blocks is None:
        blocks = tuple(api_server_cidrs or ())
    c = {
        **c,
        "policy_labels": {**c["labels"], "app.kubernetes.io/component": "network-policy"},
        "api_server_peers": [{"ipBlock": {"cidr": b}} for b in blocks],
        "allow_from": [p.to_k8s() for p in policy.allow_from],
        "policy_ports": [{"protocol": "TCP", "port": p} for p in ports],
        "proxy_port": proxy_port,
    }
    name = str(spec.name)
    return [
        render_object("serving/networkpolicy.yaml.j2", "NetworkPolicy", name, spec.namespace, c, template_dir)
    ]


#: what a serving container may take to start before it loads anything (its image's
#: imports, on a loaded node)
STARTUP_SECONDS = 120


def readiness_path(model: str) -> str:
    """What the readiness probe asks: the metadata of the version the ``stable`` label
    names. TF Serving (and the stand-in) answer it from the loaded servable, so it fails
    while that version loads, and while no publish has labelled one, and passes once
    clients of the published endpoint (the label) get answers. The model status would
    not do: it answers 200 while a version is still LOADING."""
    return f"/v1/models/{model}/labels/{STABLE_LABEL}/metadata"


#: How long a serving replica being removed keeps answering after it leaves the Service's
#: endpoints (its preStop sleep): the nodes' proxies drop it from their rules within a
#: moment, seconds on a loaded cluster. Within the pod's default 30 s grace period.
DRAIN_SECONDS = 5


def serving_context(
    spec: ServingSpec, identity: RunIdentity | None = None, model_config: str = ""
) -> dict[str, Any]:
    spec.require_claim()
    c = server_context(spec, "tensorflow-serving", "serving", LABEL_SERVING, identity)
    c["labels"][LABEL_MODEL] = naming.safe_label_value(spec.model_name)
    c.update(
        {
            "config_map_name": spec.config_map_name,
            "model_config": model_config,
            "replicas": spec.replicas,
            "rest_port": spec.rest_port,
            "grpc_port": spec.grpc_port,
            "ready_path": readiness_path(spec.model_name),
            # the startup probe's budget, every 2 s: the process start plus a model load
            "startup_failures": math.ceil((STARTUP_SECONDS + spec.load_timeout_seconds) / 2),
            "drain_seconds": DRAIN_SECONDS,
            "models_mount": MODELS_MOUNT,
            "config_mount": CONFIG_MOUNT,
            "args": [
                f"--port={spec.grpc_port}",
                f"--rest_api_port={spec.rest_port}",
                f"--model_config_file={CONFIG_MOUNT}/{CONFIG_FILE}",
                f"--model_config_file_poll_wait_seconds={spec.poll_seconds}",
                f"--file_system_poll_wait_seconds={spec.poll_seconds}",
            ],
            "config_files": {CONFIG_FILE: model_config},
            "pod_annotations": {},
            # the autoscaler owns the count when there is one
            "fixed_replicas": spec.autoscaling is None,
            "spread": disruption_budget(spec) is not None,
        }
    )
    if spec.monitoring:
        c["config_files"][MONITORING_FILE] = monitoring_text(spec.monitoring_path)
        c["args"].append(f"--monitoring_config_file={CONFIG_MOUNT}/{MONITORING_FILE}")
        # the de-facto Prometheus convention: a scrape config keyed on these finds the pods
        c["pod_annotations"] = {
            "prometheus.io/scrape": "true",
            "prometheus.io/port": str(spec.rest_port),
            "prometheus.io/path": spec.monitoring_path,
        }
    if spec.batching is not None:
        c["config_files"][BATCHING_FILE] = batching_text(spec.batching)
        c["args"] += ["--enable_batching=true", f"--batching_parameters_file={CONFIG_MOUNT}/{BATCHING_FILE}"]
    return c


def _paths(model: str) -> list[dict[str, str]]:
    """This model's REST paths, and nothing else on the server (its candidate entry, other
    models, the metrics): Exact for the endpoints whose last path element carries a verb,
    prefixes (matched by whole path elements) for its versions and labels."""
    base = f"/v1/models/{model}"
    exact = [base, f"{base}:predict", f"{base}:classify", f"{base}:regress", f"{base}/metadata"]
    out = [{"path": p, "ingress_type": "Exact", "route_type": "Exact"} for p in exact]
    out += [
        {"path": f"{base}/{sub}", "ingress_type": "Prefix", "route_type": "PathPrefix"}
        for sub in ("versions", "labels")
    ]
    return out


def _scaling(spec: ServingSpec, c: dict[str, Any], template_dir: str | Path | None) -> list[dict[str, Any]]:
    """The PodDisruptionBudget, HorizontalPodAutoscaler, Ingress and HTTPRoute the spec asks
    for, in that order."""
    out: list[dict[str, Any]] = []

    def add(template: str, kind: str, extra: dict[str, Any]) -> None:
        out.append(render_object(template, kind, spec.resource, spec.namespace, {**c, **extra}, template_dir))

    budget = disruption_budget(spec)
    if budget is not None:
        add("serving/pdb.yaml.j2", "PodDisruptionBudget", {"max_unavailable": budget})
    if isinstance(spec.autoscaling, Autoscaling):
        add(
            "serving/hpa.yaml.j2",
            "HorizontalPodAutoscaler",
            {"autoscaling": dataclasses.asdict(spec.autoscaling)},
        )
    paths = _paths(spec.model_name)
    if isinstance(spec.ingress, IngressSpec):
        ingress = {
            **dataclasses.asdict(spec.ingress),
            "annotations": {**c["annotations"], **spec.ingress.annotations},
        }
        add("serving/ingress.yaml.j2", "Ingress", {"route_paths": paths, "ingress": ingress})
    if isinstance(spec.http_route, HTTPRouteSpec):
        base = f"/v1/models/{spec.model_name}"
        route = {
            "parent_refs": [
                p.to_k8s() if isinstance(p, ParentRef) else dict(p) for p in spec.http_route.parent_refs
            ],
            "hostnames": list(spec.http_route.hostnames),
        }
        extra = {
            "route_paths": paths,
            "http_route": route,
            "default_predict": f"{base}:predict",
            "stable_predict": f"{base}/labels/{STABLE_LABEL}:predict",
        }
        add("serving/httproute.yaml.j2", "HTTPRoute", extra)
    return out


def render_serving(
    spec: ServingSpec,
    identity: RunIdentity | None = None,
    model_config: str = "",
    template_dir: str | Path | None = None,
    api_server_cidrs: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """NetworkPolicy (unless switched off), ConfigMap, Service and Deployment of one
    model's TF Serving, then its PodDisruptionBudget, HorizontalPodAutoscaler, Ingress and
    HTTPRoute when the spec asks for them, in apply order."""
    c = serving_context(spec, identity, model_config)
    ports = [spec.rest_port, spec.grpc_port]
    return [
        *server_network_policy(spec, c, ports, spec.rest_port, api_server_cidrs, template_dir),
        _config_map(spec, c, spec.config_map_name, c["config_files"], template_dir),
        render_object("serving/service.yaml.j2", "Service", spec.resource, spec.namespace, c, template_dir),
        render_object(
            "serving/deployment.yaml.j2", "Deployment", spec.resource, spec.namespace, c, template_dir
        ),
        *_scaling(spec, c, template_dir),
    ]


def _config_map(
    spec: ServingSpec,
    c: dict[str, Any],
    name: str,
    files: dict[str, str],
    template_dir: str | Path | None,
) -> dict[str, Any]:
    return render_object(
        "serving/configmap.yaml.j2",
        "ConfigMap",
        name,
        spec.namespace,
        {**c, "config_map_name": name, "config_files": files},
        template_dir,
    )


def render_config_map(
    spec: ServingSpec,
    model_config: str,
    identity: RunIdentity | None = None,
    template_dir: str | Path | None = None,
) -> dict[str, Any]:
    """The model config TF Serving polls, with the monitoring and batching configs."""
    c = serving_context(spec, identity, model_config)
    return _config_map(spec, c, spec.config_map_name, c["config_files"], template_dir)


def render_metrics_config_map(
    spec: ServingSpec,
    published_metrics: str,
    identity: RunIdentity | None = None,
    template_dir: str | Path | None = None,
) -> dict[str, Any]:
    """The ConfigMap recording each published version's metrics (the gate's baselines),
    written by the publish after a promotion and mounted nowhere."""
    c = serving_context(spec, identity)
    files = {PUBLISHED_METRICS: published_metrics}
    return _config_map(spec, c, spec.metrics_config_map_name, files, template_dir)


def render_sample_reader(
    spec: ServingSpec,
    job_name: str,
    version: int | None,
    identity: RunIdentity | None = None,
    deadline_seconds: int = 300,
    template_dir: str | Path | None = None,
) -> dict[str, Any]:
    """A Job that prints the model's exported versions and one version's sample request."""
    c = serving_context(spec, identity)
    c.update(
        {
            "job_name": job_name,
            "reader_deadline": deadline_seconds,
            # Kubernetes expands $(VAR) in command and args; the script is shell, not that.
            "reader_script": k8s_escape(READER_SCRIPT),
            "model_dir": k8s_escape(spec.pod_base_path),
            "reader_version": "" if version is None else str(int(version)),
            "reader_bounds": [str(MAX_ENTRIES), str(MAX_LISTING_BYTES), " ".join(PARTS), str(MAX_STORE_JSON)],
            "reader_labels": {**c["labels"], "app.kubernetes.io/component": "store-reader"},
        }
    )
    return render_object(
        "serving/sample-reader-job.yaml.j2", "Job", job_name, spec.namespace, c, template_dir
    )
