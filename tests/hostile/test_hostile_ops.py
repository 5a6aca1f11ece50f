"""Hostile inputs of the operations classes: ``stall_seconds`` (operator, sensor, training
file), YAML 1.1 boolean words in specs and training files (``capacity_check: off``), and
fault runs on the local backend (a frozen chief).

Each input case is refused within 1 CPU-s and 100 MB with an error naming the field, or
accepted; none crashes, hangs or runs code. The fault runs and the RBAC probes live with
their subjects (tests/run/test_stall.py, tests/run/test_orphans.py,
tests/k8s_integration/test_rbac.py); the frozen-chief run is here.
"""

from __future__ import annotations

import io
import time
import tracemalloc
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_tfk.core.errors import SpecError

CPU_LIMIT = 1.0
MEMORY_LIMIT = 100 * 2**20
MARK = "tfk-hostile-ops-mark"
# A template that would leave a file behind if anything rendered it as code.
JINJA = "{{ cycler.__init__.__globals__.os.system('touch " + MARK + "') }}"


@dataclass(frozen=True)
class Case:
    id: str
    interface: str  # python | cli-spec | cli-training | dag-folder
    run: Callable[[Path], Any]
    field: str | None  # the field the error must name; None: accepted


def _operator(value: object) -> Callable[[Path], Any]:
    def run(_: Path) -> Any:
        from airflow_tfk.operators.training import TFTrainingOperator

        return TFTrainingOperator(task_id="t", cluster_spec={"image": "x:1"}, stall_seconds=value)

    return run


def _sensor(value: object) -> Callable[[Path], Any]:
    def run(_: Path) -> Any:
        from airflow_tfk.sensors.cluster import TFClusterSensor

        return TFClusterSensor(task_id="s", cluster={}, stall_seconds=value)

    return run


TRAINING = """\
cluster:
  image: example.com/train:1
  command: [python, train.py]
  mode: all_reduce
  worker: {replicas: 1}
"""
SPEC = "name: t\nimage: x:1\ncommand: [python]\nmode: all_reduce\nworker: {replicas: 1}\n"


def _cli(argv: list[str], name: str, text: str) -> Callable[[Path], Any]:
    """Run the CLI in-process on a file; a refusal is its first error line as SpecError."""

    def run(tmp: Path) -> Any:
        from airflow_tfk.cli import main as cli

        path = tmp / name
        path.write_text(text, encoding="utf-8")
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = cli.main([*argv, str(path)])
        if code == 0:
            return out.getvalue()
        line = next(ln for ln in err.getvalue().splitlines() if ln.startswith("error: "))
        # "error: <file>:<line>: <field>: <rule>" (validate) or "error: <field>: <rule>" (render)
        rest = line[len("error: ") :]
        if rest.startswith(str(path)):
            rest = rest[len(str(path)) :].split(": ", 1)[1]
        field, rule = rest.split(": ", 1)
        raise SpecError(field, rule)

    return run


def _dag_folder(text: str) -> Callable[[Path], Any]:
    """A DAG-as-code folder of one file, loaded as the DAG processor would."""

    def run(tmp: Path) -> Any:
        from airflow_tfk.dagfactory.loader import load_into

        folder = tmp / "trainings"
        folder.mkdir(exist_ok=True)
        (folder / "t.yaml").write_text(text, encoding="utf-8")
        namespace: dict[str, Any] = {}
        result = load_into(namespace, str(tmp / "dags" / "x.py"), folder=str(folder))
        if result.errors:
            (error,) = result.errors
            raise SpecError(error.field, error.message)
        assert result.dags, "no DAG and no error"
        return result.dags

    return run


STALL_BAD: list[tuple[str, object]] = [
    ("negative", -1),
    ("below-one", 0.5),
    ("huge-int", 10**400),
    ("nan", float("nan")),
    ("inf", float("inf")),
    ("over-a-week", 604801),
    ("bool", True),
    ("text", "900"),
    ("list", [900]),
    ("dict", {"s": 1}),
    ("jinja", JINJA),
]
STALL_GOOD: list[tuple[str, object]] = [
    ("off", 0),
    ("one", 1),
    ("default", 900),
    ("week", 604800),
    ("float", 90.5),
    ("none-is-the-default", None),  # the default, which follows progress_interval
]
STALL_YAML_BAD = [
    ("negative", "-1"),
    ("below-one", "0.5"),
    ("inf", ".inf"),
    ("nan", ".nan"),
    ("over-a-week", "604801"),
    ("bool", "true"),
    ("yes-word", "yes"),
    ("quoted", '"900"'),
    ("list", "[900]"),
    ("mapping", "{s: 1}"),
    ("jinja", f'"{JINJA}"'),
    ("duration-text", "15m"),
    ("sexagesimal", "15:00"),
]
# null, as absent: the default, which follows progress_interval
STALL_YAML_GOOD = [("off", "0"), ("one", "1"), ("default", "900"), ("float", "90.5"), ("null", "null")]
# A YAML 1.1 boolean word in a field that takes text: the text, as YAML 1.2 reads it.
SPEC_WORDS_OK = [
    ("capacity_check", "off"),
    ("env", "{DEBUG: yes}"),
    ("env", "{FLAG: 'off'}"),
    ("labels", "{team: no}"),
    ("args", "[--verbose, on]"),
]
SPEC_WORDS_BAD = [
    ("capacity_check", "on"),
    ("capacity_check", "OFF"),
    ("capacity_check", "yes"),
    ("layout", "n"),
    ("mode", "y"),
    ("legacy_tf1_flags", "yes"),
    ("legacy_tf1_flags", "Off"),
    ("network_policy", "off"),
]
TRAINING_WORDS_BAD = [
    ("deferrable", "yes"),
    ("catchup", "no"),
    ("tensorboard", "on"),
    ("cleanup", "off"),
]


