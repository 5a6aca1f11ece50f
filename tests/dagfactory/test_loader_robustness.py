"""One bad file harms nobody (issue 22, items 5, 12 and 16): what is not a regular file, what
leads out of the folder, what cannot be listed, names that would forge lines, patterns that
backtrack, typos below the top level. Each is that file's error, naming the field; the
other files load.
"""

from __future__ import annotations

import io
import json
import os
import re
import threading
import time
from pathlib import Path

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.dagfactory import validate
from airflow_tfk.dagfactory.loader import FolderResult, load_folder, training_files
from airflow_tfk.dagfactory.patterns import check_pattern

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = {"image": "i", "mode": "all_reduce", "command": ["a"], "worker": {"replicas": 1}}


def write(folder: Path, name: str, **data: object) -> Path:
    path = folder / name
    path.write_text(json.dumps({"cluster": CLUSTER, **data}))
    return path


def load_bounded(folder: Path, seconds: float = 20.0) -> FolderResult:
    """``load_folder`` on a thread: a hang fails the test instead of stopping the run."""
    box: list[FolderResult] = []
    thread = threading.Thread(target=lambda: box.append(load_folder(folder)), daemon=True)
    thread.start()
    thread.join(seconds)
    assert box, f"load_folder({folder}) did not return within {seconds} s"
    return box[0]


def errors_by_name(result: FolderResult) -> dict[str, tuple[str, str]]:
    return {e.path.name: (e.field, e.message) for e in result.errors}


def test_a_fifo_named_yaml_is_that_files_error_and_the_others_load(tmp_path: Path) -> None:
    write(tmp_path, "good.yaml")
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    try:
        result = load_bounded(tmp_path)
    finally:
        # Release a reader blocked in open() (today's code), so the thread can end.
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
    assert list(result.dags) == ["good"]
    assert errors_by_name(result)["fifo.yaml"] == ("spec", "is not a regular file (a FIFO); not read")


def test_symbolic_links_may_not_lead_out_of_the_folder(tmp_path: Path) -> None:
    outside = write(tmp_path, "outside.yaml", dag_id="outside")
    folder = tmp_path / "trainings"
    folder.mkdir()
    write(folder, "real.yaml")
    (folder / "alias.yml").symlink_to(folder / "real.yaml")  # inside the folder: read
    (folder / "escape.yaml").symlink_to(outside)
    (folder / "environ.yaml").symlink_to("/proc/self/environ")
    result = load_bounded(folder)
    errors = errors_by_name(result)
    assert errors["escape.yaml"][1].startswith("is a symbolic link out of")
    assert errors["environ.yaml"][1].startswith("is a symbolic link out of")
    assert set(errors) == {"escape.yaml", "environ.yaml"}
    assert sorted(result.dags) == ["alias", "real"]


def test_sub_folders_that_cannot_be_listed_or_are_links_are_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, "good.yaml")
    (tmp_path / "locked").mkdir()
    write(tmp_path / "locked", "hidden.yaml")
    (tmp_path / "linked").symlink_to(tmp_path / "locked")
    real_scandir = os.scandir

    def scandir(path: object = "."):  # root may read any folder: make this one unreadable
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "scandir", scandir)
    errors: list = []
    assert [p.name for p in training_files(tmp_path, errors)] == ["good.yaml"]
    said = {e.path.name: e.message for e in errors}
    assert said == {
        "locked": "folder cannot be read: Permission denied",
        "linked": "is a symbolic link to a folder; not followed",
    }
    out, err = io.StringIO(), io.StringIO()
    assert validate.run([str(tmp_path)], out, err) == validate.EXIT_INVALID
    assert "locked: spec: folder cannot be read" in err.getvalue()


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"dag_id": "evil\n"}, "dag_id"),
        ({"dag_id": "evil\r"}, "dag_id"),
        ({"dag_id": "ok\u202egnp"}, "dag_id"),
        ({"tags": ["a\n"]}, "tags[0]"),
        ({"tags": ["\x1b[31mred"]}, "tags[0]"),
        ({"owners": ["me\nyou"]}, "owners[0]"),
        ({"params": {"steps\n": 1}}, "params.steps\n"),
        ({"kubernetes_conn_id": "k8s\n"}, "kubernetes_conn_id"),
        ({"description": "two\nlines\tare fine \x1b[2J but not this"}, "description"),
    ],
)
def test_names_with_control_characters_are_refused(tmp_path: Path, data: dict, field: str) -> None:
    write(tmp_path, "t.yaml", **data)
    [error] = load_bounded(tmp_path).errors
    assert error.field == field
    assert "\n" not in error.describe() and "\x1b" not in error.describe()


