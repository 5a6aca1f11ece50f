"""The TF2 loops' progress on a real parameter_server cluster: the first line at once,
and every line's step within 1 % of the steps the workers had really finished by then."""

import bisect
import sys

import pytest

from airflow_tfk.runtime.progress import parse_line

from .counting_app import MARK

pytestmark = pytest.mark.e2e


def ps_cluster(local_cluster, module: str, workers: int, *flags: str, **options):
    """A parameter_server cluster (a chief, one PS, ``workers``) whose every task runs
    ``python -m module *flags`` without checkpoints."""
    argv = [sys.executable, "-m", module, *flags, "--tfk_checkpoint_every", "0"]
    return local_cluster(
        {"chief": 1, "ps": 1, "worker": workers}, lambda role, i: argv, mode="parameter_server", **options
    )


def test_parameter_server_progress_is_the_true_step(local_cluster):
    steps, every = 600, 50
    c = ps_cluster(
        local_cluster,
        "tests.runtime.counting_app",
        2,
        "--tfk_steps",
        str(steps),
        "--tfk_progress_every",
        str(every),
    )
    c.start_all()
    assert c.wait("chief", 0, timeout=240) == 0, c.describe()
    lines = [p for p in map(parse_line, c.stdout("chief", 0).splitlines()) if p is not None]
    # when each step really finished, from the workers' own logs
    finished = sorted(
        float(line.split()[1])
        for i in range(2)
        for line in c.stderr("worker", i).splitlines()
        if line.startswith(MARK)
    )
    assert len(finished) == steps
    assert lines[0].step == 0 and lines[0].status == "running"  # before the first step
    running = [p for p in lines if p.status == "running"]
    # a line for every `every` steps, from the first interval on (no 40-step lag, no
    # short run reduced to its last line)
    assert [p.step // every for p in running] == list(range(steps // every + 1)), [p.step for p in running]
    # Each line is the step the cluster had finished when it was printed, not the step it
    # scheduled (the queue holds seconds of steps). Two paces (20 steps) of slack: the
    # counter a marker reads is a moment old when the line is printed, and on a loaded
    # machine the workers finish steps in that moment.
    for p in running[1:]:
        true_step = bisect.bisect_right(finished, p.time)
        assert abs(p.step - true_step) <= 20, (p.step, true_step)
    assert lines[-1].status == "done" and lines[-1].step == steps


def test_parameter_server_trains_when_tensorflow_is_given_one_inter_op_thread(local_cluster):
    """TF_NUM_INTEROP_THREADS=1 (or a task pinned to one CPU) used to leave the chief
    waiting forever after step 0: a worker server with one inter-op thread never runs the
    coordinator's first closure. The runtime gives the servers two."""
    c = ps_cluster(
        local_cluster,
        "airflow_tfk.runtime.examples.digits_app",
        1,
        "--tfk_steps",
        "20",
        env={"TF_NUM_INTEROP_THREADS": "1"},
    )
    c.start_all()
    assert c.wait("chief", 0, timeout=150) == 0, c.describe()
    assert [p.step for p in map(parse_line, c.stdout("chief", 0).splitlines()) if p][-1] == 20
    for role in ("worker", "ps"):
        assert "2 inter-op threads for the server" in c.stderr(role, 0), c.describe()
    assert "inter-op" not in c.stderr("chief", 0)


class _Marker:
    def __init__(self, values=None, error=None):
        self.values, self.error = values, error

    def fetch(self):
        if self.error is not None:
            raise self.error
        return self.values


def test_a_marker_whose_worker_died_is_skipped_and_other_errors_are_not(capsys):
    """CI saw the chief of a parameter_server training exit 75 when a worker was killed
    and restarted: the marker that worker had finished could no longer be copied to the
    chief. Its values are lost, not the training's: it is skipped."""
    import tensorflow as tf

    from airflow_tfk.runtime.loops import _fetch_marker

    gone = tf.errors.UnavailableError(None, None, "failed to connect to all addresses")
    assert _fetch_marker(_Marker(error=gone)) is None
    assert "a progress marker's worker went away before its values were read (UnavailableError)" in (
        capsys.readouterr().err
    )
    assert _fetch_marker(_Marker(values=(120.0, 0.5))) == (120.0, 0.5)
    with pytest.raises(tf.errors.InvalidArgumentError):
        _fetch_marker(_Marker(error=tf.errors.InvalidArgumentError(None, None, "a bug in the app")))
