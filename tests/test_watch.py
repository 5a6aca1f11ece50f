from __future__ import annotations

from airflow_tfk.protocol.progress import Progress, last_progress, parse_line, progress_line
from airflow_tfk.watch import format_duration, format_progress


def test_progress_line_roundtrip_and_eta() -> None:
    line = progress_line(250, 1000, 0.5, start_time=100.0, now=150.0)
    p = parse_line("2026-11-22 INFO " + line)
    assert p == Progress(250, 1000, 0.5, 100.0, 150.0, "running")
    assert p.fraction == 0.25
    assert p.eta_seconds() == 150.0  # 50 s for 250 steps -> 150 s for the other 750
    assert format_progress(p) == "step 250/1000 (25.0%), loss 0.5000, elapsed 0:00:50, ETA 0:02:30"


def test_noise_is_not_progress() -> None:
    assert parse_line("step 3 loss 0.1") is None
    assert parse_line('{"tfk": "other", "step": 1}') is None
    assert parse_line('{"tfk": "progress", "step": "x"}') is None
    text = "\n".join(
        [
            progress_line(1, 10, None, 0.0, now=1.0),
            "garbage {",
            progress_line(2, 10, None, 0.0, now=2.0),
            "Traceback...",
        ]
    )
    assert last_progress(text).step == 2


def test_eta_unknown_before_first_step() -> None:
    p = Progress(0, 100, None, 10.0, 10.0)
    assert p.eta_seconds() is None
    assert format_progress(p).endswith("ETA unknown")
    assert format_duration(3725) == "1:02:05"
