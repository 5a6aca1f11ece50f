"""Where a local Airflow run keeps its things: the environment of ``airflow-tfk airflow``.

A newcomer should be able to run their own DAG folder without reading the scripts. This
module decides, in one place, the Airflow home (SQLite), the DAGs folder, the local
backend's root (clusters' state, task logs, models) and the ``PATH`` that puts the
project's ``airflow`` first. Every choice the user already made in the environment wins;
only what is unset gets the project's default. Pure: it reads ``os.environ`` and the
file system, imports nothing heavy and changes nothing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # airflow_tfk/, from airflow_tfk/core/
# Outside a checkout (an installed wheel) the defaults go under the user's home.
USER_BASE = Path("~/.airflow-tfk")


def checkout_root() -> Path | None:
    """The repository this package runs from (an editable install), else None."""
    root = PACKAGE_DIR.parent
    try:
        text = (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return None
    return root if 'name = "airflow-tfk"' in text else None


def default_local_root(environ: Mapping[str, str] | None = None) -> str:
    """The local backend's root when nobody names one: ``$TFK_LOCAL_ROOT``, else
    ``.tfk-local`` in the checkout, else ``~/.airflow-tfk/.tfk-local``.

    One answer for every reader (the backend, the local model and TensorBoard servers,
    ``airflow-tfk stop`` and ``airflow-tfk airflow``), so a server one of them started is
    one the others can find.
    """
    env = os.environ if environ is None else environ
    if env.get("TFK_LOCAL_ROOT"):
        return os.path.abspath(os.path.expanduser(env["TFK_LOCAL_ROOT"]))
    repo = checkout_root()
    base = repo if repo is not None else USER_BASE.expanduser()
    return str(base / ".tfk-local")


@dataclass(frozen=True)
class LocalAirflowEnv:
    """The resolved locations; :meth:`environ` turns them into environment variables."""

    airflow_home: Path
    dags_folder: Path
    local_root: Path
    bin_dir: Path

    def environ(self, base: Mapping[str, str]) -> dict[str, str]:
        env = dict(base)
        env["AIRFLOW_HOME"] = str(self.airflow_home)
        env["AIRFLOW__CORE__DAGS_FOLDER"] = str(self.dags_folder)
        env["TFK_LOCAL_ROOT"] = str(self.local_root)
        env.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
        # A local Airflow runs its trainings as local processes unless told otherwise; the
        # provider's own default is Kubernetes, so this is where local is chosen.
        env.setdefault("TFK_BACKEND", "local")
        # Airflow's unit-test mode resets the database behind the user's back.
        env.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")
        # TensorFlow's C++ start-up chatter (oneDNN, CUDA probing) hides the training's lines.
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        path = env.get("PATH", "")
        if str(self.bin_dir) not in path.split(os.pathsep):
            env["PATH"] = f"{self.bin_dir}{os.pathsep}{path}" if path else str(self.bin_dir)
        return env

    def describe(self) -> list[str]:
        """Where things go, in the words a newcomer needs (one line each)."""
        root = self.local_root
        return [
            f"Airflow home:  {self.airflow_home}  (SQLite database airflow.db, task logs under logs/)",
            f"DAGs folder:   {self.dags_folder}",
            f"local backend: {root}/<namespace>/<cluster>/  "
            "(state.json; each task's output in logs/<role>-<index>.log, kept after deletion)",
            f"models:        {root}/<namespace>/.claims/<claim>/<model>/<version>/  "
            "(a storage claim such as models: {claim: tfk-models})",
        ]


def resolve(
    environ: Mapping[str, str] | None = None,
    *,
    dags_folder: str | None = None,
    cwd: str | None = None,
) -> LocalAirflowEnv:
    """The locations for this run.

    Precedence for each: the command-line option, then the environment
    (``AIRFLOW_HOME``; ``AIRFLOW__CORE__DAGS_FOLDER`` or ``DAGS_FOLDER``;
    ``TFK_LOCAL_ROOT``), then the project's default (``.airflow-home``, ``dags`` and
    ``.tfk-local`` in the checkout, or under ``~/.airflow-tfk`` for an installed package).
    Relative paths are taken from ``cwd``.
    """
    env = os.environ if environ is None else environ
    here = Path(cwd or os.getcwd())
    repo = checkout_root()
    base = repo if repo is not None else USER_BASE.expanduser()

    def pick(given: str | None, *names: str, default: Path) -> Path:
        for value in (given, *(env.get(n) for n in names)):
            if value:
                return (here / Path(value).expanduser()).resolve()
        return default

    return LocalAirflowEnv(
        airflow_home=pick(None, "AIRFLOW_HOME", default=base / ".airflow-home"),
        dags_folder=pick(
            dags_folder,
            "AIRFLOW__CORE__DAGS_FOLDER",
            "DAGS_FOLDER",
            default=(repo / "dags") if repo is not None else base / "dags",
        ),
        local_root=pick(None, "TFK_LOCAL_ROOT", default=Path(default_local_root({}))),
        bin_dir=Path(sys.executable).parent,
    )
