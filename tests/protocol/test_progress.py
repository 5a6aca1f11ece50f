import pytest

from airflow_tfk.protocol.progress import (
    event_line,
    last_event,
    last_progress,
    parse_event,
    parse_line,
    progress_line,
)


def test_event_lines_round_trip_and_are_not_progress():
    line = event_line("export", path="/m/digits/3", model_name="digits", version=3)
    assert line.startswith('{"tfk":"export"')
    assert parse_event(line, "export") == {"path": "/m/digits/3", "model_name": "digits", "version": 3}
    assert parse_event(line, "metrics") is None
    assert parse_line(line) is None  # the watcher's reader ignores other kinds


def test_last_event_and_progress_in_a_mixed_log():
    log = "\n".join(
        [
            progress_line(10, 100, 0.5, 1.0, now=2.0),
            "INFO some tensorflow noise {not json",
            event_line("metrics", accuracy=0.9),
            progress_line(100, 100, 0.1, 1.0, status="done", now=3.0),
            event_line("metrics", accuracy=0.95),
        ]
    )
    assert last_event(log, "metrics") == {"accuracy": 0.95}
    assert last_event(log, "export") is None
    p = last_progress(log)
    assert (p.step, p.status, p.fraction) == (100, "done", 1.0)


def test_progress_kind_is_reserved():
    with pytest.raises(ValueError):
        event_line("progress", step=1)