def test_a_file_name_cannot_forge_an_ok_line_or_colour_the_terminal(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml")
    write(tmp_path, "x\nok: forged.yaml: dag forged (manual; tasks train)\n.yaml")
    write(tmp_path, "\x1b[32mgreen.yaml")
    out, err = io.StringIO(), io.StringIO()
    assert validate.run([str(tmp_path)], out, err) == validate.EXIT_INVALID
    lines = (out.getvalue() + err.getvalue()).splitlines()
    assert [line for line in lines if line.startswith("ok:")] == [
        f"ok: {tmp_path}/a.yaml: dag a (manual; tasks train)"
    ]
    assert not any("\x1b" in line for line in lines)
    assert any("x\\nok: forged.yaml" in line and line.startswith("error: ") for line in lines)
    assert "1 valid, 2 invalid training file(s)" in lines


def test_files_not_reached_within_the_budget_are_each_reported(tmp_path: Path) -> None:
    for name in ("a.yaml", "b.yaml", "c.yaml"):
        write(tmp_path, name)
    assert len(load_folder(tmp_path).dags) == 3
    result = load_folder(tmp_path, budget=0.0)
    assert not result.dags
    assert [e.path.name for e in result.errors] == ["a.yaml", "b.yaml", "c.yaml"]
    assert all(e.message.startswith("not loaded: this folder took longer than 0 s") for e in result.errors)


CATASTROPHIC = [
    r"^(a+)+$",
    r"^(a|aa)+$",
    r"^(a|a)*$",
    r"^(\w+\s?)*$",
    r"^(.*a){20}$",
    r"^(a?){25}a{25}$",
    r"^.*a.*b$",
    r"^\d*\d*\d*$",
    r"^(x+x+)+y$",
    r"^([a-z]+\.?)*$",
    r"^(a)\1$",
    r"^(?:a+|b)+c$",
    r"(a+)+$",
    r"[",
]
SAFE = [
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
    r"^\d+\.\d+$",
    r"^(\d{1,3}\.){3}\d{1,3}$",
    r"^[^\s{}]+$",
    r"^[a-z]+(\.[a-z]+)*$",
    r"^(foo|bar)+$",
    r"^(a++)+$",
    r"^gs://[a-z0-9._-]+(/[^/\s]+)*/?$",
]
PROBES = ["a" * 50_000 + "!", "1" * 50_000 + "!", "a." * 25_000 + "!", " " * 50_000 + "\n!", "x" * 50_000]


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_a_param_pattern_that_can_backtrack_is_refused(tmp_path: Path, pattern: str) -> None:
    write(tmp_path, "good.yaml")
    write(tmp_path, "bad.yaml", params={"x": {"default": "a", "type": "string", "pattern": pattern}})
    result = load_bounded(tmp_path)
    assert list(result.dags) == ["good"]
    assert errors_by_name(result)["bad.yaml"][0] == "params.x.pattern"


@pytest.mark.parametrize("pattern", SAFE)
def test_accepted_patterns_run_in_linear_time_on_hostile_values(pattern: str) -> None:
    check_pattern(pattern, "params.x.pattern")
    compiled = re.compile(pattern)
    for probe in PROBES:
        start = time.process_time()
        compiled.search(probe)
        assert time.process_time() - start < 0.5, (pattern, probe[:10])


def test_patterns_are_checked_at_any_depth_of_the_schema(tmp_path: Path) -> None:
    param = {"default": ["a"], "type": "array", "items": {"type": "string", "pattern": "^(a+)+$"}}
    write(tmp_path, "t.yaml", params={"x": param})
    [error] = load_bounded(tmp_path).errors
    assert error.field == "params.x.items.pattern"


@pytest.mark.parametrize(
    ("data", "field", "said"),
    [
        ({"backend": "local", "backend_config": {"roott": "/x"}}, "backend_config.roott", "unknown option"),
        ({"backend": "kubernetes", "backend_config": {"conn": "x"}}, "backend_config.conn", "unknown option"),
        (
            {"publish": {"model_name": "m", "base_path": "/m", "version": "lastest"}},
            "publish.version",
            "integer",
        ),
        ({"publish": {"model_name": "m", "base_path": "/m", "version": 1.5}}, "publish.version", "integer"),
        (
            {
                "params": {"r": 1},
                "publish": {
                    "model_name": "m",
                    "base_path": "/m",
                    "serving": {"replicas": "{{ params.r }}", "replcas": 2},
                },
            },
            "publish.serving.replcas",
            "unknown key",
        ),
        (
            {
                "params": {"r": 0},
                "publish": {"model_name": "m", "base_path": "/m", "serving": {"replicas": "{{ params.r }}"}},
            },
            "publish.serving.replicas",
            "between",
        ),
        (
            {"tensorboard": {"base_path": "/l", "tensorboard": {"port": "{{ ds }}", "prot": 1}}},
            "tensorboard.tensorboard.prot",
            "unknown key",
        ),
        ({"cluster": {**CLUSTER, "args": ["{{ params.x "]}}, "cluster.args[0]", "is not a valid template"),
        ({"cluster": {**CLUSTER, "args": ["{% if %}"]}}, "cluster.args[0]", "is not a valid template"),
        ({"cluster": {**CLUSTER, "args": ["{# unclosed"]}}, "cluster.args[0]", "is not a valid template"),
        ({"backend_config": {"root": "{{ params.x }"}}, "backend_config.root", "is not a valid template"),
    ],
)
def test_validate_finds_typos_below_the_top_level(tmp_path: Path, data: dict, field: str, said: str) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(json.dumps({"cluster": CLUSTER, **data}))
    out, err = io.StringIO(), io.StringIO()
    assert validate.run([str(path)], out, err) == validate.EXIT_INVALID
    [line] = [line for line in err.getvalue().splitlines() if line.startswith("error: ")]
    assert f": {field}: " in line and said in line, line


def test_templated_values_that_are_fine_still_pass(tmp_path: Path) -> None:
    data = {
        "params": {"r": 2, "v": "3"},
        "publish": {
            "model_name": "m",
            "base_path": "/m",
            "version": "{{ params.v }}",
            "serving": {"replicas": "{{ params.r }}"},
        },
        "backend": "local",
        "backend_config": {"root": "/tmp/{{ ds_nodash }}"},
    }
    write(tmp_path, "t.yaml", **data)
    result = load_bounded(tmp_path)
    assert not result.errors and list(result.dags) == ["t"]


def test_check_pattern_names_the_field() -> None:
    with pytest.raises(SpecError) as caught:
        check_pattern("(a+)+", "params.name.pattern")
    assert caught.value.field == "params.name.pattern"


def test_in_the_dagbag_each_bad_file_is_its_own_import_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A FIFO, a backtracking pattern and a template payload beside a valid training: the
    DagBag loads the valid DAG and keys each error by its own file."""
    from airflow.dag_processing.dagbag import DagBag

    monkeypatch.delenv("TFK_TRAININGS_DIR", raising=False)
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "tfk_trainings.py").write_text((ROOT / "dags" / "tfk_trainings.py").read_text())
    folder = tmp_path / "trainings"
    folder.mkdir()
    write(folder, "good.yaml")
    os.mkfifo(folder / "fifo.yaml")
    write(folder, "regex.yaml", params={"x": {"default": "a", "type": "string", "pattern": "^(a+)+$"}})
    write(folder, "code.yaml", cluster={**CLUSTER, "args": ["{{ cycler.__init__.__globals__ }}"]})
    bag = DagBag(dag_folder=str(tmp_path / "dags"))
    assert set(bag.dag_ids) == {"good"}
    assert {Path(p).name: m.split(": ")[1] for p, m in bag.import_errors.items()} == {
        "fifo.yaml": "spec",
        "regex.yaml": "params.x.pattern",
        "code.yaml": "cluster.args[0]",
    }


def test_validate_warns_above_the_files_one_dag_file_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_tfk.dagfactory import loader

    for name in ("a.yaml", "b.yaml"):
        write(tmp_path, name)
    monkeypatch.setattr(loader, "FILES_PER_DAG_FILE", 1)
    out, err = io.StringIO(), io.StringIO()
    assert validate.run([str(tmp_path)], out, err) == validate.EXIT_OK
    assert err.getvalue().startswith("warning: 2 training files; one DAG file loads about 1 ")


def test_the_file_shown_in_the_dag_docs_cannot_close_its_code_fence(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    text = (
        json.dumps({"cluster": CLUSTER, "description": "x"})
        + "\n# ```\n# [click](https://evil.example) ````\n"
    )
    path.write_text(text)
    dag = load_bounded(tmp_path).dags["t"]
    fence = "`" * 5
    assert f"{fence}yaml\n{text.rstrip()}\n{fence}" in dag.doc_md


def test_only_the_first_errors_are_logged_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_tfk.dagfactory import import_errors
    from airflow_tfk.dagfactory.loader import TrainingFileError

    warned: list[str] = []
    monkeypatch.setattr(
        import_errors.warnings, "warn_explicit", lambda message, *a, **k: warned.append(message)
    )
    lines: list[str] = []

    class Log:
        def error(self, message: str, *args: object) -> None:
            lines.append(message % args)

    monkeypatch.setattr(import_errors, "log", Log())
    errors = [
        TrainingFileError(Path(f"/t/{i}.yaml"), "spec", "not loaded") for i in range(import_errors.LOGGED * 5)
    ]
    assert import_errors.report(errors) is False  # no importer on the stack: warnings
    assert len(warned) == len(errors)  # every file still gets its own record
    assert len(lines) == import_errors.LOGGED + 1
    more = len(errors) - import_errors.LOGGED
    assert lines[-1] == f"... and {more} more broken training files (each is an import error of its file)"
