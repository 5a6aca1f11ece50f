"""tests/prometheus_text.py reads what the training runtime exports, and refuses what
Prometheus' text format does not allow (so a scrape it accepts is one Prometheus reads)."""

from __future__ import annotations

import math
import urllib.request

import pytest

from airflow_tfk.runtime import metrics
from tests import prometheus_text


def test_the_runtimes_exposition_reads_back_over_http() -> None:
    exported = metrics.TrainingMetrics({"role": "worker", "index": "1", "cluster": 'a"b\\c'}, 100, 32)
    server = metrics.serve(exported, 0, host="127.0.0.1")
    assert server is not None
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        steps = []
        for step in (10, 30):
            exported.update(step, 0.25)
            with urllib.request.urlopen(url, timeout=5) as resp:
                assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                fams = prometheus_text.parse(resp.read().decode())
            steps.append(prometheus_text.value(fams, "tfk_training_steps_total", role="worker", index="1"))
        assert steps == [10, 30]
        assert fams["tfk_training_steps_total"].type == "counter"
        assert fams["tfk_training_loss"].samples[0].labels["cluster"] == 'a"b\\c'
        assert prometheus_text.value(fams, "tfk_training_total_steps") == 100
    finally:
        server.shutdown()
        server.server_close()


GOOD = (
    "# HELP x_total a thing\n# TYPE x_total counter\n"
    'x_total{a="1",b="\\n"} 3 1700000000000\nx_total{a="2"} 5e0\n'
    "# TYPE g gauge\ng +Inf\n"
)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (GOOD.replace("3 17", "-3 17"), "counter must be finite"),
        (GOOD.rstrip("\n"), "no line feed"),
        (GOOD + "# TYPE x_total gauge\n", "after its samples or twice"),
        (GOOD + "# HELP x_total again\n", "second HELP"),
        (GOOD + "g 4\n", "the same series twice"),
        (GOOD.replace('a="2"', "a=2"), "malformed label set"),
        (GOOD.replace('a="2"', 'a="2",a="3"'), "label a twice"),
        (GOOD.replace("5e0", "1,5"), "not a number"),
        (GOOD + "x_total 2\n", "not together"),
        (GOOD + "# TYPE y countr\n", "TYPE must be one of"),
        (GOOD + "9y 1\n", "not a sample line"),
    ],
)
def test_what_the_format_forbids_is_refused(text: str, why: str) -> None:
    good = prometheus_text.parse(GOOD)
    assert good["x_total"].samples[0].labels["b"] == "\n" and good["g"].samples[0].value == math.inf
    with pytest.raises(prometheus_text.ExpositionError, match=why):
        prometheus_text.parse(text)
