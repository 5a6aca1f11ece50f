"""The fast lane runs on two pytest-xdist workers (README): each worker gets an Airflow home
and a local-backend root of its own from tests/conftest.py (not the controller's, which it
inherits through the environment), and removes it when it passes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import json, os
from pathlib import Path

def test_where():
    out = Path({out!r}) / (os.environ["PYTEST_XDIST_WORKER"] + ".json")
    out.write_text(json.dumps([os.environ["AIRFLOW_HOME"], os.environ["TFK_LOCAL_ROOT"]]))
"""


@pytest.mark.timeout(120)
def test_each_worker_has_its_own_airflow_home_and_local_root(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    seen.mkdir()
    (tmp_path / "test_probe.py").write_text(PROBE.format(out=str(seen)))
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # the sessions' homes go there
    for var in ("AIRFLOW_HOME", "TFK_LOCAL_ROOT", "TFK_TEST_SESSION_HOME", "PYTEST_XDIST_WORKER"):
        env.pop(var, None)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-q"]
        + ["-n", "2", "--dist", "each", str(tmp_path / "test_probe.py")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    homes = {p.stem: json.loads(p.read_text()) for p in seen.glob("*.json")}
    assert sorted(homes) == ["gw0", "gw1"], homes
    (home0, root0), (home1, root1) = homes["gw0"], homes["gw1"]
    assert home0 != home1, homes
    assert root0 == os.path.join(home0, "tfk-local") and root1 == os.path.join(home1, "tfk-local")
    assert all(Path(h).parent == tmp_path for h in (home0, home1)), homes
    assert list(tmp_path.glob("tfk-airflow-home-*")) == []  # every process removed its own
