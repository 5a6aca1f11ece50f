"""The TensorBoard pod's launcher runs the real TensorBoard: the page still answers, the
data endpoints still answer, and the page no longer says ``Content-Encoding: identity``
(which makes the API server's service proxy abort it; tests/k8s_node/test_serving.py
shows that end on a real API server).

(Not in tests/tensorboard/: a test package of that name shadows the real ``tensorboard``
package for every later test, since pytest puts ``tests/`` on sys.path.)"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import pytest

from airflow_tfk.core import processes as _process
from airflow_tfk.tensorboard.launcher import SCRIPT, command


def test_the_command_is_free_of_kubelet_expansion():
    # The kubelet expands $(VAR) in a container's command; the script must pass through it.
    assert "$" not in SCRIPT
    assert command()[:2] == ["python3", "-c"]


def _get(url: str) -> tuple[int, dict[str, str], bytes]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()


@pytest.mark.e2e
def test_tensorboard_serves_its_page_without_the_identity_encoding(tmp_path):
    port = _process.free_port()
    log = tmp_path / "tb.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", SCRIPT, f"--logdir={tmp_path}", "--host=127.0.0.1", f"--port={port}"],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                status, headers, body = _get(f"http://127.0.0.1:{port}/")
                break
            except OSError:
                assert proc.poll() is None, log.read_text()[-2000:]
                assert time.monotonic() < deadline, log.read_text()[-2000:]
                time.sleep(0.5)
        assert status == 200 and headers["content-type"].startswith("text/html")
        assert "content-encoding" not in headers, headers
        assert b'src="index.js' in body
        status, _h, env = _get(f"http://127.0.0.1:{port}/data/environment")
        assert status == 200 and json.loads(env)["data_location"] == str(tmp_path)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
