"""Hostile inputs of issue 22's spec classes, through every interface that takes them: the
Python API (specs, network policies, operators, the sweeper), the CLI (``render --validate
--kubernetes-version``), DAG-as-code folders (a training file each) and the UI form's conf.

Classes: specs the API server refuses (NetworkPolicy CIDRs, env names by version, names
with a trailing newline), the local backend's process cap, reserved label domains,
operator arguments, and collections large enough to cost CPU before their refusal.

Each case is refused within 1 CPU-s and 100 MB with an error naming its field, or is
accepted; none crashes, hangs or runs code (Jinja in a value is data: a marker file that an
executed payload would create must not appear). ``test_summary`` prints the table.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_tfk.cli import main as cli
from airflow_tfk.core.errors import LocalMachineError, SpecError
from airflow_tfk.render.manifests import render
from airflow_tfk.spec.cluster import TFClusterSpec

from .corpus import BASE, with_

CPU_LIMIT = 1.0
MEMORY_LIMIT = 100 * 2**20
# What an executed payload below would create: this process's own, so a run beside another
# (the other CI lane, a second checkout) neither removes its marker nor sees it.
MARK = Path(tempfile.gettempdir()) / f"tfk-hostile-spec-MARK-{os.getpid()}"
PAYLOAD = "{{ cycler.__init__.__globals__.os.system('touch " + str(MARK) + "') }}"
RESTRICTED = {"egress": "restricted"}


@dataclass(frozen=True)
class Case:
    id: str
    interface: str  # python | cli | folder | form
    run: Callable[[], Any]  # raises the refusal, or returns
    field: str | None  # the field the error names (prefix match); None: accepted


def _spec(data: dict[str, Any]) -> Callable[[], Any]:
    return lambda: render(TFClusterSpec.from_dict(data))


def _np(*peers: dict[str, Any], **more: Any) -> dict[str, Any]:
    return with_("network_policy", {**RESTRICTED, "egress_to": list(peers), **more})


# -- Python API: the spec ---------------------------------------------------------------
def _python_spec_cases() -> list[Case]:
    p = "network_policy.egress_to[0]"
    refused: list[tuple[str, dict[str, Any], str]] = [
        ("np-except-equals-cidr-v4", _np({"cidr": "10.0.0.0/8", "except_cidrs": ["10.0.0.0/8"]}), p),
        ("np-except-equals-cidr-v6", _np({"cidr": "fd00::/8", "except_cidrs": ["fd00::/8"]}), p),
        ("np-except-equals-netmask", _np({"cidr": "10.0.0.0/8", "except_cidrs": ["10.0.0.0/255.0.0.0"]}), p),
        ("np-except-wider", _np({"cidr": "10.0.0.0/16", "except_cidrs": ["10.0.0.0/8"]}), p),
        ("np-except-other-family", _np({"cidr": "10.0.0.0/8", "except_cidrs": ["fd00::/16"]}), p),
        ("np-zone-name", _np({"cidr": "fe80::%eth0/64"}), p),
        ("np-zone-number", _np({"cidr": "fe80::%1/64"}), p),
        ("np-zone-in-except", _np({"cidr": "fe80::/10", "except_cidrs": ["fe80::%lo/64"]}), p),
        ("np-ipv4-mapped", _np({"cidr": "::ffff:10.0.0.0/104"}), p),
        ("np-ipv4-mapped-hex", _np({"cidr": "::ffff:a00:0/104"}), p),
        ("np-ipv4-mapped-all", _np({"cidr": "::ffff:0:0/96"}), p),
        ("np-ipv4-mapped-except", _np({"cidr": "::/0", "except_cidrs": ["::ffff:10.0.0.0/104"]}), p),
        ("np-cidr-very-long", _np({"cidr": "10.0.0.0/" + "0" * 10_000}), p),
        ("np-dns-empty", with_("network_policy", {**RESTRICTED, "dns_to": []}), "network_policy.dns_to"),
        (
            "np-dns-with-ports",
            with_("network_policy", {**RESTRICTED, "dns_to": [{"cidr": "10.0.0.10/32", "ports": [53]}]}),
            "network_policy.dns_to[0].ports",
        ),
        (
            "np-dns-mapped",
            with_("network_policy", {**RESTRICTED, "dns_to": [{"cidr": "::ffff:10.0.0.10/128"}]}),
            "network_policy.dns_to[0].cidr",
        ),
        ("np-100k-peers", _np(*[{"pod_labels": {"a": "b"}}] * 100_000), "network_policy.egress_to"),
        ("np-100k-excepts", _np({"cidr": "10.0.0.0/8", "except_cidrs": ["10.1.0.0/16"] * 100_000}), p),
        ("np-100k-ports", _np({"cidr": "10.0.0.0/8", "ports": [443] * 100_000}), p),
        ("np-100k-labels", _np({"pod_labels": {f"k{i}": "v" for i in range(100_000)}}), p),
        ("np-mixed-keys", with_("network_policy", {1: True, "x": 2}), "network_policy"),
        ("np-peer-mixed-keys", _np({"cidr": "10.0.0.0/8", 3: 1, "x": 2}), p),
        ("env-dot", with_("env", {".": "v"}), "env"),
        ("env-dotdot", with_("env", {"..": "v"}), "env"),
        ("env-dotdot-x", with_("env", {"..x": "v"}), "env"),
        ("env-dots3", with_("env", {"...": "v"}), "env"),
        ("env-trailing-newline", with_("env", {"A\n": "v"}), "env"),
        ("role-env-dotdot-x", with_("worker.env", {"..x": "v"}), "worker.env"),
        ("nl-label-value", with_("labels", {"team": "ml\n"}), "labels"),
        ("nl-label-key", with_("labels", {"team\n": "ml"}), "labels"),
        ("nl-pull-secret", with_("image_pull_secrets", ["regcred\n"]), "image_pull_secrets"),
        ("nl-service-account", with_("service_account", "trainer\n"), "service_account"),
        ("nl-queue-name", with_("queue_name", "team-a\n"), "queue_name"),
        ("nl-metrics-path", with_("metrics_path", "/metrics\n"), "metrics_path"),
        ("nl-node-selector", with_("worker.node_selector", {"pool": "gpu\n"}), "worker.node_selector"),
        ("nl-claim", with_("storage", {"data": {"claim": "data\n"}}), "storage.data.claim"),
        ("label-kueue-queue", with_("labels", {"kueue.x-k8s.io/queue-name": "other"}), "labels"),
        ("label-kueue-priority", with_("labels", {"kueue.x-k8s.io/priority-class": "high"}), "labels"),
        ("label-x-k8s-sub", with_("labels", {"cluster.x-k8s.io/cluster-name": "c"}), "labels"),
        ("label-jobset", with_("labels", {"jobset.sigs.k8s.io/jobset-name": "j"}), "labels"),
        ("label-batch", with_("labels", {"batch.kubernetes.io/job-name": "j"}), "labels"),
        ("label-provider-sub", with_("labels", {"x.tfk.airflow.apache.org/y": "z"}), "labels"),
        ("label-app-k8s", with_("labels", {"app.kubernetes.io/part-of": "x"}), "labels"),
        (
            "label-overrides-queue-name",
            {**with_("labels", {"kueue.x-k8s.io/queue-name": "other"}), "queue_name": "team-a"},
            "labels",
        ),
        ("args-1m", with_("args", ["x"] * 1_000_000), "args"),
        ("command-1m", with_("command", ["x"] * 1_000_000), "command"),
        ("args-400k-chars", with_("args", ["x" * 100_000] * 4), "args"),
        ("role-args-1m", with_("worker.args", ["x"] * 1_000_000), "worker.args"),
        ("env-200k", with_("env", {f"V{i}": "x" for i in range(200_000)}), "env"),
        ("labels-200k", with_("labels", {f"l{i}": "x" for i in range(200_000)}), "labels"),
        (
            "tolerations-1m",
            with_("worker.tolerations", [{"operator": "Exists"}] * 1_000_000),
            "worker.tolerations",
        ),
        ("exit-codes-1m", with_("permanent_exit_codes", [1] * 1_000_000), "permanent_exit_codes"),
        ("pull-secrets-1m", with_("image_pull_secrets", ["s"] * 1_000_000), "image_pull_secrets"),
        (
            "node-selector-200k",
            with_("worker.node_selector", {f"k{i}": "v" for i in range(200_000)}),
            "worker",
        ),
    ]
    return [Case(i, "python", _spec(d), f) for i, d, f in refused] + [
        Case(i, "python", _spec(d), None) for i, d in accepted_specs()
    ]


def accepted_specs() -> list[tuple[str, dict[str, Any]]]:
    """The accepted specs (tests/k8s_integration/test_hostile_admission.py dry-runs them
    against the real API server)."""
    return [
        ("ok-np-strict-subset", _np({"cidr": "10.0.0.0/8", "except_cidrs": ["10.0.0.0/9"]})),
        ("ok-np-ipv6", _np({"cidr": "fd00::/8", "except_cidrs": ["fd00:1::/32"], "ports": [443]})),
        ("ok-np-link-local", _np({"cidr": "fe80::/64"})),
        ("ok-np-ipv4-compatible", _np({"cidr": "::a00:0/104"})),
        (
            "ok-np-dns-node-local",
            with_("network_policy", {**RESTRICTED, "dns_to": [{"cidr": "169.254.20.10/32"}]}),
        ),
        (
            "ok-np-dns-selector",
            with_(
                "network_policy",
                {**RESTRICTED, "dns_to": [{"namespace_labels": {}, "pod_labels": {"k8s-app": "coredns"}}]},
            ),
        ),
        ("ok-np-restricted-default-dns", with_("network_policy", RESTRICTED)),
        ("ok-np-256-peers", _np(*[{"pod_labels": {"app": f"a{i}"}} for i in range(256)])),
        ("ok-env-dot-x", with_("env", {".x": "v", "x.": "v", "a..b": "v", "my.env-name": "v"})),
        ("ok-label-other-domains", with_("labels", {"example.com/team": "ml", "notk8s.io/x": "y"})),
        ("ok-queue-name", {**BASE, "queue_name": "team-a"}),
        ("ok-memory-padded-is-normalised", with_("worker.resources", {"memory": " 1Gi\n"})),
        ("ok-args-4096", with_("args", [f"--a{i}" for i in range(4096)])),
        ("ok-args-jinja-is-data", with_("args", [PAYLOAD])),
        ("ok-env-jinja-is-data", with_("env", {"X": PAYLOAD})),
    ]


# -- Python API: serving and TensorBoard policies, operators, the sweeper ----------------
def _service_policy(data: Any) -> Callable[[], Any]:
    from airflow_tfk.spec.network import ServiceNetworkPolicy

    return lambda: ServiceNetworkPolicy.from_value(data)


def _tensorboard(policy: Any) -> Callable[[], Any]:
    def run() -> Any:
        from airflow_tfk.serving.spec import TensorBoardSpec

        return TensorBoardSpec.from_dict({"name": "tb", "claim": "logs", "network_policy": policy})

    return run


def _serving_spec(data: dict[Any, Any]) -> Callable[[], Any]:
    def run() -> Any:
        from airflow_tfk.serving.spec import ServingSpec

        return ServingSpec.from_dict(data)

    return run


def _python_other_cases() -> list[Case]:
    from airflow_tfk.operators.serving import TFPublishModelOperator
    from airflow_tfk.operators.training import TFTrainingOperator

    def training(**kw: Any) -> Callable[[], Any]:
        kw.setdefault("cluster_spec", BASE)
        return lambda: TFTrainingOperator(task_id="t", backend="local", **kw)

    def publish(**kw: Any) -> Callable[[], Any]:
        return lambda: TFPublishModelOperator(
            task_id="p", backend="local", model_name="m", base_path="/m", **kw
        )

    def sweep(namespace: Any) -> Callable[[], Any]:
        def run() -> Any:
            from airflow_tfk.backends.local.backend import LocalBackend
            from airflow_tfk.run.orphans import sweep

            return sweep(LocalBackend("/nonexistent-tfk-root"), namespace, lambda identity: None)

        return run

    af = "allow_from[0]"
    return [
        Case(
            "svc-except-equals",
            "python",
            _service_policy({"allow_from": [{"cidr": "10.0.0.0/8", "except_cidrs": ["10.0.0.0/8"]}]}),
            f"network_policy.{af}",
        ),
        Case(
            "svc-zone",
            "python",
            _service_policy({"allow_from": [{"cidr": "fe80::%eth0/64"}]}),
            f"network_policy.{af}",
        ),
        Case(
            "svc-mapped",
            "python",
            _service_policy({"allow_from": [{"cidr": "::ffff:10.0.0.0/104"}]}),
            f"network_policy.{af}",
        ),
        Case(
            "svc-api-cidr-zone",
            "python",
            _service_policy({"api_server_cidrs": ["fe80::1%eth0/128"]}),
            "network_policy.api_server_cidrs",
        ),
        Case(
            "svc-api-cidr-mapped",
            "python",
            _service_policy({"api_server_cidrs": ["::ffff:10.0.0.1/128"]}),
            "network_policy.api_server_cidrs",
        ),
        Case(
            "svc-100k-peers",
            "python",
            _service_policy({"allow_from": [{"pod_labels": {"a": "b"}}] * 100_000}),
            "network_policy.allow_from",
        ),
        Case("svc-mixed-keys", "python", _service_policy({1: 2, "x": 3}), "network_policy"),
        Case(
            "tb-mapped",
            "python",
            _tensorboard({"allow_from": [{"cidr": "::ffff:10.0.0.0/104"}]}),
            "network_policy",
        ),
        Case(
            "tb-except-equals",
            "python",
            _tensorboard({"allow_from": [{"cidr": "10.0.0.0/8", "except_cidrs": ["10.0.0.0/8"]}]}),
            "network_policy",
        ),
        Case(
            "serving-spec-mixed-keys",
            "python",
            _serving_spec({"model_name": "m", "claim": "c", 1: 2, "x": 3}),
            "1",
        ),
        Case(
            "ok-svc-policy",
            "python",
            _service_policy({"allow_from": [{"cidr": "10.0.0.0/8", "except_cidrs": ["10.0.0.0/9"]}]}),
            None,
        ),
        Case(
            "ok-tb-policy",
            "python",
            _tensorboard({"allow_from": [{"namespace_labels": {"team": "ml"}}]}),
            None,
        ),
        Case("op-spec-none", "python", training(cluster_spec=None), "cluster_spec"),
        Case("op-spec-int", "python", training(cluster_spec=42), "cluster_spec"),
        Case("op-spec-bytes", "python", training(cluster_spec=b"name: x"), "cluster_spec"),
        Case("op-spec-list", "python", training(cluster_spec=[("name", "x")]), "cluster_spec"),
        Case(
            "op-spec-mixed-np",
            "python",
            training(cluster_spec={**BASE, "network_policy": {1: 1, "x": 1}}),
            "cluster_spec.network_policy",
        ),
        Case(
            "op-spec-1m-args",
            "python",
            training(cluster_spec={**BASE, "args": ["x"] * 1_000_000}),
            "cluster_spec",
        ),
        Case("op-backend-config-str", "python", training(backend_config="root=/tmp"), "backend_config"),
        Case(
            "op-backend-config-unknown",
            "python",
            training(backend_config={"rooot": "/x"}),
            "backend_config.rooot",
        ),
        Case("op-progress-abc", "python", training(progress_interval="abc"), "progress_interval"),
        Case("op-progress-nan", "python", training(progress_interval=float("nan")), "progress_interval"),
        Case(
            "op-gate-huge",
            "python",
            publish(quality_gate={"thresholds": {"acc": 10**400}}),
            "quality_gate.thresholds.acc",
        ),
        Case(
            "op-gate-mixed",
            "python",
            publish(quality_gate={"thresholds": {1: 0.5, "a": 0.5}}),
            "quality_gate.thresholds",
        ),
        Case("op-serving-mixed", "python", publish(serving={1: "x", "a": 1}), "serving"),
        Case("op-metrics-inf", "python", publish(metrics={"acc": float("inf")}), "metrics.acc"),
        Case("local-max-tasks-zero", "python", _local_backend(max_tasks=0), "max_tasks"),
        Case("local-max-tasks-str", "python", _local_backend(max_tasks="8"), "max_tasks"),
        Case("sweep-namespace-int", "python", sweep(5), "namespace"),
        Case("sweep-namespace-bad", "python", sweep("Bad NS"), "namespace"),
        Case("ok-op-training", "python", training(backend_config={"root": "/tmp/x", "max_tasks": 16}), None),
        Case("ok-op-publish", "python", publish(quality_gate={"thresholds": {"accuracy": 0.9}}), None),
        Case("local-600-workers", "python", _local_create(600, 64), "worker.replicas"),
        Case("local-600-ps", "python", _local_create(1, 600), "ps.replicas"),
        Case("local-cap-raised", "python", _local_create(30, 2, max_tasks=64), None),
    ]


def _local_backend(**config: Any) -> Callable[[], Any]:
    def run() -> Any:
        from airflow_tfk.backends import get_backend

        return get_backend("local", root="/nonexistent-tfk-root", **config)

    return run


def _local_create(workers: int, ps: int, **config: Any) -> Callable[[], Any]:
    def run() -> Any:
        from airflow_tfk.backends.local.backend import LocalBackend

        spec = TFClusterSpec.from_dict({**BASE, "worker": {"replicas": workers}, "ps": {"replicas": ps}})
        backend = LocalBackend("/nonexistent-tfk-root", **config)
        backend._check_task_cap(spec)  # what create and preflight run first
        return backend

    return run


# -- CLI: render --validate --kubernetes-version ----------------------------------------
def _cli(data: dict[str, Any], version: str) -> Callable[[], Any]:
    def run() -> Any:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp, "spec.yaml")
            path.write_text(json.dumps(data))
            out, err = io.StringIO(), io.StringIO()
            with redirect_stdout(out), redirect_stderr(err):
                code = cli.main(["render", str(path), "--validate", "--kubernetes-version", version])
        text = err.getvalue()
        assert "Traceback" not in text
        if code == 0:
            return out.getvalue()
        assert code == cli.EXIT_SPEC_ERROR and text.startswith("error: "), (code, text[:300])
        raise SpecError(text[len("error: ") :].split(":", 1)[0], "refused by the CLI")

    return run


def _cli_cases() -> list[Case]:
    p = "network_policy.egress_to[0]"
    out = []
    for version in ("1.29", "1.31"):
        out += [
            Case(f"cli-{version}-env-dot", "cli", _cli(with_("env", {".": "v"}), version), "env"),
            Case(f"cli-{version}-env-dotdot-x", "cli", _cli(with_("env", {"..x": "v"}), version), "env"),
        ]
    for version in ("1.29", "1.36"):
        out += [
            Case(
                f"cli-{version}-except-equals",
                "cli",
                _cli(_np({"cidr": "10.0.0.0/8", "except_cidrs": ["10.0.0.0/8"]}), version),
                p,
            ),
            Case(f"cli-{version}-zone", "cli", _cli(_np({"cidr": "fe80::%eth0/64"}), version), p),
            Case(f"cli-{version}-mapped", "cli", _cli(_np({"cidr": "::ffff:10.0.0.0/104"}), version), p),
            Case(
                f"cli-{version}-kueue-label",
                "cli",
                _cli(with_("labels", {"kueue.x-k8s.io/queue-name": "q"}), version),
                "labels",
            ),
            Case(
                f"cli-{version}-ok-restricted",
                "cli",
                _cli(_np({"cidr": "10.0.0.0/8", "except_cidrs": ["10.1.0.0/16"]}), version),
                None,
            ),
            Case(f"cli-{version}-ok-env", "cli", _cli(with_("env", {".x": "1", "a..b": "2"}), version), None),
        ]
    return out


# -- DAG-as-code folders: one training file each ------------------------------------------
TRAINING = {
    "schedule": None,
    "backend": "local",
    "cluster": {
        "image": "tf:1",
        "mode": "all_reduce",
        "command": ["python", "t.py"],
        "worker": {"replicas": 1},
    },
}


def _folder(changes: dict[str, Any]) -> Callable[[], Any]:
    def run() -> Any:
        import tempfile

        from airflow_tfk.dagfactory.loader import load_folder

        data = json.loads(json.dumps(TRAINING))
        for path, value in changes.items():
            node = data
            keys = path.split(".")
            for k in keys[:-1]:
                node = node.setdefault(k, {})
            node[keys[-1]] = value
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp, "hostile.yaml")
            path.write_text(json.dumps(data))
            result = load_folder(Path(tmp), files=[path])
        if result.errors:
            (error,) = result.errors
            raise SpecError(error.field, str(error))
        return result

    return run


def _folder_cases() -> list[Case]:
    p = "cluster.network_policy"
    return [
        Case(
            "dir-except-equals",
            "folder",
            _folder(
                {p: {**RESTRICTED, "egress_to": [{"cidr": "10.0.0.0/8", "except_cidrs": ["10.0.0.0/8"]}]}}
            ),
            p,
        ),
        Case(
            "dir-zone", "folder", _folder({p: {**RESTRICTED, "egress_to": [{"cidr": "fe80::%eth0/64"}]}}), p
        ),
        Case(
            "dir-mapped",
            "folder",
            _folder({p: {**RESTRICTED, "egress_to": [{"cidr": "::ffff:10.0.0.0/104"}]}}),
            p,
        ),
        Case("dir-env-dotdot-x", "folder", _folder({"cluster.env": {"..x": "v"}}), "cluster.env"),
        Case(
            "dir-kueue-label",
            "folder",
            _folder({"cluster.labels": {"kueue.x-k8s.io/queue-name": "q"}}),
            "cluster.labels",
        ),
        Case("dir-nl-label", "folder", _folder({"cluster.labels": {"team": "ml\n"}}), "cluster.labels"),
        Case(
            "dir-backend-config-unknown",
            "folder",
            _folder({"backend_config": {"rooot": "/x"}}),
            "backend_config",
        ),
        Case("dir-backend-config-str", "folder", _folder({"backend_config": "root=/x"}), "backend_config"),
        Case("dir-progress-abc", "folder", _folder({"progress_interval": "abc"}), "progress_interval"),
        Case(
            "ok-dir-restricted",
            "folder",
            _folder({p: {**RESTRICTED, "dns_to": [{"cidr": "169.254.20.10/32"}]}}),
            None,
        ),
        # A training file's templates render in the sandbox, which refuses this payload
        # when the file is read (tests/dagfactory/test_sandbox.py): never run, and named.
        Case("jinja-arg-refused", "folder", _folder({"cluster.args": ["--x", PAYLOAD]}), "cluster.args[1]"),
    ]


# -- the UI form's conf (tfk_ui_training on the local backend) ----------------------------
_FORM: dict[str, Any] = {}


def _form_dag() -> Any:
    """tfk_ui_training as ``airflow-tfk airflow`` parses it: on the local backend, chosen
    by name (the provider's default is Kubernetes), so the form carries the local cap."""
    if "dag" not in _FORM:
        import importlib

        from airflow.dag_processing.dagbag import DagBag

        from airflow_tfk import dag_env

        root = Path(__file__).resolve().parents[2]
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("TFK_BACKEND", "local")
            importlib.reload(dag_env)
            try:
                bag = DagBag(dag_folder=str(root / "dags" / "tfk_ui_training.py"))
            finally:
                mp.undo()
                importlib.reload(dag_env)
        _FORM["dag"] = bag.dags["tfk_ui_training"]
    return _FORM["dag"]


def _form(conf: dict[str, Any]) -> Callable[[], Any]:
    def run() -> Any:
        import copy

        from airflow.sdk.definitions.param import ParamValidationError

        dag = _form_dag()
        form = copy.deepcopy(dag.params)  # Param.resolve keeps the value it resolved
        params = {k: form[k] for k in form}
        for key, value in conf.items():
            try:
                params[key] = form.get_param(key).resolve(value)
            except ParamValidationError:
                raise SpecError(key, "refused by the form") from None
        return dag.get_task("validate").python_callable(params=params)

    return run


def _form_cases() -> list[Case]:
    from airflow_tfk.spec.capacity import local_max_tasks

    cap = local_max_tasks()
    return [
        Case("form-600-workers", "form", _form({"workers": 600}), "workers"),
        Case("form-64-ps", "form", _form({"ps": 64}), "ps"),
        Case("form-cap-plus-one", "form", _form({"workers": cap + 1}), "workers"),
        Case("form-sum-over-cap", "form", _form({"workers": cap, "ps": 1}), "worker.replicas"),
        Case("form-sum-over-cap-ps", "form", _form({"workers": 1, "ps": cap}), "ps.replicas"),
        Case("ok-form-defaults", "form", _form({}), None),
        Case("ok-form-at-cap", "form", _form({"workers": cap - 2, "ps": 1}), None),
    ]


def cases() -> list[Case]:
    out = _python_spec_cases() + _python_other_cases() + _cli_cases() + _folder_cases() + _form_cases()
    assert len({c.id for c in out}) == len(out), "duplicate case ids"
    return out


CASES = cases()


def _field_ok(got: str, want: str) -> bool:
    return got == want or got.startswith((f"{want}.", f"{want}["))


def _outcome(case: Case) -> tuple[str, str]:
    """(refused | accepted | crashed | wrong, detail), with the CPU and memory bounds."""
    MARK.unlink(missing_ok=True)
    tracemalloc.start()
    t0 = time.process_time()
    try:
        case.run()
        error: BaseException | None = None
    except (SpecError, LocalMachineError) as exc:
        error = exc
    except Exception as exc:  # a crash is what this test looks for
        error = exc
    cpu = time.process_time() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    if MARK.exists():
        return "executed", "a payload ran"
    if cpu > CPU_LIMIT * 2:  # traced: about twice as slow as untraced
        return "hung", f"{cpu:.2f} CPU-s"
    if peak > MEMORY_LIMIT:
        return "crashed", f"{peak / 2**20:.0f} MB"
    if error is None:
        return ("accepted", "") if case.field is None else ("wrong", "accepted, expected a refusal")
    if not isinstance(error, (SpecError, LocalMachineError)):
        return "crashed", f"{type(error).__name__}: {error}"[:300]
    if case.field is None:
        return "wrong", f"refused: {error}"[:300]
    if not _field_ok(error.field, case.field):
        return "wrong", f"names {error.field!r}, expected {case.field!r}: {error}"[:300]
    return "refused", ""


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.interface}-{c.id}")
def test_case(case: Case) -> None:
    if case.interface == "form":
        # Parsing the DAG with Airflow's DagBag (once per process) is the set-up, not the
        # case: the bound is on what one value costs the form, not on importing Airflow.
        _form_dag()
    outcome, detail = _outcome(case)
    assert outcome == ("accepted" if case.field is None else "refused"), detail


def test_the_corpus_covers_every_interface_and_class() -> None:
    assert len(CASES) >= 40
    by_interface = Counter(c.interface for c in CASES)
    assert set(by_interface) == {"python", "cli", "folder", "form"}
    ids = " ".join(c.id for c in CASES)
    for cls in (
        "np-except",
        "zone",
        "mapped",
        "env-dot",
        "nl-",
        "label-kueue",
        "1m",
        "100k",
        "op-",
        "local-",
        "form-",
    ):
        assert cls in ids, cls


def test_summary(capsys: pytest.CaptureFixture[str]) -> None:
    """The table of the report (pytest -s shows it)."""
    counts: Counter[str] = Counter()
    for case in CASES:
        outcome, _ = _outcome(case)
        counts[outcome] += 1
    with capsys.disabled():
        print(
            f"\nhostile spec corpus: {len(CASES)} tried, {counts['refused']} refused clearly, "
            f"{counts['accepted']} accepted valid, {counts['crashed']} crashed, {counts['hung']} hung, "
            f"{counts['executed']} code executed, {counts['wrong']} other"
        )
    assert counts["refused"] + counts["accepted"] == len(CASES)
