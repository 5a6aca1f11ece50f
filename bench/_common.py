"""What the benchmark scripts share: their command line, and timing a snippet in a fresh
interpreter (so one sample's imports do not make the next one cheap)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parser(doc: str, **defaults: int | float | str) -> argparse.ArgumentParser:
    """The script's argument parser, described by the first line of its docstring, with an
    option ``--<name>`` for each of ``defaults`` (``_`` becomes ``-``), typed as its default."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    for name, default in defaults.items():
        p.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    return p


def python_seconds(code: str, root: Path = ROOT) -> float:
    """Run ``code`` in a new interpreter from ``root`` (this repository by default, or
    another checkout, whose ``airflow_tfk`` then comes first on the path, whatever the
    venv's editable install points at); it prints a number of seconds as its last line,
    which is returned.

    The interpreter reads and writes bytecode as an installed wheel's would, whatever the
    caller's environment says: under an inherited ``PYTHONDONTWRITEBYTECODE`` every sample
    would compile the package's modules again and time the compiler.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    if root != ROOT:
        env["PYTHONPATH"] = str(root)
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return float(out.stdout.strip().splitlines()[-1])
