"""Training files, Params and trigger-form values are data: their templates render in the
sandbox (airflow_tfk/dagfactory/sandbox.py), and a template that reaches for code is refused
when the file is read, naming the field, and again when anything renders it.

Each test writes a marker file through the payload it tries; the marker must never exist.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jinja2
import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.dagfactory.loader import load_folder
from airflow_tfk.dagfactory.sandbox import (
    SandboxedDAG,
    SandboxedNativeEnvironment,
    TemplateRefused,
    check_template,
)

ROOT = Path(__file__).resolve().parents[2]


def payloads(marker: Path) -> list[str]:
    """Known ways out of a Jinja template into Python, each writing ``marker``."""
    cmd = f"id > {marker}"
    return [
        f"{{{{ cycler.__init__.__globals__.os.system('{cmd}') }}}}",
        f"{{{{ joiner.__init__.__globals__.os.popen('{cmd}').read() }}}}",
        f"{{{{ lipsum.__globals__['os'].system('{cmd}') }}}}",
        f"{{{{ namespace.__init__.__globals__.os.system('{cmd}') }}}}",
        f"{{{{ ''.__class__.__mro__[1].__subclasses__() }}}}{cmd}",
        f"{{{{ params.__class__.__init__.__globals__['sys'].modules['os'].system('{cmd}') }}}}",
        f"{{{{ params|attr('__class__') }}}}{cmd}",
        f"{{{{ self._TemplateReference__context.cycler.__init__.__globals__.os.system('{cmd}') }}}}",
        f"{{{{ macros.os.system('{cmd}') }}}}",
        f"{{{{ ti.task.dag.__class__ }}}}{cmd}",
        f"{{% for c in [].__class__.__base__.__subclasses__() %}}{{{{ c }}}}{{% endfor %}}{cmd}",
        f"{{% include '/etc/passwd' %}}{cmd}",
        f"{{% import 'os' as os %}}{{{{ os.system('{cmd}') }}}}",
        f"{{{{ '{cmd}'|center(10) }}}}",
        f"{{{{ '{{}}'.format(params) }}}}{cmd}",
        f"{{{{ conn.kubernetes_default.password }}}}{cmd}",
        f"{{{{ var.value.get('secret') }}}}{cmd}",
    ]


def training(args: list[str]) -> str:
    return json.dumps(
        {
            "dag_id": "evil",
            "backend": "local",
            "params": {"steps": 5},
            "cluster": {
                "image": "x",
                "mode": "all_reduce",
                "command": ["python", "-m", "app"],
                "args": args,
                "worker": {"replicas": 1},
            },
        }
    )


@pytest.mark.parametrize("index", range(17))
def test_a_training_file_reaching_for_code_is_refused_naming_the_field(tmp_path: Path, index: int) -> None:
    marker = tmp_path / "MARK"
    payload = payloads(marker)[index]
    folder = tmp_path / "trainings"
    folder.mkdir()
    (folder / "evil.yaml").write_text(training(["--tfk_steps", "{{ params.steps }}", payload]))
    result = load_folder(folder)
    assert not result.dags
    [error] = result.errors
    assert error.field == "cluster.args[2]", error
    assert "template" in error.message
    assert not marker.exists()


@pytest.mark.parametrize(
    ("block", "value", "field"),
    [
        ("backend_config", {"root": "{{ cycler.__init__ }}"}, "backend_config.root"),
        ("publish", {"model_name": "m", "sub_path": "{{ ''.__class__ }}"}, "publish.sub_path"),
        ("publish", {"model_name": "m", "serving": {"name": "{{ var.value.x }}"}}, "publish.serving.name"),
        ("tensorboard", {"base_path": "/x", "tensorboard": {"name": "{% for x in y %}{% endfor %}"}}, None),
    ],
)
def test_every_templated_block_is_checked(tmp_path: Path, block: str, value: Any, field: str | None) -> None:
    data = json.loads(training(["a"]))
    data[block] = value
    (tmp_path / "f.yaml").write_text(json.dumps(data))
    [error] = load_folder(tmp_path).errors
    assert error.field == (field or "tensorboard.tensorboard.name"), error


def test_the_render_time_sandbox_holds_where_the_text_looks_harmless(tmp_path: Path) -> None:
    """A key built at render time passes the parse-time check; the sandbox refuses it."""
    marker = tmp_path / "MARK"
    env = SandboxedNativeEnvironment()
    template = env.from_string("{{ params[('_' ~ '_cla' ~ 'ss__')] }}")
    with pytest.raises(jinja2.sandbox.SecurityError):
        template.render(params={"steps": 1})
    # Sequence repetition and huge powers: refused, not computed.
    for text in ("{{ 'ab' * params.n }}", "{{ params.n ** params.n }}", "{{ '%0*d' % (params.n, 1) }}"):
        with pytest.raises(jinja2.sandbox.SecurityError):
            env.from_string(text).render(params={"n": 10**9})
    # Names outside the allowed context are undefined even when a caller passes them.
    with pytest.raises(TemplateRefused):
        env.from_string("{{ conn }}")
    assert not marker.exists()


def test_a_hand_built_sandboxed_dag_refuses_code_when_airflow_renders_it(tmp_path: Path) -> None:
    from airflow_tfk.operators.training import TFTrainingOperator

    marker = tmp_path / "MARK"
    with SandboxedDAG(dag_id="hand_built", schedule=None, render_template_as_native_obj=True) as dag:
        op = TFTrainingOperator(
            task_id="train",
            cluster_spec={"args": [payloads(marker)[0]]},
            backend="local",
            progress_interval=10,
        )
    assert isinstance(dag.get_template_env(), SandboxedNativeEnvironment)
    with pytest.raises(TemplateRefused):
        op.render_template_fields({"params": {}})
    assert not marker.exists()


def test_param_and_conf_values_are_data(tmp_path: Path) -> None:
    """A form value holding a template is passed on as text: nothing renders it again."""
    marker = tmp_path / "MARK"
    (tmp_path / "t.yaml").write_text(training(["--tag", "{{ params.tag }}", "--n", "{{ params.steps * 2 }}"]))
    data = json.loads((tmp_path / "t.yaml").read_text())
    data["params"]["tag"] = "x"
    (tmp_path / "t.yaml").write_text(json.dumps(data))
    dag = load_folder(tmp_path).dags["evil"]
    train = dag.get_task("train")
    payload = payloads(marker)[0]
    train.render_template_fields({"params": {"tag": payload, "steps": 4}})
    assert train.cluster_spec["args"] == ["--tag", payload, "--n", 8]
    assert not marker.exists()


def test_the_ui_dag_renders_form_values_as_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """dags/tfk_ui_training.py: every templated field of every task, rendered with a conf
    whose every value is a payload, and an upstream XCom (the validated spec) holding them."""
    from airflow.dag_processing.dagbag import DagBag

    marker = tmp_path / "MARK"
    payload = payloads(marker)[0]
    bag = DagBag(dag_folder=str(ROOT / "dags" / "tfk_ui_training.py"))
    dag = bag.dags["tfk_ui_training"]
    assert isinstance(dag, SandboxedDAG)
    conf = {name: payload for name in dag.params}

    class TI:
        def xcom_pull(self, *args: Any, **kwargs: Any) -> Any:
            return {"image": payload, "args": [payload], "worker": {"replicas": payload}}

    for task in dag.tasks:
        task.render_template_fields({"params": conf, "ti": TI(), "task_instance": TI()})
    train = dag.get_task("train")
    assert train.cluster_spec["image"] == payload
    assert not marker.exists()


@pytest.mark.parametrize(
    "text",
    [
        "{{ params.steps }}",
        "{{ params.steps * 2 }}",
        "{{ params.get('steps', 1) }}",
        "{{ ds }}-{{ ts_nodash }}-{{ run_id }}",
        "{{ logical_date.strftime('%Y') }}",
        "{% if params.fast %}--fast{% else %}--slow{% endif %}",
        "{{ params.tags | join(',') }}",
        "{{ params.name | default('x') | lower }}",
        "{# a comment #}plain",
        "{% raw %}{{ kept }}{% endraw %}",
    ],
)
def test_the_template_language_of_training_files(text: str) -> None:
    check_template(text, "cluster.args[0]")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("{{ params.steps ", "is not a valid template"),
        ("{% if x %}", "is not a valid template"),
        ("{{ params.steps }", "is not a valid template"),
        ("{% endif %}", "is not a valid template"),
        ("{{ params | nosuchfilter }}", "the filter 'nosuchfilter'"),
        ("{% set x = 1 %}", "{% set %} is not allowed"),
        ("{% macro m() %}{% endmacro %}", "{% macro %} is not allowed"),
        ("{{ range }}", "unknown name 'range'"),
        ("{{ params.steps.bit_length() }}", "the method 'bit_length'"),
        ("{{ dict(a=1) }}", "only method calls"),
    ],
)
def test_refusals_name_the_field_and_the_reason(text: str, said: str) -> None:
    with pytest.raises(SpecError) as caught:
        check_template(text, "cluster.args[0]")
    assert caught.value.field == "cluster.args[0]"
    assert said in caught.value.rule


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_airflow_tasks_render_of_a_factory_dag_writes_no_marker(tmp_path: Path) -> None:
    """The real CLI: ``airflow dags reserialize`` then ``airflow tasks render`` of the
    payload's DAG (refused: not a DAG, the import error names the field) and of a valid
    training rendered with a payload as its Param's default (rendered as text)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers import migrated_airflow_home

    marker = tmp_path / "MARK"
    repo = tmp_path / "repo"
    (repo / "dags").mkdir(parents=True)
    (repo / "trainings").mkdir()
    (repo / "dags" / "tfk_trainings.py").write_text((ROOT / "dags" / "tfk_trainings.py").read_text())
    (repo / "trainings" / "evil.yaml").write_text(training([payloads(marker)[0]]))
    data = json.loads(training(["{{ params.tag }}"]))
    data["dag_id"], data["params"] = "data_only", {"tag": payloads(marker)[1]}
    (repo / "trainings" / "data_only.yaml").write_text(json.dumps(data))
    env = migrated_airflow_home(tmp_path / "home", AIRFLOW__CORE__DAGS_FOLDER=str(repo / "dags"))
    airflow = str(Path(sys.executable).parent / "airflow")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([airflow, *args], env=env, capture_output=True, text=True, timeout=300)

    assert run("dags", "reserialize").returncode == 0
    refused = run("tasks", "render", "evil", "train", "2026-01-01")
    assert refused.returncode != 0
    assert "'evil' could not be found" in refused.stdout + refused.stderr
    errors = run("dags", "list-import-errors", "-o", "json")
    assert "cluster.args[0]: template refused" in errors.stdout, errors.stdout + errors.stderr
    rendered = run("tasks", "render", "data_only", "train", "2026-01-01")
    assert rendered.returncode == 0, rendered.stderr[-2000:]
    assert "os.popen" in rendered.stdout  # the payload, shown as the text it is
    assert not marker.exists()


