"""Every example in README.md and docs/ is run, as a class: a new example is checked the
moment it is written, and an example the code no longer accepts fails here.

- YAML: a training file (it has ``cluster:``) goes through ``airflow-tfk validate``; any
  other mapping is a cluster spec, or a fragment of one, read by the spec's own YAML reader
  (so ``capacity_check: off`` means what a user's file would mean) and validated.
- Python: every block compiles; every block that needs neither TensorFlow nor a server
  runs (inside a DAG, with the public operators imported, as a DAG file would have them).
- Shell: each ``airflow-tfk validate`` / ``render`` line runs from the repository root.
- Error messages shown in the docs are produced by the real code from a file made to
  trigger them, and must read as the docs say.
- Advice in errors: every value an enum field's error lists is accepted, unquoted, by both
  YAML readers.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import shutil
import subprocess
import sys
import textwrap
import typing
from pathlib import Path

import pytest

from airflow_tfk.spec.cluster import TFClusterSpec
from airflow_tfk.spec.yaml_reader import load_yaml_mapping

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@dataclasses.dataclass(frozen=True)
class Block:
    path: Path
    line: int
    lang: str
    text: str
    heading: str = ""  # the section it is in

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


_FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```", re.M | re.S)


def blocks(*langs: str) -> list[Block]:
    """Fenced blocks in these languages, indented ones (in a list item) too."""
    out = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for m in _FENCE.finditer(text):
            if m.group(2) in langs:
                before = text[: m.start()]
                headings = re.findall(r"^#+ (.+)$", before, flags=re.M)
                body = textwrap.dedent(m.group(3))
                out.append(
                    Block(path, before.count("\n") + 1, m.group(2), body, headings[-1] if headings else "")
                )
    return out


def _ids(items: list[Block]) -> list[str]:
    return [b.where for b in items]


# -- YAML -------------------------------------------------------------------------------------
# The example files the docs point at are examples too.
YAML = blocks("yaml") + [
    Block(p, 1, "yaml", p.read_text(encoding="utf-8")) for p in sorted((ROOT / "docs").rglob("*.yaml"))
]
# What a fragment of a spec is completed with: the fields every spec needs.
BASE = {"name": "docs-example", "image": "example.com/train:1", "command": ["python", "train.py"]}


def _complete(fragment: dict[str, typing.Any]) -> dict[str, typing.Any]:
    spec = {**BASE, **fragment}
    mode = spec.get("mode", "between_graph")
    spec.setdefault("worker", {"replicas": 1})
    if mode != "all_reduce":
        spec.setdefault("ps", {"replicas": 1})
    if mode == "parameter_server":
        spec.setdefault("chief", {"replicas": 1})
    return spec


def test_the_docs_have_yaml_examples() -> None:
    assert len(YAML) >= 5, _ids(YAML)  # the collector finds them


@pytest.mark.parametrize("block", YAML, ids=_ids(YAML))
def test_yaml_example_is_accepted(block: Block, tmp_path: Path, capsys) -> None:
    import yaml

    data = yaml.safe_load(block.text)
    if isinstance(data, list):  # a CI step: its command lines are shell examples
        for step in data:
            assert isinstance(step, dict) and "run" in step, block.where
        return
    assert isinstance(data, dict), block.where
    if "cluster" in data:  # a training file
        from airflow_tfk.cli.main import main

        path = tmp_path / "example.yaml"
        path.write_text(block.text, encoding="utf-8")
        code = main(["validate", str(path)])
        out = capsys.readouterr()
        assert code == 0, f"{block.where}: {out.out}{out.err}"
        return
    data = load_yaml_mapping(block.text)
    if "Serving" in block.heading or "TensorBoard" in block.heading:  # a service's options
        from airflow_tfk.spec.network import ServiceNetworkPolicy

        assert set(data) == {"network_policy"}, block.where
        ServiceNetworkPolicy.from_value(data["network_policy"])
        return
    TFClusterSpec.from_dict(_complete(data))


# -- Python -----------------------------------------------------------------------------------
PYTHON = blocks("python")
# Blocks that need TensorFlow, Keras or a running model server only compile here; the
# training apps among them run in the runtime's own tests.
_NEEDS = re.compile(r"^\s*(import|from)\s+(tensorflow|keras|grpc|tensorflow_serving)\b", re.M)
PRELUDE = """
from airflow.sdk import DAG
from airflow_tfk.operators.serving import TFPublishModelOperator
from airflow_tfk.operators.sweep import TFHyperparameterSweepOperator
from airflow_tfk.operators.tensorboard import TFStopTensorBoardOperator, TFStartTensorBoardOperator
from airflow_tfk.operators.training import TFTrainingOperator
"""
RUNNER = """
import json, sys, traceback
blocks = json.load(sys.stdin)
failed = []
for where, code in blocks:
    ns = {"__name__": "docs_example", "__file__": sys.argv[1]}
    try:
        exec(compile(PRELUDE, "prelude", "exec"), ns)
        if "with DAG(" in code:
            exec(compile(code, where, "exec"), ns)
        else:
            with ns["DAG"](dag_id="docs_example", schedule=None):
                exec(compile(code, where, "exec"), ns)
    except BaseException:
        failed.append(where + ": " + traceback.format_exc(limit=3))
