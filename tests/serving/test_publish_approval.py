"""A person's approval between the candidate's smoke test and promotion: asked with the
candidate's and the serving version's metrics; a refusal rolls back with the serving
version untouched and no request to the model's name ever reaching the candidate."""

from __future__ import annotations

import pytest

from airflow_tfk.serving.publish import NotApproved
from tests.serving.test_publish import make, model, run


def _served_first(target) -> None:
    run(target, 1, metrics={"accuracy": 0.8})


def test_approved_candidate_is_promoted_after_its_smoke_test() -> None:
    target = make({1: "ok", 2: "ok"})
    _served_first(target)
    asked = []

    def approve(request):
        asked.append(request)
        # asked while the candidate is loaded under its own name only
        assert target.config.get("digits-tfk-candidate").versions == (2,)
        assert model(target).versions == (1,) and target.label_version("stable") == 1
        assert ("digits-tfk-candidate", 2) in target.predicted
        return True

    result = run(target, 2, metrics={"accuracy": 0.9}, approve=approve)
    assert result.version == 2 and target.label_version("stable") == 2
    (request,) = asked
    assert (request["version"], request["serving_version"]) == (2, 1)
    assert request["metrics"] == {"accuracy": 0.9} and request["serving_metrics"] == {"accuracy": 0.8}


def test_rejected_candidate_is_rolled_back_and_never_served() -> None:
    target = make({1: "ok", 2: "ok"})
    _served_first(target)
    before = len(target.predicted)
    with pytest.raises(
        NotApproved, match="digits version 2 was not published: the candidate was not approved"
    ):
        run(target, 2, metrics={"accuracy": 0.9}, approve=lambda request: False)
    assert model(target).versions == (1,) and target.label_version("stable") == 1
    assert target.config.get("digits-tfk-candidate") is None
    assert all(m == "digits-tfk-candidate" for m, _ in target.predicted[before:])
    assert 2 not in target.recorded


def test_a_candidate_failing_its_smoke_test_is_never_put_to_a_person() -> None:
    target = make({1: "ok", 2: "bad_predict"})
    _served_first(target)
    asked = []
    with pytest.raises(Exception, match="was not published"):
        run(target, 2, approve=lambda request: asked.append(request) or True)
    assert asked == [] and target.label_version("stable") == 1
