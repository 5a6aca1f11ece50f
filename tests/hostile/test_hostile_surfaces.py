"""Hostile training files for the surfaces added after the first rounds: the ``sweep:``
block, asset schedules, the publish's scaling, exposure and approval options, and
TensorBoard. The runners, bounds and outcomes are those of
:mod:`hostile.test_hostile_dagfactory`: each case is refused within 1 CPU-s and 100 MB
naming the field, or accepted; never a crash, a hang or code executed (the Jinja payloads
write a marker file, which must never exist).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .test_hostile_dagfactory import (
    PAYLOADS,
    Case,
    _warm,  # noqa: F401 - the module's fixture: imports once, so the bounds measure each case
    run_case,
    summarize,
    training,
)

FILE = ("folder", "cli", "api")
#: payloads that reach code or memory when rendered outside the sandbox
JINJA = ("cycler-globals", "params-class", "macros-module", "string-bomb", "range-bomb")
LR = {"lr": {"low": 0.001, "high": 0.1}}


def sweep(**fields: Any) -> dict[str, Any]:
    return training(sweep={"n_trials": 2, "search_space": LR, **fields})


def choice(value: Any) -> dict[str, Any]:
    return sweep(search_space={"opt": {"type": "categorical", "choices": [value, "b"]}})


PUBLISH = {"model_name": "m", "claim": "models"}
EXPOSED = {"network_policy": {"allow_from": [{"namespace_labels": {"team": "edge"}}]}}


def publish(**serving: Any) -> dict[str, Any]:
    return training(publish={**PUBLISH, "serving": {**EXPOSED, **serving}})


def schedule(value: Any) -> dict[str, Any]:
    return training(schedule=value)


def _sweep_cases() -> list[Case]:
    out = [
        Case(f"sweep-jinja-{where}-{name}", FILE, f"sweep.{where}", sweep(**{where: PAYLOADS[name]}))
        for where in ("storage", "study_name", "objective")
        for name in JINJA
    ]
    out += [
        Case(f"sweep-jinja-choice-{name}", FILE, "sweep.search_space.opt", choice(PAYLOADS[name]))
        for name in JINJA
    ]
    bad = {
        "nul": "a\x00b",
        "emoji": "\U0001f680",
        "lone-surrogate": "\ud800",
        "too-long-for-exec": "x" * 140_000,
        "nan": float("nan"),
        "inf": float("inf"),
        "nested-list": ["a"],
        "mapping": {"a": 1},
    }
    # A training file cannot spell these (this corpus writes JSON text, ASCII-escaped): the
    # Python API can.
    api_only = ("emoji", "lone-surrogate", "nan", "inf")
    out += [
        Case(
            f"sweep-choice-{k}",
            ("api",) if k in api_only else FILE,
            "sweep.search_space.opt.choices[0]",
            choice(v),
        )
        for k, v in bad.items()
    ]
    out += [
        Case("sweep-choice-ok", FILE, None, choice("relu")),
        Case("sweep-choice-numbers-ok", FILE, None, choice(0.5)),
        Case("sweep-choice-bool-ok", FILE, None, choice(True)),
        Case("sweep-choice-unicode-ok", FILE, None, choice("grüß ١٢ 日本")),
    ]
    for name, value in {
        "escape": "a\x1b[31mb",
        "newline": "a\nb",
        "bidi": "abc\u202eevil",
        "nul": "a\x00b",
        "too-long": "s" * 600,
    }.items():
        out.append(Case(f"sweep-study-name-{name}", FILE, "sweep.study_name", sweep(study_name=value)))
        out.append(Case(f"sweep-objective-{name}", FILE, "sweep.objective", sweep(objective=value)))
        out.append(Case(f"sweep-storage-{name}", FILE, "sweep.storage", sweep(storage=value)))
    out += [
        Case("sweep-storage-escapes-root", FILE, "sweep.storage", sweep(storage="../../../../tmp/x.db")),
        Case("sweep-storage-dotdot-inside", FILE, "sweep.storage", sweep(storage="a/../../x.db")),
        Case("sweep-storage-relative-ok", FILE, None, sweep(storage="studies/s.db")),
        Case("sweep-storage-absolute-ok", FILE, None, sweep(storage="/shared/sweeps/s.db")),
        Case("sweep-storage-url-ok", FILE, None, sweep(storage="postgresql://db.example/optuna")),
        Case("sweep-sampler-unknown", FILE, "sweep.sampler.name", sweep(sampler="cmaes")),
        Case("sweep-sampler-name-unknown", FILE, "sweep.sampler.name", sweep(sampler={"name": "cmaes"})),
        Case("sweep-n-trials-huge", FILE, "sweep.n_trials", sweep(n_trials=10**400)),
        Case("sweep-n-trials-float", FILE, "sweep.n_trials", sweep(n_trials=2.0)),
        Case(
            "sweep-low-huge-int",
            FILE,
            "sweep.search_space.lr.low",
            sweep(search_space={"lr": {"low": -(10**400), "high": 1}}),
        ),
        Case(
            "sweep-flag-reserved",
            FILE,
            "sweep.search_space.tfk_model_version",
            sweep(search_space={"tfk_model_version": {"type": "int", "low": 1, "high": 2}}),
        ),
        Case(
            "sweep-flag-dash",
            FILE,
            "sweep.search_space.--x",
            sweep(search_space={"--x": {"low": 0.1, "high": 1}}),
        ),
        Case(
            "sweep-flag-control",
            FILE,
            "sweep.search_space",
            sweep(search_space={"a\x1bb": {"low": 0.1, "high": 1}}),
        ),
    ]
    return out


def _schedule_cases() -> list[Case]:
    out = [
        Case(f"schedule-ref-{name}", FILE, "schedule", schedule([value]))
        for name, value in {
            "escape": "x-tfk-pvc://a\x1b[2Jb",
            "newline": "name\nok: forged",
            "nul": "a\x00b",
            "bidi": "abc\u202eevil",
            "too-long": "a" * 1501,
            "blank": "  ",
        }.items()
    ]
    out += [
        Case("schedule-ref-name-ok", FILE, None, schedule(["raw-digits"])),
        Case("schedule-ref-uri-ok", FILE, None, schedule(["x-tfk-pvc://tfk-data/digits"])),
        Case("schedule-unicode-name-ok", FILE, None, schedule(["données-brutes"])),
        Case(
            "schedule-serving-backend-unknown",
            FILE,
            "schedule",
            schedule([{"serving": {"model_name": "m", "backend": "evil"}}]),
        ),
        Case(
            "schedule-serving-backend-ok",
            FILE,
            None,
            schedule([{"serving": {"model_name": "m", "backend": "local"}}]),
        ),
        Case(
            "schedule-data-traversal",
            FILE,
            "schedule",
            schedule([{"data": {"claim": "c", "path": "a/../../etc"}}]),
        ),
        Case("schedule-condition-nested-ok", FILE, None, schedule({"any": ["a", {"all": ["b", "c"]}]})),
    ]
    return out


def _publish_cases() -> list[Case]:
    big = {f"k{i}": "x" * 4000 for i in range(80)}
    return [
        Case(
            "ingress-host-ipv4", FILE, "publish.serving.ingress.host", publish(ingress={"host": "10.0.0.1"})
        ),
        Case("ingress-host-ok", FILE, None, publish(ingress={"host": "ml.example.com"})),
        Case("ingress-host-wildcard-ok", FILE, None, publish(ingress={"host": "*.example.com"})),
        # the Gateway API CRD's hostname pattern admits dotted IPv4 (the API server stores
        # it: tests/k8s_integration/test_serving_scale.py), and the spec takes what it takes
        Case(
            "route-hostname-ipv4-ok",
            FILE,
            None,
            publish(http_route={"parent_refs": [{"name": "g"}], "hostnames": ["192.168.1.1"]}),
        ),
        Case(
            "route-hostname-ipv6",
            FILE,
            "publish.serving.http_route.hostnames[0]",
            publish(http_route={"parent_refs": [{"name": "g"}], "hostnames": ["fd00::1"]}),
        ),
        Case(
            "ingress-annotations-over-256k",
            FILE,
            "publish.serving.ingress.annotations",
            publish(ingress={"annotations": big}),
        ),
        Case(
            "ingress-annotation-emoji",
            ("api",),
            "publish.serving.ingress.annotations.a",
            publish(ingress={"annotations": {"a": "\U0001f680"}}),
        ),
        Case(
            "ingress-annotation-nul",
            FILE,
            "publish.serving.ingress.annotations.a",
            publish(ingress={"annotations": {"a": "a\x00"}}),
        ),
        Case(
            "ingress-annotation-ok",
            FILE,
            None,
            publish(ingress={"annotations": {"nginx.ingress.kubernetes.io/proxy-body-size": "8m"}}),
        ),
        Case("serving-image-escape", FILE, "publish.serving.image", publish(image="tf\x1b[0m:1")),
        Case(
            "serving-sub-path-emoji",
            ("api",),
            "publish.sub_path",
            training(publish={**PUBLISH, "sub_path": "\U0001f680"}),
        ),
        Case(
            "autoscaling-huge",
            FILE,
            "publish.serving.autoscaling.max_replicas",
            publish(autoscaling={"max_replicas": 10**400}, resources={"cpu": "1"}),
        ),
        Case(
            "autoscaling-bool",
            FILE,
            "publish.serving.autoscaling.max_replicas",
            publish(autoscaling={"max_replicas": True}, resources={"cpu": "1"}),
        ),
        Case(
            "max-unavailable-nan",
            FILE,
            "publish.serving.max_unavailable",
            publish(max_unavailable=float("nan")),
        ),
        Case(
            "approval-subject-newline",
            FILE,
            "publish.approval.subject",
            training(publish={**PUBLISH, "approval": {"subject": "ok\n| forged |"}}),
        ),
        Case(
            "approval-subject-escape",
            FILE,
            "publish.approval.subject",
            training(publish={**PUBLISH, "approval": {"subject": "a\x1b[2J"}}),
        ),
        Case(
            "approval-timeout-negative",
            FILE,
            "publish.approval.timeout_seconds",
            training(publish={**PUBLISH, "approval": {"timeout_seconds": -1}}),
        ),
        Case(
            "approval-timeout-nan",
            FILE,
            "publish.approval.timeout_seconds",
            training(publish={**PUBLISH, "approval": {"timeout_seconds": float("nan")}}),
        ),
        Case(
            "approval-ok",
            FILE,
            None,
            training(publish={**PUBLISH, "approval": {"subject": "Ship digits?", "timeout_seconds": 600}}),
        ),
    ]


def cluster(**fields: Any) -> dict[str, Any]:
    data = training()
    data["cluster"].update(fields)
    return data


def _exec_and_object_cases() -> list[Case]:
    """Accepted by the spec once, refused by Linux's exec or the API server: never again."""
    exec_max = 32 * 4096 - 1
    big = {f"k{i}": "x" * 4000 for i in range(70)}
    return [
        Case("exec-arg-over-max-arg-strlen", FILE, "cluster.args[0]", cluster(args=["x" * (exec_max + 1)])),
        Case("exec-arg-at-max-arg-strlen-ok", FILE, None, cluster(args=["x" * exec_max])),
        Case(
            "exec-command-word-over", FILE, "cluster.command[1]", cluster(command=["python", "y" * 140_000])
        ),
        Case("exec-env-over", FILE, "cluster.env.BIG", cluster(env={"BIG": "z" * exec_max})),
        Case(
            "exec-role-env-over",
            FILE,
            "cluster.worker.env.BIG",
            cluster(worker={"replicas": 1, "env": {"BIG": "z" * exec_max}}),
        ),
        Case("pod-annotations-over-256k", FILE, "cluster.pod.annotations", cluster(pod={"annotations": big})),
        Case(
            "pod-annotations-joined-over-256k",
            FILE,
            "cluster.worker.pod.annotations",
            cluster(
                pod={"annotations": {f"c{i}": "x" * 4000 for i in range(35)}},
                worker={"replicas": 1, "pod": {"annotations": {f"r{i}": "x" * 4000 for i in range(35)}}},
            ),
        ),
        Case(
            "pod-annotation-emoji",
            ("api",),
            "cluster.pod.annotations.a",
            cluster(pod={"annotations": {"a": "\U0001f680"}}),
        ),
        Case("image-emoji", ("api",), "cluster.image", cluster(image="tf:\U0001f680")),
        Case(
            "route-gateway-twice",
            FILE,
            "publish.serving.http_route.parent_refs[1]",
            publish(http_route={"parent_refs": [{"name": "g"}, {"name": "g"}]}),
        ),
        Case(
            "route-gateway-twice-two-listeners-ok",
            FILE,
            None,
            publish(
                http_route={
                    "parent_refs": [{"name": "g", "section_name": "a"}, {"name": "g", "section_name": "b"}]
                }
            ),
        ),
    ]


CASES = _sweep_cases() + _schedule_cases() + _publish_cases() + _exec_and_object_cases()
RESULTS: list[tuple[str, str, str]] = []


@pytest.mark.parametrize(
    ("case", "interface"),
    [(c, i) for c in CASES for i in c.interfaces],
    ids=[f"{c.id}-{i}" for c in CASES for i in c.interfaces],
)
def test_case(case: Case, interface: str, tmp_path: Path) -> None:
    run_case(case, interface, tmp_path, RESULTS)


def test_summary(capsys: pytest.CaptureFixture[str]) -> None:
    """The table of outcomes (``pytest tests/hostile/test_hostile_surfaces.py -s``)."""
    summarize(RESULTS, capsys)
    assert len(CASES) >= 80
    assert json.dumps([c.id for c in CASES]).count('"') == 2 * len({c.id for c in CASES})  # unique ids
