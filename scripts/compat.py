"""The compatibility matrix: the wheel with the lowest and the newest versions it allows.

Run through ``bash scripts/compat.sh`` (which sets up .venv first). For each row the
wheel is installed with its ``local`` extra into a fresh virtual environment outside the
checkout, and the same checks run on each (tests/packaged/wheel_env.py): every module
imports, Airflow lists the provider, the templates render exactly as the checkout renders
them, the repository's DAGs parse, ``airflow-tfk --version``, the quickstart DAG trains a
few steps on the local backend, and one test of the control plane + KWOK tier runs
against the install.

- ``lowest``: every requirement of the wheel (core and the ``local`` extra) that has a
  floor is held to the floor's release series (``>=2.16`` -> ``==2.16.*``) and uv picks
  the lowest version of it (``--resolution lowest-direct``); the other packages resolve
  as a user's install would, to the newest that fits.
- ``newest``: a plain install, newest of everything (not the lock: the point is to see
  what a fresh machine gets today).

The floors come from the wheel's own metadata, so a raised floor is measured on the next
run without editing this file. The table goes to stdout and replaces the section of
docs/compatibility.md between the ``compat:begin`` and ``compat:end`` markers.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.packaged import wheel_env as w  # noqa: E402

README = ROOT / "docs" / "compatibility.md"  # the page holding the table
BEGIN, END = "<!-- compat:begin -->", "<!-- compat:end -->"
ROWS = ("lowest", "newest")
EXTRAS = ("local",)
CHECKS = ("import", "providers", "render", "DAG parse", "--version", "quickstart", "KWOK")
RESULTS = ("pass", "fail", "not run")
QUICKSTART_CONF = {"steps": 30, "ps_grace_seconds": 0}
# One test of the control plane + KWOK tier, run from a copy of tests/ against the
# install: the deferrable path (operator -> trigger -> cncf provider's async hook ->
# kubernetes_asyncio), server-side apply, and the clean-up through the garbage collector.
KWOK_TEST = (
    "tests/k8s_integration/test_lifecycle.py"
    "::test_parameter_server_deferrable_chief_done_deletes_workers_and_ps"
)
KWOK_TEST_DEPS = ("pytest>=8", "pytest-timeout>=2.3")


@dataclass
class Row:
    name: str
    versions: dict[str, str] = field(default_factory=dict)
    results: dict[str, str] = field(default_factory=lambda: dict.fromkeys(CHECKS, "not run"))
    notes: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)


# -- which versions ------------------------------------------------------------------------
def wheel_requirements(wheel: Path, extras: tuple[str, ...] = EXTRAS) -> list[str]:
    """The wheel's requirements of its core and of ``extras``, markers dropped."""
    from packaging.metadata import Metadata

    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Metadata.from_email(zf.read(name).decode(), validate=True)
    out = []
    for req in meta.requires_dist or []:
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras):
            req.marker = None
            out.append(str(req))
    return out


def floors(requirements: list[str]) -> dict[str, str]:
    """``{name: floor}`` of each requirement with a ``>=`` bound."""
    from packaging.requirements import Requirement

    found = {}
    for text in requirements:
        req = Requirement(text)
        for spec in req.specifier:
            if spec.operator == ">=":
                found[req.name] = spec.version
    return found


def lowest_pins(floored: dict[str, str]) -> list[str]:
    """Each floored package held to its floor's release series (``kubernetes==29.*``)."""
    return [f"{name}=={floor}.*" for name, floor in floored.items()]