@pytest.mark.parametrize(
    ("value", "said"),
    [(None, "null"), (True, "bool"), (False, "bool"), ([1, 2], "list"), ({"a": 1}, "dict"), ((1,), "tuple")],
)
def test_a_param_without_a_text_spelling_is_refused_inside_a_text(
    tmp_path: Path, value: Any, said: str
) -> None:
    """``--lr={{ params.lr }}`` with a null, boolean, list or mapping would put Python's
    ``None``/``True``/``[1, 2]`` on the command line: the render fails instead, as Airflow
    renders the field; alone, the value stays native and the spec refuses it by its type."""
    from airflow_tfk.dagfactory.sandbox import TemplateValueError

    (tmp_path / "t.yaml").write_text(training(["--lr={{ params.lr }}", "{{ params.lr }}"]))
    data = json.loads((tmp_path / "t.yaml").read_text())
    data["params"]["lr"] = 0.1
    (tmp_path / "t.yaml").write_text(json.dumps(data))
    train = load_folder(tmp_path).dags["evil"].get_task("train")
    train.render_template_fields({"params": {"lr": 0.1, "steps": 1}})
    assert train.cluster_spec["args"][:2] == ["--lr=0.1", 0.1]
    train = load_folder(tmp_path).dags["evil"].get_task("train")
    with pytest.raises(TemplateValueError, match=said) as err:
        train.render_template_fields({"params": {"lr": value, "steps": 1}})
    assert str(err.value).startswith(
        "cluster_spec.args[0]: in task 'train', the template '--lr={{ params.lr }}'"
    )


