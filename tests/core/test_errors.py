"""The user-facing error types: message shape, bounded values, and a round trip through
pickle (errors cross process boundaries: the triggerer, multiprocessing, Airflow's runner)."""

import pickle

import pytest

from airflow_tfk.core.errors import ClusterOwnershipError, LocalMachineError, SpecError, short_repr


@pytest.mark.parametrize(
    "exc, base",
    [
        (SpecError("worker.replicas", "must be >= 1", 0), ValueError),
        (SpecError("image", "must not be empty"), ValueError),
        (LocalMachineError("port", "is taken by another process", 2222), RuntimeError),
        (ClusterOwnershipError("tfk-a", "belongs to dag x"), SpecError),
    ],
)
def test_field_errors_name_the_field_and_survive_pickle(exc, base):
    assert isinstance(exc, base)
    assert str(exc).startswith(f"{exc.field}: {exc.rule}")
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is type(exc)
    assert (str(back), back.field, back.rule, back.value) == (str(exc), exc.field, exc.rule, exc.value)


def test_value_in_message_is_bounded():
    exc = SpecError("env", "too big", {"k": "v" * 10_000, "n": 10**5000})
    assert len(str(exc)) < 300
    assert len(short_repr(list(range(10**5)))) <= 200


def test_several_spec_errors_travel_as_one_with_every_path():
    import pickle

    from airflow_tfk.core.errors import SpecError, SpecErrors

    errors = SpecErrors(
        [SpecError("worker.replicas", "must be between 1 and 10000", 0), SpecError("port", "bad")]
    )
    errors.errors[1].line = 7
    back = pickle.loads(pickle.dumps(errors))
    assert isinstance(back, SpecError) and back.field == "worker.replicas"
    assert [(e.field, e.line) for e in back.errors] == [("worker.replicas", None), ("port", 7)]
    assert str(back) == "worker.replicas: must be between 1 and 10000 (got 0); port: bad"