# -- the checks of one row -----------------------------------------------------------------
class ControlPlaneBuild:
    """The control plane's binaries (tests/k8s/build.sh, cached under ~/.cache; it waits on
    the lock of a build another process has started). Started first and waited for only
    when the first KWOK check needs it, so a cold build overlaps the other checks."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self.bin: Path | None = None
        self.why_not = ""
        self.deadline: float | None = None
        self.proc: subprocess.Popen[str] | None = None
        self.log_file = tempfile.TemporaryFile(mode="w+")
        override = os.environ.get("AIRFLOW_TFK_K8S_BIN")
        if override:
            self.bin = Path(override)
            return
        log("compat: building or finding the control plane (tests/k8s/build.sh) in the background")
        self.proc = subprocess.Popen(
            ["bash", str(ROOT / "tests" / "k8s" / "build.sh")],
            stdout=subprocess.PIPE,
            stderr=self.log_file,
            text=True,
            start_new_session=True,  # stop() ends the script and the Go build it started
        )

    def result(self, timeout: float) -> tuple[Path | None, str]:
        """The bin directory, or None and why; ``timeout`` bounds the wait of all calls
        together, so a build that is not coming does not hold up every row."""
        if self.deadline is None:
            self.deadline = time.monotonic() + timeout
        if self.proc is not None and self.proc.returncode is None:
            try:
                out, _ = self.proc.communicate(timeout=max(0.0, self.deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                return (
                    None,
                    f"the control plane build (tests/k8s/build.sh) was not done within {timeout:.0f} s",
                )
            lines = out.strip().splitlines()
            if self.proc.returncode == 0 and lines:
                self.bin = Path(lines[-1])
            else:
                self.log_file.seek(0)
                last = self.log_file.read().strip().splitlines()[-1:]
                self.why_not = f"tests/k8s/build.sh failed (exit {self.proc.returncode}): {last}"
        return self.bin, self.why_not

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=60)


class NotRun(Exception):
    """A check that could not run here (what it needs is missing); the cell says "not run"."""


def check_kwok(venv: w.WheelVenv, k8s: ControlPlaneBuild) -> str:
    """Run KWOK_TEST from a copy of tests/ outside the checkout, importing the install."""
    bin_dir, why_not = k8s.result(timeout=float(os.environ.get("TFK_COMPAT_K8S_BUILD_WAIT", "1800")))
    if bin_dir is None:
        raise NotRun(why_not)
    suite = venv.base / "suite"
    if not suite.exists():
        shutil.copytree(ROOT / "tests", suite / "tests", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copyfile(ROOT / "pyproject.toml", suite / "pyproject.toml")
    proc = subprocess.run(
        [str(w.UV), "pip", "install", "--quiet", "--python", str(venv.python), *KWOK_TEST_DEPS],
        capture_output=True,
        text=True,
        timeout=600,
    )
    w.expect(proc.returncode == 0, f"installing pytest: {proc.stderr[-2000:]}")
    proc = venv.run(
        "python",
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        KWOK_TEST,
        cwd=suite,
        timeout=1200,
        AIRFLOW_TFK_K8S_BIN=str(bin_dir),
    )
    out = proc.stdout + proc.stderr
    w.expect(
        proc.returncode == 0 and re.search(r"\b1 passed\b", out),
        f"pytest {KWOK_TEST}: exit {proc.returncode}\n{out[-4000:]}",
    )
    return "1 passed"


def install_row(
    name: str, wheel: Path, work: Path, log: Callable[[str], None]
) -> tuple[Row, w.WheelVenv | None]:
    """The row's venv with the versions it stands for, and the versions resolved."""
    row = Row(name)
    floored = floors(wheel_requirements(wheel))
    start = time.monotonic()
    log(f"compat: {name}: installing the wheel in {work}/venv")
    try:
        if name == "lowest":
            pins = lowest_pins(floored)
            venv = w.WheelVenv.create(
                work, wheel, extras=EXTRAS, requirements=pins, resolution="lowest-direct"
            )
        else:
            venv = w.WheelVenv.create(work, wheel, extras=EXTRAS)
    except (w.InstallError, subprocess.SubprocessError) as exc:
        row.versions = {"python": platform.python_version(), **dict.fromkeys(floored, "-")}
        row.notes.append(f"install: {_first_error(str(exc))}")
        log(f"compat: {name}: install FAILED\n{str(exc)[-3000:]}")
        return row, None
    row.seconds["install"] = time.monotonic() - start
    versions = venv.versions(floored)
    row.versions = {"python": versions.pop("python"), **versions}
    log(f"compat: {name}: {row.versions}")
    return row, venv


