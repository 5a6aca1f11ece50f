"""Messages a user reads when publishing (issue 10, item 11)."""

from __future__ import annotations

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.serving.base import ServingError
from tests.serving.fakes import FakeServing
from tests.serving.test_publish import make, run


class NoSample(FakeServing):
    def sample_request(self, version: int):  # as a missing version has none
        return None if version not in self.behaviour else super().sample_request(version)


def test_publishing_a_missing_version_says_it_is_missing() -> None:
    target = make({1: "ok", 2: "ok"})
    target.__class__ = NoSample
    with pytest.raises(ServingError, match=r"version 7 is not in the model store .*exported versions: 1, 2"):
        run(target, 7)


@pytest.mark.parametrize("bad", [3.9, "3.9", "3.0", "1e3", "٣", "", "v3", True, -1, 10**30])
def test_a_version_that_is_not_an_integer_is_refused(bad) -> None:
    from airflow_tfk.operators.serving import TFPublishModelOperator

    if bad == "":
        op = TFPublishModelOperator(task_id="publish", model_name="digits", version=bad)
        assert op._version() is None  # empty: the newest exported
        return
    # Refused where it is given when its type is wrong already, else (a string, possibly
    # a template) as rendered: both before anything is published, naming the field.
    with pytest.raises(SpecError, match="^version"):
        TFPublishModelOperator(task_id="publish", model_name="digits", version=bad)._version()
