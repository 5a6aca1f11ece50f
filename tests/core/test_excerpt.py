"""Failure excerpts and verdict messages a user reads (issue 10, item 11)."""

from __future__ import annotations

import json

from airflow_tfk.core.errors import TrainingFailed
from airflow_tfk.core.excerpt import failure_excerpt
from airflow_tfk.core.status import ClusterStatus, Phase, TaskStatus
from airflow_tfk.run.policies import Outcome, evaluate
from airflow_tfk.spec.cluster import Mode

NOISY_LOG = "\n".join(
    [
        "2026-11-22 10:00:00.123456: I tensorflow/core/util/port.cc:153] oneDNN custom operations are on.",
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
        "I0000 00:00:1763805600.123456    1234 cpu_feature_guard.cc:210] This TensorFlow binary is"
        " optimized to use available CPU instructions in performance-critical operations.",
        "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow.",
        "Traceback (most recent call last):",
        '  File "train.py", line 3, in <module>',
        "ValueError: bad batch size",
        *[json.dumps({"tfk": "progress", "step": i, "total": 100}) for i in range(100)],
        "2026-11-22 10:00:09.000000: W tensorflow/core/kernels/data/x.cc:1] noise after",
    ]
)


def test_excerpt_keeps_the_traceback_and_drops_runtime_noise_and_progress() -> None:
    out = failure_excerpt(NOISY_LOG)
    assert out.splitlines() == [
        "Traceback (most recent call last):",
        '  File "train.py", line 3, in <module>',
        "ValueError: bad batch size",
    ]


def test_excerpt_is_bounded() -> None:
    out = failure_excerpt("\n".join(f"line {i} " + "x" * 500 for i in range(1000)))
    assert len(out.splitlines()) <= 20 and len(out) <= 4000


def test_message_prefix_appears_once() -> None:
    task = TaskStatus("worker", 1, Phase.FAILED, "ExitCode", "ValueError: boom", 1, 0)
    v = evaluate(Mode.ALL_REDUCE, {"worker": 2}, ClusterStatus(tasks=(task,)))
    err = TrainingFailed(task.name, task.reason, v.message)
    assert str(err).count("task worker-1 failed") == 1, str(err)
    assert str(err) == "task worker-1 failed (ExitCode, exit code 1): ValueError: boom"


def done(role: str, index: int) -> TaskStatus:
    return TaskStatus(role, index, Phase.SUCCEEDED, "Completed", "", 0, 0)


def past_deadline(role: str, index: int) -> TaskStatus:
    """Killed by the cluster's deadline (activeDeadlineSeconds: SIGTERM, exit 143)."""
    return TaskStatus(role, index, Phase.FAILED, "DeadlineExceeded", "", 143, 0)


def test_deadline_blames_the_decisive_task_that_never_finished() -> None:
    tasks = (past_deadline("ps", 0), done("worker", 0), past_deadline("worker", 1))
    v = evaluate(Mode.BETWEEN_GRAPH, {"ps": 1, "worker": 2}, ClusterStatus(tasks=tasks))
    assert v.outcome is Outcome.FAILED and v.failed_task.name == "worker-1", v


def test_decisive_success_is_a_success_whatever_the_ps_say() -> None:
    """A retry after the deadline: the PS were killed by it, the workers had finished."""
    tasks = (past_deadline("ps", 0), done("worker", 0), done("worker", 1))
    v = evaluate(Mode.BETWEEN_GRAPH, {"ps": 1, "worker": 2}, ClusterStatus(tasks=tasks))
    assert v.outcome is Outcome.SUCCEEDED
    chief_done = (done("chief", 0), past_deadline("ps", 0), past_deadline("worker", 0))
    v = evaluate(Mode.PARAMETER_SERVER, {"chief": 1, "ps": 1, "worker": 1}, ClusterStatus(tasks=chief_done))
    assert v.outcome is Outcome.SUCCEEDED


