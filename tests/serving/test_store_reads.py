"""The files a training exports with a version (metrics, sample request) are read by the
publish as data from a stranger: a FIFO, a device, a link out of the model's folder, a
huge or deeply nested file is "no metrics" (the gate then refuses the version), at once."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from airflow_tfk.serving.local import METRICS_FILE, LocalServing
from airflow_tfk.serving.spec import ServingSpec

pytestmark = pytest.mark.timeout(120)  # a read that blocks for good fails here, not at 15 min


def _fifo(p: Path) -> None:
    os.mkfifo(p)


def _link(target: str) -> Callable[[Path], None]:
    return lambda p: p.symlink_to(target)


def _text(text: str) -> Callable[[Path], None]:
    return lambda p: p.write_text(text)


def _outside(p: Path) -> None:
    secret = p.parents[4] / "credentials.json"
    secret.write_text('{"client_secret": "s3cr3t"}')
    p.symlink_to(secret)


CASES = {
    "fifo": _fifo,
    "dev-zero": _link("/dev/zero"),
    "dev-urandom": _link("/dev/urandom"),
    "link-out-of-the-store": _outside,
    "deep-100000": _text("[" * 100_000 + "]" * 100_000),
    "over-1-mib": _text('{"accuracy": 0.99, "pad": "' + "x" * (2 << 20) + '"}'),
}


def _target(tmp_path: Path) -> LocalServing:
    return LocalServing(ServingSpec(model_name="m", claim="models"), root=str(tmp_path / "root"))


@pytest.mark.parametrize("make", CASES.values(), ids=list(CASES))
def test_hostile_exported_files_are_no_metrics_at_once(tmp_path: Path, make) -> None:
    target = _target(tmp_path)
    path = Path(target.model_base_path()) / "1" / METRICS_FILE
    path.parent.mkdir(parents=True)
    make(path)
    start = time.monotonic()
    assert target.version_metrics(1) is None
    assert target.sample_request(1) is None
    # What this guards against does not end (a FIFO without a writer blocks its reader for
    # good, /dev/zero never runs out): any finite bound tells it apart, and a wide one is
    # not crossed by a loaded machine's scheduling.
    assert time.monotonic() - start < 10.0


def test_an_ordinary_metrics_file_is_read(tmp_path: Path) -> None:
    target = _target(tmp_path)
    path = Path(target.model_base_path()) / "1" / METRICS_FILE
    path.parent.mkdir(parents=True)
    path.write_text('{"accuracy": 0.97}')
    assert target.version_metrics(1) == {"accuracy": 0.97}
