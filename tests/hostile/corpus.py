"""The hostile-input corpus (issue 10): each case is a spec file's text (or Python API
arguments) and what must happen - refused naming a field, or accepted.

Shared by the unit test (Python API and CLI, time and memory bounds) and the Kubernetes
integration test (every accepted case is admitted by the real API server, dry run).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BASE: dict[str, Any] = {
    "name": "hostile",
    "image": "tensorflow/tensorflow:2.21.0",
    "command": ["python", "/opt/train.py"],
    "mode": "between_graph",
    "ps": {"replicas": 1},
    "worker": {"replicas": 2},
}


@dataclass(frozen=True)
class Case:
    id: str
    text: str | bytes  # the spec file
    field: str | None  # the field the error names (prefix match); None: accepted
    python: dict[str, Any] | None = field(default=None)  # the same input for the Python API
    cli_args: tuple[str, ...] = ()


def _yaml(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False) + "\n"  # JSON is YAML: exact values


def with_(path: str, value: Any, base: dict[str, Any] | None = None) -> dict[str, Any]:
    data = json.loads(json.dumps(base or BASE))
    node = data
    keys = path.split(".")
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value
    return data


def bad(id: str, path: str, value: Any, field_: str | None = None) -> Case:
    data = with_(path, value)
    return Case(id, _yaml(data), field_ or path, data)


def ok(id: str, data: dict[str, Any], *cli: str) -> Case:
    return Case(id, _yaml(data), None, data, tuple(cli))


def raw(id: str, text: str, field_: str, *cli: str) -> Case:
    return Case(id, text, field_, None, tuple(cli))


HEAD = "name: hostile\nimage: tf:1\ncommand: [python, t.py]\nps: {replicas: 1}\n"
ONE_WORKER = HEAD + "worker: {replicas: 1}\n"
BLOCK_WORKER = HEAD + "worker:\n  replicas: 1\n"  # one more line of the worker block follows
FLOW_WORKER = HEAD + "worker: {replicas: 1, "  # one more key of the worker mapping follows
TOLERATIONS = FLOW_WORKER + "tolerations: "


def _bombs() -> list[Case]:
    laughs = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, cur in zip("abcdefgh", "bcdefghi", strict=True):
        laughs.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    out = [raw("alias-bomb-list", "\n".join(laughs) + "\n", "spec")]
    maps = ["a: &a {x: 1, y: 2, z: 3, w: 4}"]
    for prev, cur in zip("abcdefghij", "bcdefghijk", strict=True):
        maps.append(f"{cur}: &{cur} {{p: *{prev}, q: *{prev}, r: *{prev}, s: *{prev}}}")
    out.append(raw("alias-bomb-map", "\n".join(maps) + "\n", "spec"))
    nested = HEAD + "env: &e {A: '1', B: '2'}\nworker: {replicas: 1, env: *e}\n"
    out.append(ok("alias-small-reuse", json.loads(json.dumps(with_("worker.env", {"A": "1", "B": "2"})))))
    out.append(raw("alias-reused-env-refused", nested, "worker.env"))  # no aliases, even small ones
    for width in (50, 200):
        text = "a: &a [" + ",".join(["x"] * width) + "]\n"
        text += "b: &b [" + ",".join(["*a"] * width) + "]\n"
        text += "c: [" + ",".join(["*b"] * width) + "]\n"
        out.append(raw(f"alias-bomb-wide-{width}", text, "spec"))
    out.append(raw("alias-undefined", HEAD + "worker: *nowhere\n", "spec"))
    return out


def _depth_and_size() -> list[Case]:
    return [
        raw("deep-flow-lists-10000", "a: " + "[" * 10000 + "]" * 10000 + "\n", "spec"),
        raw("deep-flow-maps-10000", "a: " + "{a: " * 10000 + "1" + "}" * 10000 + "\n", "spec"),
        raw("deep-block-maps-200", "".join("  " * i + f"k{i}:\n" for i in range(200)), "spec"),
        raw("deep-65", "a: " + "[" * 65 + "]" * 65 + "\n", "spec"),
        raw("deep-unclosed", "a: " + "[" * 5000 + "\n", "spec"),
        raw("size-2mib-comment", "#" + "x" * (2 << 20) + "\n" + HEAD, "spec"),
        raw("size-2mib-value", ONE_WORKER + "image: '" + "a" * (2 << 20) + "'\n", "spec"),
        raw("size-many-keys", HEAD + "env:\n" + "".join(f"  K{i}: v\n" for i in range(120_000)), "spec"),
    ]


# The bases the rows of refused.yaml build on.
_BASES = {
    "none": "",
    "head": HEAD,
    "one_worker": ONE_WORKER,
    "block_worker": BLOCK_WORKER,
    "flow_worker": FLOW_WORKER,
    "tolerations": TOLERATIONS,
}


def _data(name: str) -> Any:
    """A data file of this corpus (beside this module)."""
    import yaml

    return yaml.safe_load(Path(__file__).with_name(name).read_text(encoding="utf-8"))


_VALUES: dict[str, list[str]] = _data("values.yaml")


def _refused_texts() -> list[Case]:
    """Spec texts refused, naming a field: the rows of refused.yaml (most are the valid head
    with one worker plus one hostile line), and the few that code builds."""
    rows = _data("refused.yaml")
    # the YAML loader keeps the last of two equal keys: count the rows in the text too
    rows_in_text = Path(__file__).with_name("refused.yaml").read_text(encoding="utf-8").count('\n"')
    assert len(rows) == rows_in_text, "duplicate ids in refused.yaml"
    return [raw(id_, _BASES[base] + text, field_) for id_, (base, text, field_) in rows.items()] + [
        raw("yaml-timestamp-name", ONE_WORKER.replace("hostile", "2001-12-14t21:59:43.10-05:00"), "name"),
        raw("command-string", ONE_WORKER.replace("[python, t.py]", "python t.py"), "command"),
        raw("huge-int-port", ONE_WORKER + "port: " + "9" * 5000 + "\n", "port"),
        raw("huge-int-replicas", HEAD + "worker: {replicas: " + "1" * 4400 + "}\n", "worker.replicas"),
        raw("huge-int-cpu", FLOW_WORKER + "resources: {cpu: " + "9" * 5000 + "}}\n", "worker.resources.cpu"),
    ]


def _yaml11() -> list[Case]:
    out = []
    for i, (key, text) in enumerate(
        [
            ("worker.replicas", "010"),
            ("worker.replicas", "0777"),
            ("worker.replicas", "0b11"),
            ("worker.replicas", "1_000"),
            ("worker.replicas", "0x10"),
            ("max_duration_seconds", "1:30"),
            ("max_duration_seconds", "190:20:30"),
            ("ps_grace_seconds", "1:30.5"),
            ("port", "02222"),
            ("retries_per_index", "+0_1"),
        ]
    ):
        parent, leaf = key.rsplit(".", 1) if "." in key else ("", key)
        body = HEAD + (
            f"worker:\n  {leaf}: {text}\n"
            if parent == "worker"
            else f"worker: {{replicas: 1}}\n{leaf}: {text}\n"
        )
        out.append(raw(f"yaml11-number-{i}-{text}", body, key))
    for word in ("yes", "no", "on", "off", "Yes", "NO", "y", "n", "On"):
        out.append(
            raw(
                f"yaml11-bool-{word}",
                HEAD + f"worker: {{replicas: 1}}\nlegacy_tf1_flags: {word}\n",
                "legacy_tf1_flags",
            )
        )
    return out


def _keys_and_shapes() -> list[Case]:
    return [
        bad("astral-char-env", "env", {"GREETING": "hi 🚀"}, "env.GREETING"),
        bad("astral-char-args", "args", ["--name=🚀"], "args[0]"),
        Case("invalid-utf8", b"name: \xff\xfe\n", "spec"),
    ]


def _quantities() -> list[Case]:
    out = []
    for i, value in enumerate(_VALUES["quantities"]):
        out.append(bad(f"quantity-{i}", "worker.resources.memory", value))
    out.append(bad("quantity-float-inf", "worker.resources.cpu", 1e309))
    out.append(bad("quantity-bool", "worker.resources.cpu", True))
    out.append(bad("quantity-list", "worker.resources.cpu", ["1"]))
    out.append(
        bad(
            "quantity-limit-below-request",
            "worker.resources",
            {"cpu": "2", "cpu_limit": "1"},
            "worker.resources.cpu_limit",
        )
    )
    out.append(bad("quantity-pvc-arabic", "storage", {"data": {"size": "١٠Gi"}}, "storage.data.size"))
    return out


def _gpus_and_labels() -> list[Case]:
    out = []
    for i, res in enumerate(_VALUES["gpu_resources"]):
        out.append(
            bad(
                f"gpu-resource-{i}",
                "worker.resources",
                {"gpus": 1, "gpu_resource": res},
                "worker.resources.gpu_resource",
            )
        )
    for i, key in enumerate(_VALUES["reserved_label_keys"]):
        out.append(bad(f"reserved-label-{i}", "labels", {key: "x"}, f"labels.{key}"))
    for i, (key, value) in enumerate(
        [
            ("bad key!", "x"),
            ("a/b/c", "x"),
            ("team", "has space"),
            ("team", "x" * 64),
            ("x" * 64, "y"),
            ("team", "-lead"),
        ]
    ):
        out.append(bad(f"invalid-label-{i}", "labels", {key: value}, "labels"))
    return out


def _names_and_numbers() -> list[Case]:
    out = []
    for i, name in enumerate(
        ["UPPER", "1starts-with-digit", "has_underscore", "a" * 64, "", "-x", "x-", "a.b", "ñ", "a\nb"]
    ):
        out.append(bad(f"name-{i}", "name", name))
    out.append(bad("name-too-long-for-tasks", "name", "a" * 55))
    for i, (path, value) in enumerate(
        [
            ("worker.replicas", 0),
            ("worker.replicas", -1),
            ("worker.replicas", 10_001),
            ("worker.replicas", 10**100),
            ("ps.replicas", 1001),
            ("port", 0),
            ("port", 65536),
            ("port", -1),
            ("max_duration_seconds", 0),
            ("max_duration_seconds", 10**12),
            ("retries_per_index", -1),
            ("ps_grace_seconds", 10**9),
            ("permanent_exit_codes", [0]),
            ("permanent_exit_codes", [256]),
            ("permanent_exit_codes", "1"),
            ("mode", "async"),
            ("mode", None),
            ("namespace", "Bad_NS"),
            ("image", "has space"),
            ("image", "a{{b}}"),
            ("image_pull_policy", "Sometimes"),
            ("image_pull_secrets", ["Bad_Secret"]),
            ("service_account", "Bad SA"),
            ("legacy_tf1_flags", "true"),
            ("namespace_per_training", 1),
            ("chief", {"replicas": 2}),
            ("evaluator", {"replicas": 2}),
            ("env", {"TFK_ROLE": "x"}),
            ("env", {"TF_CONFIG": "{}"}),
            ("env", {"1BAD": "x"}),
        ]
    ):
        out.append(bad(f"field-{i}-{path}", path, value))
    out.append(
        Case("mode-all-reduce-with-ps", _yaml(with_("mode", "all_reduce")), "ps", with_("mode", "all_reduce"))
    )
    ps_chief = with_("mode", "parameter_server")
    out.append(Case("mode-ps-without-chief", _yaml(ps_chief), "chief", ps_chief))
    return out


def _objects_too_big() -> list[Case]:
    big = with_("worker.replicas", 10_000)
    big["name"] = "a" * 40
    big["ps"] = {"replicas": 1000}
    huge_env = with_("env", {f"V{i}": "x" * 1000 for i in range(600)})
    # --ps_hosts/--worker_hosts list every task: built by the launcher, in the process of
    # a Python script; a shell script would get them through an exec, which Linux refuses.
    legacy = {**big, "legacy_tf1_flags": True}
    legacy_sh = {**legacy, "command": ["sh", "/opt/train.sh"]}
    return [
        # The address map no longer grows with the task count: this is an ordinary object now.
        Case("object-10000-workers-1000-ps-long-name", _yaml(big), None, big),
        Case("object-10000-workers-legacy-flags", _yaml(legacy), None, legacy),
        Case("exec-10000-workers-legacy-flags-shell", _yaml(legacy_sh), "worker.replicas", legacy_sh),
        Case("object-env-600kb", _yaml(huge_env), "env", huge_env),
    ]


def _cli_only() -> list[Case]:
    base = _yaml(BASE)
    ident = ("--dag-id", "d", "--task-id", "t", "--run-id", "r")
    return [
        raw("cli-map-index-huge", base, "map_index", *ident, "--map-index", str(10**100)),
        raw("cli-map-index-negative", base, "map_index", *ident, "--map-index", "-5"),
        raw("cli-run-id-too-long", base, "run_id", "--dag-id", "d", "--task-id", "t", "--run-id", "r" * 300),
        raw("cli-namespace-bad", base, "namespace", "--namespace", "Not Valid"),
    ]


def _accepted() -> list[Case]:
    return [
        ok("ok-base", BASE),
        ok("ok-all-reduce", {**{k: v for k, v in BASE.items() if k != "ps"}, "mode": "all_reduce"}),
        ok("ok-parameter-server", {**BASE, "mode": "parameter_server", "chief": {"replicas": 1}}),
        ok("ok-evaluator", {**BASE, "evaluator": {"replicas": 1}}),
        ok(
            "ok-gpu",
            with_(
                "worker.resources",
                {"cpu": "500m", "memory": "2Gi", "gpus": 2, "gpu_resource": "nvidia.com/gpu"},
            ),
        ),
        ok("ok-gpu-amd", with_("worker.resources", {"gpus": 1, "gpu_resource": "amd.com/gpu"})),
        ok(
            "ok-quantities",
            with_(
                "worker.resources", {"cpu": "1.5", "memory": "1e9", "cpu_limit": "2", "memory_limit": "1Gi"}
            ),
        ),
        ok(
            "ok-quoted-octal-in-env",
            with_("env", {"MODE": "0644", "DEBUG": "yes", "T": "1:30", "DAY": "2024-01-01"}),
        ),
        ok("ok-unicode-env", with_("env", {"GREETING": "grüß dich ١٢ 日本", "EMPTY": ""})),
        ok("ok-dollar-env", with_("env", {"A": "$(HOME)", "B": "$$x"})),
        ok("ok-labels", with_("labels", {"team": "vision", "example.com/cost-center": "42"})),
        ok("ok-node-selector", with_("worker.node_selector", {"kubernetes.io/arch": "amd64"})),
        ok(
            "ok-tolerations",
            with_("worker.tolerations", [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]),
        ),
        ok("ok-name-max", {**BASE, "name": "a" * 40}),
        ok("ok-storage", with_("storage", {"data": {"size": "10Gi"}, "models": {"claim": "shared-models"}})),
        ok("ok-deadline", {**BASE, "max_duration_seconds": 3600, "retries_per_index": 2}),
        ok("ok-legacy-flags", {**BASE, "legacy_tf1_flags": True}),
        ok("ok-args", {**BASE, "args": ["--steps=10", "--lr", "0.1", "日本"]}),
        ok("ok-many-workers", with_("worker.replicas", 2000)),
        ok(
            "ok-identity",
            BASE,
            "--dag-id",
            "dag",
            "--task-id",
            "train",
            "--run-id",
            "scheduled__2026-01-01T00:00:00+00:00",
            "--map-index",
            "2147483647",
        ),
        ok("ok-per-training-ns", {**BASE, "namespace": "team", "namespace_per_training": True}),
    ]


def cases() -> list[Case]:
    out = (
        _bombs()
        + _depth_and_size()
        + _refused_texts()
        + _yaml11()
        + _keys_and_shapes()
        + _quantities()
        + _gpus_and_labels()
        + _names_and_numbers()
        + _objects_too_big()
        + _cli_only()
        + _accepted()
    )
    ids = [c.id for c in out]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    return out


def bounded(fn: Any) -> tuple[object, float, int]:
    """Run ``fn``; (result or exception, CPU seconds, peak traced bytes). CPU time, not wall
    time: the bound is on the work a case costs, which a busy machine does not change."""
    import time
    import tracemalloc

    tracemalloc.start()
    t0 = time.process_time()
    try:
        result: object = fn()
    except Exception as exc:  # classified by the caller
        result = exc
    seconds = time.process_time() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return result, seconds, peak