def test_a_ps_job_past_the_deadline_first_still_blames_the_unfinished_worker() -> None:
    """Kubernetes: each role's Job meets the shared deadline on its own, so the PS Job can
    be failed while the workers' Job is not yet: the worker never finished, not the PS."""
    tasks = (
        TaskStatus(
            "ps", 0, Phase.FAILED, "DeadlineExceeded", "Job was active longer than specified deadline"
        ),
        TaskStatus("worker", 0, Phase.SUCCEEDED, "Completed", "", 0, 0),
        TaskStatus("worker", 1, Phase.RUNNING),
    )
    v = evaluate(Mode.BETWEEN_GRAPH, {"ps": 1, "worker": 2}, ClusterStatus(tasks=tasks))
    assert v.outcome is Outcome.FAILED and v.failed_task.name == "worker-1", v
    assert v.message.startswith("task worker-1 failed (DeadlineExceeded)"), v.message
    failed_ps = (tasks[0], TaskStatus("ps", 1, Phase.FAILED, "ExitCode", "boom", 1), tasks[2])
    v = evaluate(Mode.BETWEEN_GRAPH, {"ps": 2, "worker": 1}, ClusterStatus(tasks=failed_ps))
    assert v.failed_task.name == "ps-1", v  # a PS that failed by itself is still blamed


BANNER = "[tfk] App: mode parameter_server, task worker-0, strategy ParameterServerStrategy"


def _first_line(task: TaskStatus) -> str:
    v = evaluate(Mode.ALL_REDUCE, {"worker": 1}, ClusterStatus(tasks=(task,)))
    return str(TrainingFailed(task.name, task.reason, v.message)).splitlines()[0]


def test_the_first_line_is_the_exception_not_the_start_up_banner() -> None:
    log = "\n".join(
        [
            BANNER,
            "Traceback (most recent call last):",
            '  File "a.py", line 1',
            "KeyError: 'label'",
            "(full log: x)",
        ]
    )
    first = _first_line(TaskStatus("worker", 0, Phase.FAILED, "ExitCode", log, 1, 0))
    assert first == "task worker-0 failed (ExitCode, exit code 1): KeyError: 'label'"


def test_a_dotted_tensorflow_error_is_the_cause() -> None:
    log = f"{BANNER}\ntensorflow.python.framework.errors_impl.UnavailableError: ps-0 is gone\nexiting"
    first = _first_line(TaskStatus("worker", 0, Phase.FAILED, "ExitCode", log, 1, 0))
    assert first.endswith(": tensorflow.python.framework.errors_impl.UnavailableError: ps-0 is gone")


def test_a_signal_exit_says_which_signal_and_what_it_usually_means() -> None:
    for code in (137, -9):  # a pod's 128 + 9; Python's subprocess says -9
        first = _first_line(
            TaskStatus("worker", 0, Phase.FAILED, "ExitCode", f"{BANNER}\n(full log: x)", code, 0)
        )
        assert "SIGKILL" in first and "memory" in first, first
    first = _first_line(TaskStatus("worker", 0, Phase.FAILED, "Error", BANNER, 143, 0))
    assert "SIGTERM" in first


def test_no_cause_keeps_the_excerpt() -> None:
    first = _first_line(TaskStatus("worker", 0, Phase.FAILED, "ExitCode", "just a line", 3, 0))
    assert first == "task worker-0 failed (ExitCode, exit code 3): just a line"


def test_oomkilled_keeps_the_backends_words_without_a_second_explanation() -> None:
    task = TaskStatus(
        "worker", 1, Phase.FAILED, "OOMKilled", "the container exceeded its memory limit", 137, 0
    )
    v = evaluate(Mode.ALL_REDUCE, {"worker": 2}, ClusterStatus(tasks=(task,)))
    assert (
        v.message
        == "task worker-1 failed (OOMKilled, exit code 137): the container exceeded its memory limit"
    )
