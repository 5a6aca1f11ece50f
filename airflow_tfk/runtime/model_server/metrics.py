"""Request counts and latencies in Prometheus' text format, under TF Serving's own metric
names (``:tensorflow:serving:request_count``, ``...:request_latency``), so dashboards and
alerts written for TF Serving read the stand-in too."""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict

# microseconds, as TF Serving's request_latency histogram
BUCKETS_US = (100, 250, 500, 1000, 2500, 5000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000, 5_000_000)
COUNT = ":tensorflow:serving:request_count"
LATENCY = ":tensorflow:serving:request_latency"


def _labels(pairs: tuple[tuple[str, str], ...]) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return ",".join(f'{k}="{esc(v)}"' for k, v in pairs)


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[tuple[str, str], ...], int] = defaultdict(int)
        self._hist: dict[tuple[tuple[str, str], ...], list[float]] = {}

    def observe(self, model: str, api: str, entrypoint: str, status: str, seconds: float) -> None:
        """One finished request: ``status`` is ``OK`` or the error code."""
        count_key = (("entrypoint", entrypoint), ("model_name", model), ("status", status))
        hist_key = (("API", api), ("entrypoint", entrypoint), ("model_name", model))
        us = seconds * 1e6
        with self._lock:
            self._counts[count_key] += 1
            # [bucket counts..., +Inf count, sum]
            h = self._hist.setdefault(hist_key, [0.0] * (len(BUCKETS_US) + 2))
            h[bisect.bisect_left(BUCKETS_US, us)] += 1
            h[-1] += us

    def render(self) -> str:
        with self._lock:
            counts = dict(self._counts)
            hist = {k: list(v) for k, v in self._hist.items()}
        lines = [f"# TYPE {COUNT} counter"]
        lines += [f"{COUNT}{{{_labels(k)}}} {v}" for k, v in sorted(counts.items())]
        lines.append(f"# TYPE {LATENCY} histogram")
        for key, h in sorted(hist.items()):
            cumulative = 0.0
            for bound, n in zip((*BUCKETS_US, "+Inf"), h[:-1], strict=True):
                cumulative += n
                lines.append(f'{LATENCY}_bucket{{{_labels(key)},le="{bound}"}} {int(cumulative)}')
            lines.append(f"{LATENCY}_sum{{{_labels(key)}}} {h[-1]:.1f}")
            lines.append(f"{LATENCY}_count{{{_labels(key)}}} {int(cumulative)}")
        return "\n".join(lines) + "\n"
