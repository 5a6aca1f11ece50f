"""The notice flag and the stop record the next attempt reads (pure Python)."""

from __future__ import annotations

import os
import signal

from airflow_tfk.runtime import notice


def test_sigterm_sets_the_flag_instead_of_ending_the_process():
    before = signal.getsignal(signal.SIGTERM)  # SIG_DFL alone; a pytest-xdist worker has its own
    n = notice.Notice()
    n.install()
    try:
        assert not n.received
        os.kill(os.getpid(), signal.SIGTERM)
        assert n.received and n.at is not None
    finally:
        n.uninstall()
    assert signal.getsignal(signal.SIGTERM) == before  # put back as it was


def test_the_record_states_the_steps_lost_once(tmp_path, capsys):
    notice.record_stop(str(tmp_path), "worker-0", 1287, 1000.0, "notice")
    rec = notice.take_record(str(tmp_path), "worker-0")
    assert (rec.step, rec.at, rec.why) == (1287, 1000.0, "notice")
    assert notice.take_record(str(tmp_path), "worker-0") is None  # read once
    rec.resumed(1000)  # resumed from an older checkpoint
    assert "287 step(s) lost" in capsys.readouterr().err
    rec.resumed(1290)  # the ps went on meanwhile: nothing lost
    assert "0 step(s) lost" in capsys.readouterr().err


def test_no_checkpoint_dir_no_record(tmp_path):
    notice.record_stop(None, "chief-0", 5, None, "error")
    assert notice.take_record(None, "chief-0") is None
    assert notice.take_record(str(tmp_path), "chief-0") is None


def test_the_bound_keeps_a_margin_from_the_grace():
    assert notice.notice_bound({notice.GRACE_ENV: "60"}) == (60.0, 55.0)
    assert notice.notice_bound({notice.GRACE_ENV: "10"}) == (10.0, 8.0)
    assert notice.notice_bound({notice.GRACE_ENV: "1"}) == (1.0, 0.8)
    assert notice.notice_bound({}) == (30.0, 25.0)  # Kubernetes' default grace
    assert notice.notice_bound({notice.GRACE_ENV: "nan"}) == (30.0, 25.0)


WATCHED = """
import os, signal, sys, time
from airflow_tfk.runtime import notice
n = notice.Notice(on_expiry=lambda: print("expiry hook ran", file=sys.stderr, flush=True))
n.install()
n.waiting_for("the ps:0 at 10.0.0.1:2222 that never answers")
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(60)  # a loop blocked on a peer that is gone
"""


