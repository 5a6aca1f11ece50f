"""Shell completion through argcomplete's protocol, as bash runs it: the completing shell
sets ``_ARGCOMPLETE``, ``COMP_LINE`` and ``COMP_POINT`` and reads the words back (here from
``_ARGCOMPLETE_STDOUT_FILENAME`` instead of fd 8), separated by ``IFS`` (vertical tab)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _complete(line: str, tmp_path: Path) -> list[str]:
    out = tmp_path / "completions"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "_ARGCOMPLETE": "1",
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
        "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
    }
    run = subprocess.run(
        [sys.executable, "-m", "airflow_tfk.cli.main"], env=env, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    # a sole match carries the space the shell then types after it
    return [w.rstrip(" ") for w in out.read_text(encoding="utf-8").split("\x0b")]


def test_clusters_tab_completes_the_verbs(tmp_path: Path) -> None:
    words = _complete("airflow-tfk clusters ", tmp_path)
    assert [w for w in words if not w.startswith("-")] == ["list", "status", "logs", "delete", "sweep"]


def test_options_and_output_formats_complete(tmp_path: Path) -> None:
    options = set(_complete("airflow-tfk clusters list --", tmp_path))
    assert {"--output", "--backend", "--all-namespaces"} <= options
    assert _complete("airflow-tfk clusters list -o ", tmp_path) == ["table", "json", "yaml", "plain"]
    assert _complete("airflow-tfk clusters logs x worker-0 --fo", tmp_path) == ["--follow"]
    assert "clusters" in _complete("airflow-tfk cl", tmp_path)


def test_the_entry_point_module_carries_the_global_completion_marker() -> None:
    """`activate-global-python-argcomplete` completes only scripts whose module says so in
    its first bytes."""
    from airflow_tfk.cli import main

    assert "PYTHON_ARGCOMPLETE_OK" in Path(main.__file__).read_text(encoding="utf-8")[:1024]


def test_the_documented_activation_line_prints_a_completion_function(tmp_path: Path) -> None:
    """The operations page's line, run as written: it makes bash ask airflow-tfk for completions."""
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    line = 'eval "$(register-python-argcomplete airflow-tfk)"'
    assert f"```bash\n{line}\n```" in text
    register = Path(sys.executable).parent / "register-python-argcomplete"
    run = subprocess.run([str(register), "airflow-tfk"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "complete " in run.stdout and "airflow-tfk" in run.stdout and "_ARGCOMPLETE" in run.stdout
