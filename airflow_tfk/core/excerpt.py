"""What of a failed task's log a user reads in the failure message.

A TensorFlow task's last lines are mostly noise: the C++ runtime's own log lines (absl
and TF's ``YYYY-MM-DD HH:MM:SS.ffffff: I tensorflow/...``), oneDNN and CPU-feature
notices, and this project's progress JSON lines. The traceback that says why it failed
is buried under them. :func:`failure_excerpt` drops those lines and keeps the last few
that remain; where the whole log is, the caller says.
"""

from __future__ import annotations

import re

__all__ = ["failure_cause", "failure_excerpt", "is_noise"]

EXCERPT_LINES = 20
_NOISE = (
    # TF's C++ logging: "2026-01-01 10:00:00.123456: I tensorflow/core/...".
    re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] \S+"),
    # absl / glog: "I0000 00:00:1700000000.123456  1234 file.cc:123] ...".
    re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\]"),
    re.compile(r"^WARNING: All log messages before absl::InitializeLog\(\) is called"),
    re.compile(r"oneDNN custom operations are on|TF_ENABLE_ONEDNN_OPTS"),
    re.compile(r"This TensorFlow binary is optimized to use available CPU instructions"),
    re.compile(r"To enable the following instructions: .* rebuild TensorFlow"),
    re.compile(r"Could not find cuda drivers on your machine|Unable to register cu(DNN|FFT|BLAS) factory"),
    # This project's progress and event lines (runtime.progress): JSON with a "tfk" key.
    re.compile(r'^\s*(\[[^\]]*\]\s*)?\{"tfk"\s*:'),
)


# The last line of a Python traceback: "ValueError: bad batch size", "tf.errors.X: ...",
# "KeyboardInterrupt". Also a C++ "Check failed:" and TF's "terminate called after ...".
_EXCEPTION = re.compile(
    r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Exceeded)\b(?::.*)?$"
    r"|Check failed: |^terminate called after throwing"
)
# What a signal's exit usually means for a training task (128 + signal number on
# Kubernetes and in a shell; a negative return code from Python's subprocess).
_SIGNALS = {
    9: "SIGKILL: killed from outside, most often by the memory limit (OOM killer)",
    15: "SIGTERM: asked to stop (pod deletion, eviction, a node drain or a timeout)",
    6: "SIGABRT: the process aborted itself (a failed C++ check in TensorFlow, or out of memory)",
    11: "SIGSEGV: a segmentation fault in native code",
    7: "SIGBUS: a bus error (often /dev/shm too small)",
    2: "SIGINT: interrupted",
}


def is_noise(line: str) -> bool:
    return any(p.search(line) for p in _NOISE)


def failure_excerpt(text: str, lines: int = EXCERPT_LINES, max_chars: int = 4000) -> str:
    """The last ``lines`` lines of ``text`` that are not noise, at most ``max_chars``."""
    kept = [ln for ln in text.splitlines() if ln.strip() and not is_noise(ln)]
    out = "\n".join(kept[-lines:])
    if len(out) > max_chars:
        out = "..." + out[-(max_chars - 3) :]
    return out


def signal_meaning(exit_code: int | None) -> str:
    """``exit code 137`` -> what SIGKILL usually means; empty when the code is no signal."""
    if exit_code is None:
        return ""
    number = -exit_code if exit_code < 0 else exit_code - 128 if 128 < exit_code < 160 else 0
    if number <= 0:
        return ""
    return _SIGNALS.get(number, f"signal {number}")


def failure_cause(text: str, exit_code: int | None = None) -> str:
    """The one line that says why a task failed, for the first line of the message.

    The last exception line of its log where there is one (what a person looks for in a
    traceback), else what the signal of its exit code usually means, else empty.
    """
    for line in reversed(text.splitlines()):
        stripped = line.strip()
        if stripped and not is_noise(stripped) and _EXCEPTION.search(stripped):
            return stripped[:500]
    return signal_meaning(exit_code)