def test_a_task_still_running_at_the_bound_says_what_it_waited_for_and_exits_76():
    import subprocess
    import sys
    import time

    from airflow_tfk.protocol.exit_codes import EXIT_PREEMPTED

    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", WATCHED],
        env={**os.environ, notice.GRACE_ENV: "2"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    took = time.monotonic() - started
    assert done.returncode == EXIT_PREEMPTED, done.stderr
    assert "still waiting for the ps:0 at 10.0.0.1:2222 that never answers" in done.stderr
    assert "expiry hook ran" in done.stderr
    assert took < 1.6 + 10, took  # the bound (2 s grace - 0.4 s), plus the interpreter's start


def test_no_watchdog_once_uninstalled():
    n = notice.Notice({notice.GRACE_ENV: "1"})
    n.install()
    n.uninstall()  # trained: a late notice is the app's to honour
    assert not n.received
    n._on_signal(signal.SIGTERM, None)
    assert n.received and n.left() <= n.bound


PEERS_GONE = """
import os, signal, time
from airflow_tfk.runtime import notice
n = notice.Notice(peers_gone=lambda: "the ps the variables live on are gone (ps:0 at 10.0.0.1:2222: refused)")
n.install()
n.waiting_for("the steps scheduled on the workers")
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(60)  # blocked on a step that will never finish
"""


def test_a_task_whose_peers_are_gone_exits_76_at_once_not_at_the_bound():
    import subprocess
    import sys

    from airflow_tfk.protocol.exit_codes import EXIT_PREEMPTED

    done = subprocess.run(
        [sys.executable, "-c", PEERS_GONE],
        env={**os.environ, notice.GRACE_ENV: "60"},  # bound 55 s: the timeout below is shorter
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == EXIT_PREEMPTED, done.stderr
    assert (
        "on notice: the ps the variables live on are gone (ps:0 at 10.0.0.1:2222: refused); "
        "the steps scheduled on the workers will never finish: exiting now with 76" in done.stderr
    )


BLOCKED_MAIN = """
import signal, sys, time
from airflow_tfk.runtime import notice
n = notice.Notice(peers_gone=lambda: "every worker is gone (worker:0 at 10.0.0.2:2222: timed out)")
n.install()
n.waiting_for("the steps scheduled on the workers")
# The main thread now runs no Python handler, as when it is blocked inside TensorFlow (a
# read of a ps variable whose pod vanished): the signal goes to another thread.
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
print("ready", flush=True)
time.sleep(60)
"""


def test_a_notice_is_taken_while_the_main_thread_is_blocked_in_native_code():
    """The SIGTERM reaches the watchdog through the wakeup fd, not the main thread's
    handler: the task ends within seconds, not when the blocked call returns (60 s here)."""
    import subprocess
    import sys
    import time

    from airflow_tfk.protocol.exit_codes import EXIT_PREEMPTED

    proc = subprocess.Popen(
        [sys.executable, "-c", BLOCKED_MAIN],
        env={**os.environ, notice.GRACE_ENV: "60"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read() if proc.stderr is not None else ""
    assert code == EXIT_PREEMPTED, err
    assert "SIGTERM: notice received" in err
    assert "every worker is gone" in err
    assert took < 5, (took, err)


GIL_HELD = """
import os, signal, sys, threading, time
from airflow_tfk.runtime import notice
n = notice.Notice(peers_gone=lambda: None)
n.install()
n.waiting_for("the steps scheduled on the workers")
threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
time.sleep(1.0)  # the notice is taken (its thread logs it)
print("ready", flush=True)
sum(range(10**12))  # C code that never lets go of the GIL: no Python thread runs again
"""


def test_a_stop_stuck_with_the_gil_held_still_writes_every_threads_stack():
    """A thread that holds the GIL inside native code keeps the watchdog (a Python thread)
    from running; faulthandler's C thread still writes where every thread is, so the log
    says what the stop waited on."""
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-c", GIL_HELD],
        env={**os.environ, notice.GRACE_ENV: "3"},  # bound 2.4 s: the stacks at 1.44 s
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(4)  # past the bound: a watchdog that could run would have ended the task
        assert proc.poll() is None  # it could not: the GIL is held
    finally:
        proc.kill()
        proc.wait()
    err = proc.stderr.read() if proc.stderr is not None else ""
    assert "SIGTERM: notice received" in err
    assert "most recent call first" in err
    assert '<string>", line 10 in <module>' in err, err  # the main thread's sum(...), named


REPLACED = """
import os, signal, sys, time
from airflow_tfk.runtime import notice
n = notice.Notice(peers_gone=lambda: "every worker is gone")
n.install()  # and never uninstalled
taken = []
signal.signal(signal.SIGTERM, lambda *a: taken.append(1))  # the signal is someone else's now
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(1.5)  # the wakeup fd's thread has read the byte by now
print("received" if n.received else "not received", len(taken), flush=True)
"""


def test_a_notice_whose_handler_was_replaced_takes_no_sigterm():
    """The wakeup fd outlives the handler: a SIGTERM that another handler took is not a
    notice (a stale notice must not end a process whose signal is now someone else's)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", REPLACED],
        env={**os.environ, notice.GRACE_ENV: "60"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["not", "received", "1"], (done.stdout, done.stderr)