def cases() -> list[Case]:
    out: list[Case] = []
    for name, value in STALL_BAD:
        out.append(Case(f"operator-stall-{name}", "python", _operator(value), "stall_seconds"))
        out.append(Case(f"sensor-stall-{name}", "python", _sensor(value), "stall_seconds"))
    for name, value in STALL_GOOD:
        out.append(Case(f"operator-stall-{name}", "python", _operator(value), None))
        out.append(Case(f"sensor-stall-{name}", "python", _sensor(value), None))
    for name, text in STALL_YAML_BAD:
        body = f"stall_seconds: {text}\n" + TRAINING
        out.append(
            Case(
                f"validate-stall-{name}", "cli-training", _cli(["validate"], "t.yaml", body), "stall_seconds"
            )
        )
        out.append(Case(f"folder-stall-{name}", "dag-folder", _dag_folder(body), "stall_seconds"))
    for name, text in STALL_YAML_GOOD:
        body = f"stall_seconds: {text}\n" + TRAINING
        out.append(Case(f"validate-stall-{name}", "cli-training", _cli(["validate"], "t.yaml", body), None))
        out.append(Case(f"folder-stall-{name}", "dag-folder", _dag_folder(body), None))
    for field, text in SPEC_WORDS_OK:
        out.append(
            Case(
                f"render-{field}-{text}",
                "cli-spec",
                _cli(["render"], "s.yaml", SPEC + f"{field}: {text}\n"),
                None,
            )
        )
        body = TRAINING + f"  {field}: {text}\n"
        out.append(
            Case(f"validate-cluster-{field}-{text}", "cli-training", _cli(["validate"], "t.yaml", body), None)
        )
    for field, text in SPEC_WORDS_BAD:
        out.append(
            Case(
                f"render-{field}-{text}",
                "cli-spec",
                _cli(["render"], "s.yaml", SPEC + f"{field}: {text}\n"),
                field,
            )
        )
        body = TRAINING + f"  {field}: {text}\n"
        out.append(
            Case(
                f"validate-cluster-{field}-{text}",
                "cli-training",
                _cli(["validate"], "t.yaml", body),
                f"cluster.{field}",
            )
        )
    for field, text in TRAINING_WORDS_BAD:
        body = f"{field}: {text}\n" + TRAINING
        out.append(
            Case(f"validate-{field}-{text}", "cli-training", _cli(["validate"], "t.yaml", body), field)
        )
    return out


CASES = cases()


def _field_ok(got: str, want: str) -> bool:
    return got == want or got.startswith((f"{want}.", f"{want}[")) or f" {want}:" in f" {got}"


def _measure(case: Case, tmp: Path) -> tuple[object, float, int]:
    tracemalloc.start()
    cpu = time.process_time()
    try:
        result: object = case.run(tmp)
    except Exception as exc:  # classified below
        result = exc
    seconds = time.process_time() - cpu
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return result, seconds, peak


def _classify(case: Case, result: object, seconds: float, peak: int, tmp: Path) -> str:
    if (tmp / MARK).exists() or Path(MARK).exists():
        return "code executed"
    if seconds > CPU_LIMIT or peak > MEMORY_LIMIT:
        return f"over budget ({seconds:.2f} CPU-s, {peak / 2**20:.0f} MB)"
    if isinstance(result, SpecError):
        if case.field is None:
            return f"refused a valid case: {result}"
        return "refused clearly" if _field_ok(result.field, case.field) else f"wrong field: {result}"
    if isinstance(result, Exception):
        return f"crashed: {type(result).__name__}: {str(result)[:200]}"
    return "accepted valid" if case.field is None else "accepted an invalid case"


@pytest.mark.timeout(300)
def test_every_case_is_refused_naming_its_field_or_accepted(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    # Importing Airflow is a one-time cost of the process, not of a case.
    import airflow_tfk.dagfactory.loader
    import airflow_tfk.operators.training
    import airflow_tfk.sensors.cluster  # noqa: F401

    for warm in (CASES[0], next(c for c in CASES if c.interface == "dag-folder")):
        _measure(warm, tmp_path)
    verdicts: dict[str, str] = {}
    for i, case in enumerate(CASES):
        tmp = tmp_path / str(i)
        tmp.mkdir()
        result, seconds, peak = _measure(case, tmp)
        verdicts[case.id + f" [{case.interface}]"] = _classify(case, result, seconds, peak, tmp)
    counts: dict[str, int] = {}
    for verdict in verdicts.values():
        key = verdict if verdict in ("refused clearly", "accepted valid") else verdict.split(":")[0]
        counts[key] = counts.get(key, 0) + 1
    print(
        f"\nhostile ops cases: {len(CASES)} tried; "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    )
    bad = {k: v for k, v in verdicts.items() if v not in ("refused clearly", "accepted valid")}
    assert not bad, bad
    assert len(CASES) >= 40
    assert {c.interface for c in CASES} == {"python", "cli-spec", "cli-training", "dag-folder"}