print(json.dumps(failed))
"""


@pytest.mark.parametrize("block", PYTHON, ids=_ids(PYTHON))
def test_python_example_compiles(block: Block) -> None:
    compile(block.text, block.where, "exec")


@pytest.mark.timeout(120)
def test_python_examples_run(tmp_path: Path) -> None:
    """One interpreter for all of them (Airflow's import is the cost)."""
    import json

    runnable = [(b.where, b.text) for b in PYTHON if not _NEEDS.search(b.text)]
    assert len(runnable) >= 4, runnable
    script = f"PRELUDE = {PRELUDE!r}\n{RUNNER}"
    # A repository laid out as the docs draw it (dags/, trainings/, trainings/team-b/).
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "trainings", repo / "trainings")
    (repo / "trainings" / "team-b").mkdir()
    shutil.copy(ROOT / "docs" / "examples" / "imagenet.yaml", repo / "trainings" / "team-b")
    (repo / "dags").mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", script, str(repo / "dags" / "docs_example.py")],
        input=json.dumps(runnable),
        capture_output=True,
        text=True,
        cwd=repo,
        timeout=110,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    failed = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not failed, "\n".join(failed)


# -- shell ------------------------------------------------------------------------------------
def _cli_lines() -> list[tuple[str, list[str], str]]:
    """(where, argv, the output the docs show for it: a comment line right below)."""
    out = []
    for block in [*blocks("bash", "sh"), *YAML]:
        lines = block.text.splitlines()
        for i, raw in enumerate(lines):
            line = re.sub(r"\s+#.*$", "", raw).split(" > ")[0].strip()
            m = re.search(r"\bairflow-tfk (validate|render)\b(.*)$", line)
            if m:
                shown = (
                    lines[i + 1].lstrip("# ").strip()
                    if i + 1 < len(lines) and lines[i + 1].startswith("#")
                    else ""
                )
                out.append((f"{block.where}: {line}", [m.group(1), *m.group(2).split()], shown))
    return out


CLI = _cli_lines()


def test_the_docs_have_cli_examples() -> None:
    assert any(argv[0] == "validate" for _, argv, _ in CLI), CLI
    assert any(argv[0] == "render" and shown for _, argv, shown in CLI), CLI


@pytest.mark.parametrize(("where", "argv", "shown"), CLI, ids=[w for w, _, _ in CLI])
def test_cli_example_runs(where: str, argv: list[str], shown: str, monkeypatch, capsys) -> None:
    from airflow_tfk.cli.main import main

    monkeypatch.chdir(ROOT)
    paths = [a for a in argv[1:] if not a.startswith("-")]
    missing = [p for p in paths if not (ROOT / p).exists()]
    if missing:
        # A placeholder for the reader's own file: the command must say so plainly.
        code = main(argv)
        out = capsys.readouterr()
        assert code == 2 and "no such" in (out.out + out.err).lower(), (where, code, out)
        return
    code = main(argv)
    out = capsys.readouterr()
    assert code == 0, f"{where}: {out.out}{out.err}"
    assert shown in out.out + out.err, (where, shown, out.err)


# -- error messages shown in the docs -----------------------------------------------------------
_TRAINING = """\
cluster:
  image: example.com/train:1
  command: [python, train.py]
  mode: all_reduce
  worker: {replicas: 1}
"""
# Each documented error (without its file and line) and a training file that triggers it.
TRIGGERS: dict[str, str] = {
    "cluster.worker.replicas: must be between 1 and 10000 (got -1)": _TRAINING.replace(
        "{replicas: 1}", "{replicas: -1}"
    ),
    "schedule: is not a valid cron expression: [0 25 * * *] is not acceptable, out of range; write 5 fields "
    "(minute hour day-of-month month day-of-week, e.g. '0 3 * * *'), or a preset: @once, @continuous, "
    "@hourly, @daily, @weekly, @monthly, @quarterly, @yearly": ('schedule: "0 25 * * *"\n' + _TRAINING),
    "params.steps.minimun: unknown key (did you mean 'minimum'? allowed: ...)": (
        "params: {steps: {default: 1, type: integer, minimun: 1}}\n" + _TRAINING
    ),
    "publish.serving.replicas: must be between 1 and 100 (got 0)": (
        "publish: {model_name: m, claim: c, serving: {replicas: 0}}\n" + _TRAINING
    ),
    "dag_id: is already used by trainings/digits.yaml (got 'digits_nightly')": "",  # two files
}
# Each documented ``airflow-tfk`` error line and the command (with the spec file it reads,
# None: the argv's own path) that prints it.
_NEGATIVE = "name: t\nimage: x:1\ncommand: [python]\nmode: all_reduce\nworker: {replicas: -1}\n"
CLI_TRIGGERS: dict[str, tuple[list[str], str | None]] = {
    "error: Job imagenet-worker: spec.podFailurePolicy.rules[1]: 'onPodConditions' is a required "
    "property (Kubernetes 1.27)": (
        ["render", "--validate", "--kubernetes-version", "1.27", "docs/examples/imagenet.yaml"],
        None,
    ),
    "error: worker.replicas: must be between 1 and 10000 (got -1)": (["render"], _NEGATIVE),
}
_ERROR_LINE = re.compile(r"^(?:[\w./-]+\.ya?ml):\d+: (.+)$")
_CLI_ERROR = re.compile(r"^error: \S.*: .+$")


