"""Which servers get a bigger inter-op pool than TensorFlow would give them (pure Python:
the real-TensorFlow proof is tests/runtime/test_loops.py)."""

import pytest

from airflow_tfk.runtime.loops import MIN_PS_INTER_OP_THREADS, server_inter_op_threads


@pytest.mark.parametrize("role", ["worker", "ps"])
@pytest.mark.parametrize(
    ("env", "cpus", "want"),
    [
        ({"TF_NUM_INTEROP_THREADS": "1"}, 8, MIN_PS_INTER_OP_THREADS),
        ({"TF_NUM_INTEROP_THREADS": " 1 "}, 8, MIN_PS_INTER_OP_THREADS),
        ({}, 1, MIN_PS_INTER_OP_THREADS),  # pinned to one CPU: TensorFlow's default is 1
        ({"TF_NUM_INTEROP_THREADS": "0"}, 1, MIN_PS_INTER_OP_THREADS),  # 0 = TF's default
        ({"TF_NUM_INTEROP_THREADS": "-3"}, 1, MIN_PS_INTER_OP_THREADS),
        ({"TF_NUM_INTEROP_THREADS": "junk"}, 1, MIN_PS_INTER_OP_THREADS),
        ({"TF_NUM_INTEROP_THREADS": "²"}, 1, MIN_PS_INTER_OP_THREADS),  # isdigit(), not int()
        ({"TF_NUM_INTEROP_THREADS": "٣"}, 1, MIN_PS_INTER_OP_THREADS),  # int() is 3; TF says no
        ({"TF_NUM_INTEROP_THREADS": "2"}, 1, None),  # the user's own choice stands
        ({"TF_NUM_INTEROP_THREADS": "16"}, 1, None),
        ({}, 4, None),
    ],
)
def test_parameter_server_servers_get_at_least_two_inter_op_threads(role, env, cpus, want) -> None:
    assert server_inter_op_threads("parameter_server", role, env, cpus) == want


@pytest.mark.parametrize(
    ("mode", "role"),
    [
        ("parameter_server", "chief"),  # the coordinator ran fine with one
        ("parameter_server", "evaluator"),
        ("between_graph", "ps"),  # TF1 servers: left to the script and TensorFlow
        ("between_graph", "worker"),
        ("all_reduce", "worker"),
        (None, "worker"),
    ],
)
def test_other_tasks_keep_tensorflows_choice(mode, role) -> None:
    assert server_inter_op_threads(mode, role, {"TF_NUM_INTEROP_THREADS": "1"}, 1) is None


def test_the_default_counts_the_cpus_this_process_may_use(monkeypatch) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {3})
    assert server_inter_op_threads("parameter_server", "worker", {}) == MIN_PS_INTER_OP_THREADS
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    assert server_inter_op_threads("parameter_server", "worker", {}) is None


def test_without_sched_getaffinity_the_cpu_count_is_used(monkeypatch) -> None:
    monkeypatch.delattr("os.sched_getaffinity")  # macOS
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    assert server_inter_op_threads("parameter_server", "ps", {}) == MIN_PS_INTER_OP_THREADS
    monkeypatch.setattr("os.cpu_count", lambda: None)
    assert server_inter_op_threads("parameter_server", "ps", {}) == MIN_PS_INTER_OP_THREADS
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert server_inter_op_threads("parameter_server", "ps", {}) is None