def local_checks(venv: w.WheelVenv, expected_render: str) -> dict[str, Callable[[], str]]:
    """Every check but KWOK, which waits for the control plane build and so runs last."""
    version = w.pyproject()["project"]["version"]
    for dag in (ROOT / "dags").glob("*.py"):
        shutil.copyfile(dag, venv.dags / dag.name)
    shutil.copytree(ROOT / "trainings", venv.base / "trainings", dirs_exist_ok=True)
    found = [re.search(r'dag_id="([^"]+)"', p.read_text()) for p in (ROOT / "dags").glob("*.py")]
    dag_ids = [m.group(1) for m in found if m]
    return {
        "import": lambda: w.check_import(venv),
        "providers": lambda: w.check_provider(venv, version),
        "render": lambda: w.check_render(venv, expected_render),
        "DAG parse": lambda: w.check_dags(venv, dag_ids),
        "--version": lambda: w.check_version(venv, version),
        "quickstart": lambda: w.check_training(venv, "tfk_quickstart", QUICKSTART_CONF),
    }


def run_checks(row: Row, checks: dict[str, Callable[[], str]], log: Callable[[str], None]) -> None:
    for check, fn in checks.items():
        t0 = time.monotonic()
        try:
            detail = fn()
            row.results[check] = "pass"
            log(f"compat: {row.name}: {check}: pass ({detail}, {time.monotonic() - t0:.0f} s)")
        except NotRun as exc:
            row.notes.append(f"{check}: not run: {exc}")
            log(f"compat: {row.name}: {check}: not run ({exc})")
        except (AssertionError, subprocess.SubprocessError, OSError, ValueError) as exc:
            row.results[check] = "fail"
            row.notes.append(f"{check}: {_first_error(str(exc))}")
            log(f"compat: {row.name}: {check}: FAIL ({time.monotonic() - t0:.0f} s)\n{str(exc)[-3000:]}")
        row.seconds[check] = time.monotonic() - t0


def run_matrix(
    names: list[str], wheel: Path, base: Path, k8s: ControlPlaneBuild | None, log: Callable[[str], None]
) -> list[Row]:
    """All rows' local checks first, then the KWOK checks, so a control plane build still
    running overlaps as much work as there is."""
    expected = w.expected_render(w.EXAMPLE_SPEC)
    done: list[tuple[Row, w.WheelVenv | None]] = []
    try:
        for name in names:
            row, venv = install_row(name, wheel, base / name, log)
            done.append((row, venv))
            if venv is not None:
                run_checks(row, local_checks(venv, expected), log)
        for row, venv in done:
            if venv is not None and k8s is not None:
                run_checks(row, {"KWOK": lambda v=venv: check_kwok(v, k8s)}, log)
    finally:
        if not os.environ.get("TFK_COMPAT_KEEP"):
            for _, venv in done:
                if venv is not None:
                    venv.remove()
    return [row for row, _ in done]


