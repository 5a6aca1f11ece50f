"""The package as a user gets it: the built sdist and wheel, the wheel installed in a fresh
virtual environment with no checkout on the path, and the checks run against that install.

Shared by tests/packaged/test_wheel.py (one install, pinned to the lock) and
scripts/compat.py (the lowest and the newest allowed versions). Every check runs the
installed environment's own ``python``, ``airflow`` and ``airflow-tfk`` in subprocesses
whose working directory is outside the checkout and whose environment carries no
``PYTHONPATH``, so nothing can come from the source tree by accident.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# scripts/bootstrap.sh installs uv into the project's venv; it shares uv's cache, so a
# fresh environment with Airflow and TensorFlow links from the cache in seconds.
UV = Path(sys.executable).parent / "uv"
DISTRIBUTION = "airflow-tfk"
LOCK = ROOT / "requirements" / "lock.txt"
BUILD_LOCK = ROOT / "requirements" / "build-lock.txt"  # the pinned hatchling of the build
EXAMPLE_SPEC = ROOT / "docs" / "examples" / "imagenet.yaml"
# Inherited variables that would point the installed environment back at the checkout or
# at the calling test session's Airflow: the checks set their own.
_DROPPED_PREFIXES = ("AIRFLOW_", "AIRFLOW__", "TFK_", "PYTEST_")
_DROPPED = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP", "PYTHONSAFEPATH"}


def pyproject() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as fh:
        return tomllib.load(fh)


def one(paths: Iterable[Path], what: str) -> Path:
    found = list(paths)
    if len(found) != 1:
        raise AssertionError(f"expected one {what}, found {[p.name for p in found]}")
    return found[0]


@dataclass(frozen=True)
class Dist:
    sdist: Path
    wheel: Path


def build(out_dir: Path) -> Dist:
    """``uv build``: the sdist, then the wheel built *from the sdist* (uv's default), so a
    file the sdist forgets fails the wheel too."""
    out_dir.mkdir(parents=True, exist_ok=True)
    pins = ["--build-constraint", str(BUILD_LOCK)] if BUILD_LOCK.exists() else []
    proc = subprocess.run(
        [str(UV), "build", "--out-dir", str(out_dir), *pins, str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise AssertionError(f"uv build failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return Dist(one(out_dir.glob("*.tar.gz"), "sdist"), one(out_dir.glob("*.whl"), "wheel"))


# -- what the archives hold ----------------------------------------------------------------
def _parse_metadata(text: str, where: str) -> list[str]:
    """Problems of a METADATA / PKG-INFO file, validated as core metadata by ``packaging``
    (what PyPI's upload checks: field syntax, versions, requirements, the license
    expression) and against pyproject.toml."""
    from packaging.metadata import Metadata
    from packaging.utils import canonicalize_name

    problems: list[str] = []
    try:
        meta = Metadata.from_email(text, validate=True)
    except Exception as exc:  # an ExceptionGroup of every invalid field
        errors = getattr(exc, "exceptions", [exc])
        return [f"{where}: {e}" for e in errors]
    project = pyproject()["project"]
    if str(meta.name) != project["name"] or str(meta.version) != project["version"]:
        problems.append(f"{where}: {meta.name} {meta.version} is not pyproject's {project['name']}")
    if meta.description_content_type != "text/markdown" or "# airflow-tfk" not in (meta.description or ""):
        problems.append(f"{where}: the long description is not the README (Markdown)")
    core = {canonicalize_name(r.name) for r in meta.requires_dist or [] if r.marker is None}
    wanted = {canonicalize_name(_req_name(r)) for r in project["dependencies"]}
    if core != wanted:
        problems.append(f"{where}: requires {sorted(core)}, pyproject says {sorted(wanted)}")
    extras = {str(e) for e in meta.provides_extra or []}
    if extras != set(project["optional-dependencies"]):
        problems.append(
            f"{where}: extras {sorted(extras)}, pyproject says {sorted(project['optional-dependencies'])}"
        )
    return problems


def _req_name(requirement: str) -> str:
    from packaging.requirements import Requirement

    return Requirement(requirement).name


def wheel_problems(wheel: Path) -> list[str]:
    """What the wheel misses or gets wrong; empty when it is complete."""
    problems: list[str] = []
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        dist_info = one(
            {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}, "dist-info"
        )
        problems += _parse_metadata(zf.read(f"{dist_info}/METADATA").decode(), "wheel METADATA")
        problems += _record_problems(zf, dist_info)
        entry_points = zf.read(f"{dist_info}/entry_points.txt").decode()
        for line in (
            "airflow-tfk = airflow_tfk.cli.main:main",
            "provider_info = airflow_tfk.provider_info:get_provider_info",
        ):
            if line not in entry_points:
                problems.append(f"entry_points.txt lacks {line!r}")
        tops = {n.split("/")[0] for n in names} - {dist_info}
        if tops != {"airflow_tfk"}:
            problems.append(f"the wheel installs {sorted(tops)}, not only airflow_tfk")
        if "airflow_tfk/py.typed" not in names:
            problems.append("no airflow_tfk/py.typed: type checkers would ignore the package's annotations")
        for path in sorted((ROOT / "templates").rglob("*")):
            if path.is_file():
                arc = "airflow_tfk/_templates/" + path.relative_to(ROOT / "templates").as_posix()
                if arc not in names:
                    problems.append(f"template {arc} missing")
                elif zf.read(arc) != path.read_bytes():
                    problems.append(f"template {arc} differs from templates/")
        for path in sorted((ROOT / "airflow_tfk").rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                arc = path.relative_to(ROOT).as_posix()
                if arc not in names:
                    problems.append(f"{arc} missing")
    return problems


def _record_problems(zf: zipfile.ZipFile, dist_info: str) -> list[str]:
    """RECORD lists every file with the hash of what is really in the archive."""
    problems = []
    rows = list(csv.reader(io.StringIO(zf.read(f"{dist_info}/RECORD").decode())))
    recorded = {row[0] for row in rows}
    for name in zf.namelist():
        if name not in recorded:
            problems.append(f"RECORD lacks {name}")
    for name, digest, _size in rows:
        if not digest:
            continue
        algo, _, expected = digest.partition("=")
        actual = base64.urlsafe_b64encode(hashlib.new(algo, zf.read(name)).digest()).rstrip(b"=").decode()
        if actual != expected:
            problems.append(f"RECORD hash of {name} is wrong")
    return problems


def sdist_problems(sdist: Path) -> list[str]:
    """What the sdist misses: enough to build the wheel (uv build proves that) and to read."""
    import tarfile

    problems: list[str] = []
    with tarfile.open(sdist) as tf:
        names = set(tf.getnames())
        top = one({n.split("/")[0] for n in names}, "top-level folder of the sdist")
        for needed in (
            "pyproject.toml",
            "README.md",
            "PKG-INFO",
            "airflow_tfk/__init__.py",
            "templates/job.yaml.j2",
        ):
            if f"{top}/{needed}" not in names:
                problems.append(f"the sdist lacks {needed}")
        member = tf.extractfile(f"{top}/PKG-INFO")
        if member is not None:
            problems += _parse_metadata(member.read().decode(), "sdist PKG-INFO")
    return problems


# -- the installed environment ------------------------------------------------------------
@dataclass
class WheelVenv:
    """A fresh virtual environment under ``base`` with the wheel installed, its own Airflow
    home, local-backend root, DAGs folder and a working directory outside the checkout."""

    base: Path
    install_log: str = ""
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def venv(self) -> Path:
        return self.base / "venv"

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    @property
    def home(self) -> Path:
        return self.base / "airflow-home"

    @property
    def local_root(self) -> Path:
        return self.base / "tfk-local"

    @property
    def dags(self) -> Path:
        return self.base / "dags"

    @property
    def work(self) -> Path:
        return self.base / "work"

    @classmethod
    def create(
        cls,
        base: Path,
        wheel: Path,
        *,
        extras: Sequence[str] = ("local",),
        requirements: Sequence[str] = (),
        constraints: Path | None = None,
        resolution: str | None = None,
        timeout: float = 1800,
    ) -> WheelVenv:
        """Create the venv and install ``wheel[extras]`` plus ``requirements`` with uv."""
        if ROOT in base.resolve().parents or base.resolve() == ROOT:
            raise ValueError(f"{base} is inside the checkout: the point is to install outside it")
        self = cls(base)
        for folder in (self.home, self.local_root, self.dags, self.work):
            folder.mkdir(parents=True, exist_ok=True)
        env = self.env()
        subprocess.run(
            [str(UV), "venv", "--quiet", "--python", sys.executable, str(self.venv)],
            check=True,
            env=env,
            capture_output=True,
            timeout=120,
        )
        spec = f"{wheel}[{','.join(extras)}]" if extras else str(wheel)
        cmd = [
            str(UV),
            "pip",
            "install",
            "--python",
            str(self.python),
            "--compile-bytecode",
            spec,
            *requirements,
        ]
        if constraints is not None:
            cmd += ["--constraint", str(constraints)]
        if resolution is not None:
            cmd += ["--resolution", resolution]
        proc = subprocess.run(cmd, env=env, cwd=self.work, capture_output=True, text=True, timeout=timeout)
        self.install_log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise InstallError(f"uv pip install failed ({proc.returncode}):\n{self.install_log[-4000:]}")
        return self

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            k: v for k, v in os.environ.items() if k not in _DROPPED and not k.startswith(_DROPPED_PREFIXES)
        }
        env.update(
            PATH=f"{self.bin}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            AIRFLOW_HOME=str(self.home),
            AIRFLOW__CORE__DAGS_FOLDER=str(self.dags),
            AIRFLOW__CORE__LOAD_EXAMPLES="False",
            AIRFLOW__CORE__UNIT_TEST_MODE="False",
            TFK_LOCAL_ROOT=str(self.local_root),
            TF_CPP_MIN_LOG_LEVEL="2",
        )
        env.update(extra)
        return env

    def run(
        self, *argv: str | Path, timeout: float = 300, cwd: Path | None = None, **extra_env: str
    ) -> subprocess.CompletedProcess[str]:
        """``argv[0]`` is looked up in the venv's bin/ (``python``, ``airflow``, ``airflow-tfk``)."""
        exe = self.bin / str(argv[0])
        return subprocess.run(
            [str(exe if exe.exists() else argv[0]), *map(str, argv[1:])],
            env=self.env(**extra_env),
            cwd=cwd or self.work,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def python_json(self, code: str, timeout: float = 300) -> dict:
        """Run ``code`` with the venv's python; its last stdout line is JSON."""
        proc = self.run("python", "-c", code, timeout=timeout)
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            raise CheckFailed(f"python exited {proc.returncode}:\n{(proc.stdout + proc.stderr)[-3000:]}")
        return json.loads(lines[-1])

    def versions(self, names: Iterable[str]) -> dict[str, str]:
        """Installed version of each distribution ("-" when absent)."""
        code = (
            "import json, sys\n"
            "from importlib.metadata import version, PackageNotFoundError\n"
            "out = {}\n"
            f"for n in {list(names)!r}:\n"
            "    try: out[n] = version(n)\n"
            "    except PackageNotFoundError: out[n] = '-'\n"
            "out['python'] = '.'.join(map(str, sys.version_info[:3]))\n"
            "print(json.dumps(out))\n"
        )
        return self.python_json(code, timeout=60)

    def remove(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)


class InstallError(Exception):
    """The environment could not be installed (a resolution or a download failed)."""


class CheckFailed(AssertionError):
    """One check of the installed package failed; the message says what was seen."""


def expect(ok: object, message: str) -> None:
    if not ok:
        raise CheckFailed(message)


def _tail(proc: subprocess.CompletedProcess[str], n: int = 4000) -> str:
    """The end of the output, after the last traceback's start when there is one: Airflow's
    warnings and clean-up lines after a task's error would push it out of the excerpt."""
    out = proc.stdout + proc.stderr
    at = out.rfind("Traceback (most recent call last)")
    excerpt = out[at : at + n] + "\n...\n" + out[-n // 4 :] if at >= 0 else out[-n:]
    return f"exit {proc.returncode}\n{excerpt}"


# -- checks: each raises CheckFailed with what it saw, else returns a short note -----------
IMPORT_SKIPPED = (
    # TF Serving's gRPC protos (tensorflow-serving-api) are in no extra: scripts/bootstrap.sh
    # adds them without deps, the serving image has them.
    "airflow_tfk.runtime.model_server.grpc",
)


def check_import(venv: WheelVenv) -> str:
    """Every module of the installed package imports, from the venv and not the checkout."""
    code = (
        "import importlib, json, pkgutil, airflow_tfk\n"
        "failed = {}\n"
        "count = 0\n"
        "for m in pkgutil.walk_packages(airflow_tfk.__path__, 'airflow_tfk.'):\n"
        # __main__ modules run their program when imported.
        f"    if m.name.startswith({IMPORT_SKIPPED!r}) or m.name.endswith('.__main__'): continue\n"
        "    count += 1\n"
        "    try: importlib.import_module(m.name)\n"
        "    except Exception as e: failed[m.name] = f'{type(e).__name__}: {e}'\n"
        "print(json.dumps({'file': airflow_tfk.__file__, 'failed': failed, 'count': count}))\n"
    )
    out = venv.python_json(code, timeout=600)
    where = Path(out["file"]).resolve()
    expect(venv.venv.resolve() in where.parents, f"airflow_tfk came from {where}, not from {venv.venv}")
    expect(not out["failed"], f"modules that do not import: {json.dumps(out['failed'], indent=1)[:3000]}")
    return f"{out['count']} modules"


def check_provider(venv: WheelVenv, version: str) -> str:
    """``airflow providers list`` shows the provider, from its entry point."""
    proc = venv.run("airflow", "providers", "list", "-o", "json", timeout=300)
    expect(proc.returncode == 0, f"airflow providers list: {_tail(proc)}")
    start = proc.stdout.find("[")
    expect(start >= 0, f"no JSON in airflow providers list: {_tail(proc)}")
    providers = json.JSONDecoder().raw_decode(proc.stdout[start:])[0]
    ours = [p for p in providers if p.get("package_name") == DISTRIBUTION]
    expect(ours, f"airflow-tfk is not among {[p.get('package_name') for p in providers]}")
    expect(ours[0].get("version") == version, f"listed as {ours[0]}, not version {version}")
    return f"listed as {ours[0]['package_name']} {ours[0]['version']}"


def expected_render(spec: Path) -> str:
    """The checkout's rendering of ``spec`` (the caller's interpreter runs the checkout)."""
    proc = subprocess.run(
        [sys.executable, "-m", "airflow_tfk.cli.main", "render", str(spec)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0:
        raise AssertionError(f"the checkout cannot render {spec}: {proc.stderr}")
    return proc.stdout


def check_render(venv: WheelVenv, expected: str, spec: Path = EXAMPLE_SPEC) -> str:
    """``airflow-tfk render`` loads the templates from the installed package and renders
    exactly what the checkout renders."""
    local = venv.work / spec.name
    shutil.copyfile(spec, local)
    proc = venv.run("airflow-tfk", "render", local.name, timeout=120)
    expect(proc.returncode == 0, f"airflow-tfk render: {_tail(proc)}")
    expect(proc.stdout == expected, "the installed package renders differently from the checkout")
    where = venv.python_json(
        "import json; from airflow_tfk.render.templating import template_dirs\n"
        "print(json.dumps(str(template_dirs()[0])))"
    )
    expect(
        venv.venv.resolve() in Path(str(where)).resolve().parents and str(where).endswith("_templates"),
        f"templates were looked up in {where}, not in the installed package",
    )
    return f"{proc.stdout.count('kind:')} objects from {Path(str(where)).name}/"


def check_version(venv: WheelVenv, version: str) -> str:
    proc = venv.run("airflow-tfk", "--version", timeout=60)
    expect(proc.returncode == 0, f"airflow-tfk --version: {_tail(proc)}")
    expect(proc.stdout == f"airflow-tfk {version}\n", f"airflow-tfk --version printed {proc.stdout!r}")
    return proc.stdout.strip()


DAGBAG = """
import json, sys
try:
    from airflow.dag_processing.dagbag import DagBag
except ImportError:
    from airflow.models.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])  # AIRFLOW__CORE__LOAD_EXAMPLES=False: no examples
print(json.dumps({"dags": sorted(bag.dag_ids), "errors": {k: str(v) for k, v in bag.import_errors.items()}}))
"""


def check_dags(venv: WheelVenv, expected_dag_ids: Iterable[str]) -> str:
    """Airflow's DagBag parses the DAGs folder with no import error."""
    proc = venv.run("python", "-c", DAGBAG, venv.dags, timeout=600)
    lines = proc.stdout.strip().splitlines()
    expect(proc.returncode == 0 and lines, f"DagBag: {_tail(proc)}")
    out = json.loads(lines[-1])
    expect(not out["errors"], f"import errors: {json.dumps(out['errors'], indent=1)[:3000]}")
    missing = set(expected_dag_ids) - set(out["dags"])
    expect(not missing, f"DAGs not found: {sorted(missing)} (found {out['dags']})")
    return f"{len(out['dags'])} DAGs"


def check_training(venv: WheelVenv, dag_id: str, conf: dict, timeout: float = 1200) -> str:
    """``airflow-tfk airflow dags test`` of a local-backend training DAG succeeds, its tasks
    run with the venv's Python (so TensorFlow and the runtime come from the install)."""
    proc = venv.run(
        "airflow-tfk",
        "airflow",
        "--dags-folder",
        venv.dags,
        "dags",
        "test",
        dag_id,
        "--conf",
        json.dumps(conf),
        timeout=timeout,
    )
    out = proc.stdout + proc.stderr
    expect(proc.returncode == 0 and "state=success" in out, f"dags test {dag_id}: {_tail(proc, 6000)}")
    expect(
        f"tasks run on this machine with {venv.bin}/python" in out,
        f"the local backend did not run the venv's Python {venv.python}: {_tail(proc, 3000)}",
    )
    return f"{dag_id} state=success"
