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
