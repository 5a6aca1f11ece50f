"""The API server's checks that no schema says, offline: every case of the generated
corpus (tests/render/pod_parity_corpus.py) is refused by render naming the field it came
from, or accepted; tests/k8s_integration/test_api_parity.py holds the same verdicts
against the real API server."""

from __future__ import annotations

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.render.manifests import render
from airflow_tfk.render.pod_semantics import pod_spec_errors
from airflow_tfk.spec.cluster import TFClusterSpec
from tests.render.pod_parity_corpus import cases


def offline_verdict(data: dict) -> SpecError | None:
    """None when the spec validates and renders; else the (first) refusal."""
    try:
        render(TFClusterSpec.from_dict(data))
    except SpecError as exc:
        return exc
    except Exception as exc:  # SpecErrors: several
        items = getattr(exc, "items", None)
        if items:
            return items[0]
        raise
    return None


CASES = cases()


def test_the_corpus_is_large_and_both_ways() -> None:
    assert len(CASES) >= 100, len(CASES)
    assert len({c.id for c in CASES}) == len(CASES)
    refused = sum(c.refused is not None for c in CASES)
    assert 40 <= refused <= len(CASES) - 30, refused


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_each_case_is_judged_as_the_api_server_does_naming_the_field(case) -> None:
    err = offline_verdict(case.spec)
    if case.refused is None:
        assert err is None, f"{case.id}: refused offline: {err}"
    else:
        assert err is not None, f"{case.id}: accepted offline"
        assert err.field.startswith(case.refused), (case.id, err.field, str(err))


def test_the_listed_refusals_say_why() -> None:
    platform = {"shareProcessNamespace": True, "containers": [{"name": "tensorflow"}]}
    shown = {
        "hostPID": {**platform, "hostPID": True},
        "ephemeralContainers": {**platform, "ephemeralContainers": [{"name": "d"}]},
        "os.name": {
            **platform,
            "os": {"name": "windows"},
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        },
        "priority": {**platform, "priority": 1},
        "overhead": {**platform, "overhead": {"cpu": "1"}},
        "maxSkew": {
            **platform,
            "topologySpreadConstraints": [{"maxSkew": 0, "whenUnsatisfiable": "DoNotSchedule"}],
        },
    }
    for what, spec in shown.items():
        errors = list(pod_spec_errors({"spec": spec}))
        assert len(errors) == 1 and errors[0][0].endswith(what), (what, errors)
    assert list(pod_spec_errors({"spec": platform})) == []