def documented_errors() -> list[tuple[str, str]]:
    out = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        candidates = re.findall(r"`([^`\n]+)`", text)
        for m in re.finditer(r"^```\w*\n(.*?)^```", text, flags=re.M | re.S):
            candidates += m.group(1).splitlines()
        for c in candidates:
            if (e := _ERROR_LINE.match(c.strip())) and ": " in e.group(1):
                out.append((str(path.relative_to(ROOT)), e.group(1)))
            elif _CLI_ERROR.match(c.strip()):
                out.append((str(path.relative_to(ROOT)), c.strip()))
    return out


ERRORS = documented_errors()


def test_every_documented_error_has_a_trigger() -> None:
    assert len(ERRORS) >= 7, ERRORS
    untested = sorted({e for _, e in ERRORS} - set(TRIGGERS) - set(CLI_TRIGGERS))
    assert not untested, f"documented errors with nothing here that triggers them: {untested}"


@pytest.mark.parametrize("error", sorted(CLI_TRIGGERS))
def test_documented_cli_error_is_what_the_cli_prints(error: str, tmp_path: Path, monkeypatch, capsys) -> None:
    from airflow_tfk.cli.main import main

    monkeypatch.chdir(ROOT)
    argv, spec = CLI_TRIGGERS[error]
    if spec is not None:
        (tmp_path / "spec.yaml").write_text(spec, encoding="utf-8")
        argv = [*argv, str(tmp_path / "spec.yaml")]
    assert main(argv) != 0
    assert error in capsys.readouterr().err.splitlines()


def _validate(files: dict[str, str], tmp_path: Path, capsys) -> str:
    from airflow_tfk.cli.main import main

    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    code = main(["validate", str(tmp_path)])
    out = capsys.readouterr()
    assert code == 1, out
    return out.out + out.err


@pytest.mark.parametrize("error", sorted(TRIGGERS))
def test_documented_error_is_what_the_code_says(error: str, tmp_path: Path, capsys) -> None:
    if error.startswith("dag_id: is already used by"):
        nightly = "dag_id: digits_nightly\n" + _TRAINING
        (tmp_path / "trainings").mkdir()
        files = {"trainings/digits.yaml": nightly, "trainings/nightly-copy.yaml": nightly}
        out = _validate(files, tmp_path, capsys)
        expected = error.replace("trainings/digits.yaml", str(tmp_path / "trainings" / "digits.yaml"))
    else:
        out = _validate({"example.yaml": TRIGGERS[error]}, tmp_path, capsys)
        expected = error
    if expected.endswith("allowed: ...)"):  # the docs elide the list
        assert expected[: -len("...)")] in out, out
    else:
        assert expected in out, out


# -- an error's advice works ------------------------------------------------------------------
def _enum_fields() -> list[tuple[str, str]]:
    hints = typing.get_type_hints(TFClusterSpec, vars(sys.modules[TFClusterSpec.__module__]))
    out = []
    for f in dataclasses.fields(TFClusterSpec):
        for arg in (hints[f.name], *typing.get_args(hints[f.name])):
            if isinstance(arg, type) and issubclass(arg, enum.Enum):
                out += [(f.name, str(member.value)) for member in arg]
    return out


ENUMS = _enum_fields()


def test_enum_fields_are_found() -> None:
    assert ("capacity_check", "off") in ENUMS and ("mode", "all_reduce") in ENUMS, ENUMS


@pytest.mark.parametrize(("field", "value"), ENUMS, ids=[f"{f}={v}" for f, v in ENUMS])
def test_every_listed_enum_value_is_accepted_unquoted(field: str, value: str, tmp_path: Path, capsys) -> None:
    """An error that says "must be one of off, warn, fail" is advice: `off`, written as
    the reader would write it, must then be accepted, in a spec file and a training file."""
    spec = TFClusterSpec.from_dict(_complete(load_yaml_mapping(f"{field}: {value}\n")))
    got = getattr(spec, field)
    assert (got.value if isinstance(got, enum.Enum) else got) == value
    from airflow_tfk.cli.main import main

    cluster = textwrap.indent(f"{field}: {value}\n", "  ")
    body = _TRAINING if field != "mode" else _TRAINING.replace("  mode: all_reduce\n", "")
    if field == "mode" and value != "all_reduce":
        cluster += "  ps: {replicas: 1}\n" + (
            "  chief: {replicas: 1}\n" if value == "parameter_server" else ""
        )
    (tmp_path / "t.yaml").write_text(body + cluster, encoding="utf-8")
    code = main(["validate", str(tmp_path / "t.yaml")])
    out = capsys.readouterr()
    assert code == 0, out