def test_a_value_spelt_in_the_template_is_kept() -> None:
    from airflow.sdk.definitions.context import render_template

    env = SandboxedNativeEnvironment()
    for text, value, out in (
        ("--f={{ params.x | tojson }}", [1, 2], "--f=[1, 2]"),
        ("--f={{ params.x | string }}", True, "--f=True"),
        ("--f={{ params.x | tojson }}", None, "--f=null"),
        ("{{ params.x }}", [1], [1]),
        ("--f={{ params.x }}", "a", "--f=a"),
    ):
        assert render_template(env.from_string(text), {"params": {"x": value}}, native=True) == out


@pytest.mark.parametrize("value", [None, True, [1], {"a": 1}])
@pytest.mark.parametrize(
    "text", ["{{ '--lr=' ~ params.x }}", "{{ [params.x] | join(',') }}", "{{ params.x | trim }}"]
)
def test_a_value_an_expression_writes_into_a_text_is_refused(text: str, value: Any) -> None:
    from airflow.sdk.definitions.context import render_template

    from airflow_tfk.dagfactory.sandbox import TemplateValueError

    env = SandboxedNativeEnvironment()
    with pytest.raises(TemplateValueError):
        render_template(env.from_string(text), {"params": {"x": value}}, native=True)
    assert render_template(env.from_string(text), {"params": {"x": "A"}}, native=True) in ("--lr=A", "A")


def test_a_boolean_spelt_by_lower_is_kept_in_a_training_file() -> None:
    from airflow.sdk.definitions.context import render_template

    env = SandboxedNativeEnvironment()
    text = "--debug={{ params.x | lower }}"
    assert render_template(env.from_string(text), {"params": {"x": False}}, native=True) == "--debug=false"
