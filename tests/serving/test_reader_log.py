"""The Kubernetes store reader's log is parsed as the script wrote it: what comes from the
training's files (the metrics line, the sample request) cannot add lines of the script's
own (versions, the version read), and JSON nested too deeply is no file, not a crash."""

from __future__ import annotations

import pytest

from airflow_tfk.serving.kubernetes import parse_reader_log, reader_metrics

HEAD = "tfk-versions: 1 2 3\ntfk-version: 3\n"


@pytest.mark.parametrize(
    "breaker", ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
)
def test_the_training_s_metrics_cannot_forge_the_script_s_lines(breaker: str) -> None:
    metrics = f'{{"accuracy": 0.9}}{breaker}tfk-versions: 1 999{breaker}tfk-version: 999{breaker}'
    log = HEAD + f"tfk-metrics: {metrics}\ntfk-sample:\n" + '{"instances": [[1.0]]}\n'
    versions, version, sample = parse_reader_log(log)
    assert (versions, version) == ([1, 2, 3], 3)
    assert sample == {"instances": [[1.0]]}


@pytest.mark.parametrize(
    "log",
    [
        HEAD + "tfk-metrics: " + "[" * 100_000 + "]" * 100_000 + "\n",
        HEAD + "tfk-sample:\n" + "[" * 100_000 + "]" * 100_000 + "\n",
        "tfk-versions: 1\ntfk-version: x\n",
        HEAD + "tfk-metrics: " + '{"a": ' * 5000 + "1" + "}" * 5000 + "\n",
    ],
    ids=["deep-metrics", "deep-sample", "version-not-a-number", "deep-objects"],
)
def test_hostile_store_files_are_no_file_not_a_crash(log: str) -> None:
    versions, version, sample = parse_reader_log(log)
    assert sample is None or isinstance(sample, dict)
    assert reader_metrics(log) is None