def _first_error(text: str) -> str:
    """The line of a failure that says most: an ``Error:``/``error:`` line, else the first."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if re.search(r"(Error|error|Exception|FAILED|No solution)\b", ln):
            return ln[:300].replace("|", "\\|")
    return (lines[0] if lines else "(no output)")[:300].replace("|", "\\|")


# -- the table -----------------------------------------------------------------------------
def render_section(rows: list[Row], measured: str) -> str:
    """The README section: a heading line, the table, then one line per failure."""
    versions = list(rows[0].versions)
    header = ["row", *versions, *CHECKS]
    lines = [
        BEGIN,
        f"Measured by `bash scripts/compat.sh` on {measured}.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join(" --- " for _ in header) + "|",
    ]
    for row in rows:
        cells = [row.name, *(row.versions.get(v, "-") for v in versions), *(row.results[c] for c in CHECKS)]
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"- {row.name}, {note}" for row in rows for note in row.notes]
    if notes:
        lines += ["", *notes]
    lines.append(END)
    return "\n".join(lines)


def parse_section(readme: str) -> tuple[str, list[Row]]:
    """The measured line and the rows of the README's section; ValueError if it is not in
    this script's format."""
    if readme.count(BEGIN) != 1 or readme.count(END) != 1:
        raise ValueError(f"docs/compatibility.md needs exactly one {BEGIN} ... {END} section")
    body = readme[readme.index(BEGIN) : readme.index(END) + len(END)]
    match = re.search(r"^Measured by `bash scripts/compat\.sh` on (.+)\.$", body, re.M)
    if match is None:
        raise ValueError("the section lacks its 'Measured by `bash scripts/compat.sh` on ...' line")
    table = [ln for ln in body.splitlines() if ln.startswith("|")]
    if len(table) < 3:
        raise ValueError("the section has no table")
    header = [c.strip() for c in table[0].strip("|").split("|")]
    if header[0] != "row" or tuple(header[-len(CHECKS) :]) != CHECKS or header[1] != "python":
        raise ValueError(f"unexpected columns {header}")
    versions = header[1 : -len(CHECKS)]
    rows = []
    for line in table[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != len(header):
            raise ValueError(f"row {line!r} has {len(cells)} cells, the header {len(header)}")
        row = Row(cells[0], dict(zip(versions, cells[1 : 1 + len(versions)], strict=True)))
        row.results = dict(zip(CHECKS, cells[1 + len(versions) :], strict=True))
        bad = [r for r in row.results.values() if r not in RESULTS]
        if bad:
            raise ValueError(f"row {row.name}: results must be one of {RESULTS}, got {bad}")
        rows.append(row)
    if [r.name for r in rows] != list(ROWS):
        raise ValueError(f"rows must be {ROWS}, got {[r.name for r in rows]}")
    for line in body.splitlines():
        note = re.match(r"^- (\w+), (.+)$", line)
        if note:
            next(r for r in rows if r.name == note.group(1)).notes.append(note.group(2))
    return match.group(1), rows


def replace_section(readme: str, section: str) -> str:
    if readme.count(BEGIN) != 1 or readme.count(END) != 1:
        raise ValueError(f"docs/compatibility.md needs exactly one {BEGIN} ... {END} section")
    start, end = readme.index(BEGIN), readme.index(END) + len(END)
    return readme[:start] + section + readme[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/compat.sh", description=__doc__.split("\n\n")[0])
    parser.add_argument("--row", action="append", choices=ROWS, help="only this row (repeatable)")
    parser.add_argument("--no-readme", action="store_true", help="print the table; leave docs/compatibility.md alone")
    parser.add_argument("--no-kwok", action="store_true", help="skip the KWOK test (its column says not run)")
    args = parser.parse_args(argv)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    started = time.monotonic()
    base = Path(tempfile.mkdtemp(prefix="tfk-compat-"))
    try:
        dist = w.build(base / "dist")
        problems = w.wheel_problems(dist.wheel) + w.sdist_problems(dist.sdist)
        if problems:
            log("compat: the wheel or the sdist is not complete:\n" + "\n".join(problems))
            return 1
        k8s = None if args.no_kwok else ControlPlaneBuild(log)
        try:
            rows = run_matrix(list(args.row or ROWS), dist.wheel, base, k8s, log)
        finally:
            if k8s is not None:
                k8s.stop()
    finally:
        if not os.environ.get("TFK_COMPAT_KEEP"):
            shutil.rmtree(base, ignore_errors=True)
    measured = (
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d} (Linux {platform.machine()}; each row the wheel with its "
        f"`{','.join(EXTRAS)}` extra in a fresh venv, outside the checkout)"
    )
    section = render_section(rows, measured)
    print(section)
    for row in rows:
        timing = ", ".join(f"{k} {v:.0f} s" for k, v in row.seconds.items())
        log(f"compat: {row.name}: {timing}")
    log(f"compat: took {time.monotonic() - started:.0f} s")
    if not args.no_readme and args.row is None:
        README.write_text(replace_section(README.read_text(encoding="utf-8"), section), encoding="utf-8")
        log("compat: docs/compatibility.md updated")
    failed = any(
        r != "pass" for row in rows for c, r in row.results.items() if not (c == "KWOK" and args.no_kwok)
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
