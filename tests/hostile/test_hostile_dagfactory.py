"""Hostile inputs for DAG-as-code, `airflow-tfk validate` and the UI form (issue 22, items
1, 5, 12 and 16): templates that reach for code or memory, files that are not files, names
that forge lines, patterns that backtrack, typos below the top level.

Each case goes through the interfaces that apply: a training folder as the DAG file loads
it (``folder``), ``airflow-tfk validate`` (``cli``), the Python API (``api``:
``parse_training`` + ``build_dag``), and the UI form's conf (``ui``: Airflow's Param check,
then the DAG's own validate task, then every templated field rendered). Each is refused
within 1 CPU-s and 100 MB naming the field, or accepted; never a crash (any other
exception), a hang (10 s), or code executed (the payloads write a marker file, which must
never exist). ``test_summary`` prints the table of the report.
"""

from __future__ import annotations

import io
import json
import os
import threading
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARKER = Path(os.environ.get("TMPDIR", "/tmp")) / f"tfk-hostile-dagfactory-{os.getpid()}"
CPU_LIMIT = 1.0
MEMORY_LIMIT = 100 * 2**20
HANG = 10.0
CLUSTER = {"image": "i", "mode": "all_reduce", "command": ["python", "app.py"], "worker": {"replicas": 1}}
CMD = f"id > {MARKER}"

PAYLOADS = {
    "cycler-globals": f"{{{{ cycler.__init__.__globals__.os.system('{CMD}') }}}}",
    "joiner-popen": f"{{{{ joiner.__init__.__globals__.os.popen('{CMD}').read() }}}}",
    "lipsum-globals": f"{{{{ lipsum.__globals__['os'].system('{CMD}') }}}}",
    "mro-subclasses": f"{{{{ ''.__class__.__mro__[1].__subclasses__() }}}}{CMD}",
    "params-class": f"{{{{ params.__class__.__init__.__globals__['sys'].modules['os'].system('{CMD}') }}}}",
    "attr-filter": f"{{{{ params|attr('__class__') }}}}{CMD}",
    "dynamic-key": f"{{{{ params[('_' ~ '_class__')] }}}}{CMD}",
    "self-context": f"{{{{ self._TemplateReference__context }}}}{CMD}",
    "macros-module": f"{{{{ macros.os.system('{CMD}') }}}}",
    "ti-task-dag": f"{{{{ ti.task.dag }}}}{CMD}",
    "for-subclasses": (
        f"{{% for c in [].__class__.__base__.__subclasses__() %}}{{{{ c }}}}{{% endfor %}}{CMD}"
    ),
    "include-file": f"{{% include '/etc/passwd' %}}{CMD}",
    "import-os": f"{{% import 'os' as os %}}{{{{ os.system('{CMD}') }}}}",
    "format-method": f"{{{{ '{{}}'.format(params) }}}}{CMD}",
    "conn-password": f"{{{{ conn.kubernetes_default.password }}}}{CMD}",
    "var-secret": f"{{{{ var.value.get('secret') }}}}{CMD}",
    "string-bomb": "{{ 'a' * 10**10 }}",
    "power-bomb": "{{ 9**9**9**9 }}",
    "center-bomb": "{{ 'a'|center(10**10) }}",
    "ljust-bomb": "{{ 'a'.ljust(10**10) }}",
    "namespace-loop": (
        "{% set ns = namespace(x='a') %}{% for i in range(60) %}{% set ns.x = ns.x ~ ns.x %}{% endfor %}"
    ),
    "macro-recursion": "{% macro f(x) %}{{ f(x ~ x) }}{% endmacro %}{{ f('a') }}",
    "range-bomb": "{{ range(10**9)|list }}",
    "percent-width": "{{ '%0*d' % (10**9, 1) }}",
}


def _squared(text: str) -> str:
    """``text`` joined by itself between each of its characters: each level squares the length."""
    return f"(({text})|list|join({text}))"


# Allowed filters whose output outgrows their input: a chain multiplies, a join of a
# text's characters by the text squares, so a short, valid template asks for terabytes.
AMPLIFIERS = {
    "join-squared-3": "{{ " + _squared(_squared(_squared("'aaaaaaaaaa'"))) + " }}",
    "join-squared-4": "{{ " + _squared(_squared(_squared(_squared("'aaaaaaaaaa'")))) + " }}",
    "list-string-chain-11": "{{ 'aaaa'" + "|list|string" * 11 + "|length }}",
    "list-string-chain-30": "{{ 'aaaa'" + "|list|string" * 30 + "|length }}",
    "tojson-chain-25": '{{ \'""""\'' + "|tojson" * 25 + "|length }}",
    "tojson-chain-60": "{{ '\"'" + "|tojson" * 60 + " }}",
}
PAYLOADS.update(AMPLIFIERS)
RENDER_ONLY = ("dynamic-key", *AMPLIFIERS)


@dataclass(frozen=True)
class Case:
    id: str
    interfaces: tuple[str, ...]
    field: str | None  # the field the error names (prefix); None: accepted
    data: dict[str, Any] | None = None  # a training file's content
    setup: Callable[[Path], None] | None = None  # or: make the folder's entries
    conf: dict[str, Any] | None = None  # or: the UI form's conf


FILE = ("folder", "cli", "api")
ENTRY = ("folder", "cli")


def training(**data: Any) -> dict[str, Any]:
    return {"cluster": json.loads(json.dumps(CLUSTER)), **data}


def with_arg(value: str) -> dict[str, Any]:
    data = training()
    data["cluster"]["args"] = ["--x", value]
    return data


def _fifo(folder: Path) -> None:
    os.mkfifo(folder / "t.yaml")


def _link(target: str) -> Callable[[Path], None]:
    return lambda folder: (folder / "t.yaml").symlink_to(target)


def _named(name: str) -> Callable[[Path], None]:
    return lambda folder: (folder / name).write_text(json.dumps(training()))


def _text(text: str | bytes) -> Callable[[Path], None]:
    def make(folder: Path) -> None:
        (folder / "t.yaml").write_bytes(text if isinstance(text, bytes) else text.encode())

    return make


def _param(**schema: Any) -> dict[str, Any]:
    return training(params={"x": {"default": "a", "type": "string", **schema}})


def cases() -> list[Case]:
    out = [
        Case(f"template-{name}", FILE, "cluster.args[1]", with_arg(p))
        for name, p in PAYLOADS.items()
        if name not in RENDER_ONLY
    ]
    # Harmless-looking text, refused by the sandbox when the task renders.
    out += [
        Case(f"template-{name}", ("render",), "cluster", with_arg(PAYLOADS[name])) for name in RENDER_ONLY
    ]
    blob = _param(default="a" * 200_000)
    blob["cluster"]["args"] = ["--x", "{{ (params.x|list)|join(params.x) }}"]
    joined = _param(default="a,b")
    joined["cluster"]["args"] = ["--x", "{{ params.x.split(',')|join(' ')|upper }}", "{{ params|tojson }}"]
    out += [
        Case("template-param-joined-by-itself", ("render",), "cluster", blob),
        Case("valid-join-split-upper", ("render", *FILE), None, joined),
    ]
    out += [
        Case(
            "template-in-backend-config",
            FILE,
            "backend_config.root",
            training(backend="local", backend_config={"root": PAYLOADS["cycler-globals"]}),
        ),
        Case(
            "template-in-publish",
            FILE,
            "publish.sub_path",
            training(publish={"model_name": "m", "base_path": "/m", "sub_path": PAYLOADS["params-class"]}),
        ),
        Case(
            "template-in-serving",
            FILE,
            "publish.serving.name",
            training(
                publish={"model_name": "m", "base_path": "/m", "serving": {"name": PAYLOADS["var-secret"]}}
            ),
        ),
        Case(
            "template-in-tensorboard",
            FILE,
            "tensorboard.tensorboard.name",
            training(tensorboard={"base_path": "/l", "tensorboard": {"name": PAYLOADS["include-file"]}}),
        ),
        Case(
            "template-in-image",
            FILE,
            "cluster.image",
            training(cluster={**CLUSTER, "image": PAYLOADS["joiner-popen"]}),
        ),
        Case(
            "template-in-env",
            FILE,
            "cluster.env.A",
            training(cluster={**CLUSTER, "env": {"A": PAYLOADS["lipsum-globals"]}}),
        ),
        Case("jinja-unclosed-print", FILE, "cluster.args[1]", with_arg("{{ params.x ")),
        Case("jinja-unclosed-block", FILE, "cluster.args[1]", with_arg("{% if params.x %}")),
        Case("jinja-stray-endif", FILE, "cluster.args[1]", with_arg("{% endif %}")),
        Case("jinja-unclosed-comment", FILE, "cluster.args[1]", with_arg("{# note")),
        Case("jinja-unknown-filter", FILE, "cluster.args[1]", with_arg("{{ 1|nosuch }}")),
        # files that are not plain files
        Case("fifo", ENTRY, "spec", setup=_fifo),
        Case("link-dev-zero", ENTRY, "spec", setup=_link("/dev/zero")),
        Case("link-proc-environ", ENTRY, "spec", setup=_link("/proc/self/environ")),
        Case("link-etc-shadow", ENTRY, "spec", setup=_link("/etc/shadow")),
        Case("link-dangling", ENTRY, "spec", setup=_link("/nonexistent/x.yaml")),
        Case("oversize", ENTRY, "spec", setup=_text("a: " + "x" * (1 << 20) + "\n")),
        Case("deep-nesting", ENTRY, "spec", setup=_text("a: " + "[" * 100_000)),
        Case("not-utf8", ENTRY, "spec", setup=_text(b"cluster: \xff\xfe\n")),
        Case("many-keys", ENTRY, "spec", setup=_text("".join(f"k{i}: {i}\n" for i in range(60_000)))),
        # patterns that backtrack
        *[
            Case(f"pattern-{i}", FILE, "params.x.pattern", _param(pattern=p))
            for i, p in enumerate(
                [
                    r"^(a+)+$",
                    r"^(a|aa)+$",
                    r"^(\w+\s?)*$",
                    r"^(.*a){20}$",
                    r"^(a?){30}a{30}$",
                    r"^.*a.*b$",
                    r"^\d*\d*\d*$",
                    r"^(a)\1$",
                    r"(a+)+$",
                    r"^([a-z]+\.?)*$",
                    "[",
                    "x" * 2000,
                ]
            )
        ],
        Case(
            "pattern-in-items",
            FILE,
            "params.x.items.pattern",
            training(params={"x": {"default": ["a"], "type": "array", "items": {"pattern": "^(a+)+$"}}}),
        ),
        # names with control characters
        Case("dag-id-newline", FILE, "dag_id", training(dag_id="evil\n")),
        Case("dag-id-escape", FILE, "dag_id", training(dag_id="\x1b[2Jevil")),
        Case("dag-id-bidi", FILE, "dag_id", training(dag_id="evil\u202eyaml")),
        Case("tag-nul", FILE, "tags[0]", training(tags=["a\x00"])),
        Case("param-name-newline", FILE, "params.steps\n", training(params={"steps\n": 1})),
        Case("conn-id-newline", FILE, "kubernetes_conn_id", training(kubernetes_conn_id="k\nok: x")),
        Case("file-name-newline", ENTRY, "path", setup=_named("evil\nok: forged.yaml")),
        Case("file-name-ansi", ENTRY, "path", setup=_named("\x1b[32mok.yaml")),
        Case("file-name-bidi", ENTRY, "path", setup=_named("x\u202elmay.yaml")),
        # typos below the top level
        Case(
            "backend-config-typo",
            FILE,
            "backend_config.roott",
            training(backend="local", backend_config={"roott": "/x"}),
        ),
        Case(
            "backend-config-k8s-typo",
            FILE,
            "backend_config.conn",
            training(backend="kubernetes", backend_config={"conn": "x"}),
        ),
        Case(
            "publish-version-typo",
            FILE,
            "publish.version",
            training(publish={"model_name": "m", "base_path": "/m", "version": "lastest"}),
        ),
        Case(
            "publish-version-float",
            FILE,
            "publish.version",
            training(publish={"model_name": "m", "base_path": "/m", "version": 2.5}),
        ),
        Case(
            "serving-key-typo-templated",
            FILE,
            "publish.serving.replcas",
            training(
                params={"r": 1},
                publish={
                    "model_name": "m",
                    "base_path": "/m",
                    "serving": {"replicas": "{{ params.r }}", "replcas": 1},
                },
            ),
        ),
        Case(
            "tensorboard-key-typo",
            FILE,
            "tensorboard.tensorboard.prot",
            training(tensorboard={"base_path": "/l", "tensorboard": {"prot": 1}}),
        ),
        Case(
            "param-keyword-typo",
            FILE,
            "params.x.minimun",
            training(params={"x": {"default": 1, "minimun": 0}}),
        ),
        Case(
            "cluster-key-typo",
            FILE,
            "cluster.wroker",
            training(cluster={**CLUSTER, "wroker": {"replicas": 1}}),
        ),
        # valid files: accepted
        Case("valid-plain", FILE, None, training()),
        Case(
            "valid-templates",
            FILE,
            None,
            training(
                params={"n": 2, "fast": False, "tag": "t"},
                cluster={
                    **CLUSTER,
                    "args": [
                        "{{ params.n * 2 }}",
                        "{% if params.fast %}--fast{% endif %}",
                        "{{ params.tag|upper }}-{{ ds_nodash }}",
                        "{{ logical_date.strftime('%Y') }}",
                    ],
                    "worker": {"replicas": "{{ params.n }}"},
                },
            ),
        ),
        Case("valid-safe-pattern", FILE, None, _param(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")),
        Case(
            "valid-publish-templated-version",
            FILE,
            None,
            training(
                params={"v": "3"}, publish={"model_name": "m", "base_path": "/m", "version": "{{ params.v }}"}
            ),
        ),
        Case(
            "valid-backend-config",
            FILE,
            None,
            training(backend="local", backend_config={"root": "/tmp/x", "fixed_ports": False}),
        ),
        Case(
            "valid-link-inside",
            ENTRY,
            None,
            setup=lambda f: (
                (f / "real.yaml").write_text(json.dumps(training())),
                (f / "t.yaml").symlink_to(f / "real.yaml"),
            ),
        ),
        Case("valid-description-lines", FILE, None, training(description="two\nlines\tok")),
        Case("valid-raw-braces", FILE, None, with_arg("{% raw %}{{ not rendered }}{% endraw %}")),
        # the UI form's conf
        *[
            Case(f"ui-image-{name}", ("ui",), "image", conf={"image": p})
            for name, p in list(PAYLOADS.items())[:6]
        ],
        Case("ui-mode-payload", ("ui",), "mode", conf={"mode": PAYLOADS["cycler-globals"]}),
        Case("ui-steps-payload", ("ui",), "steps", conf={"steps": PAYLOADS["cycler-globals"]}),
        Case("ui-workers-huge", ("ui",), "workers", conf={"workers": 10**9}),
        Case("ui-extra-key-payload", ("ui",), None, conf={"evil": PAYLOADS["cycler-globals"]}),
        Case("ui-valid", ("ui",), None, conf={"workers": 3, "steps": 100}),
    ]
    return out


CASES = cases()
RESULTS: list[tuple[str, str, str]] = []  # (case, interface, outcome)


class Refused(Exception):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def _prepare(case: Case, folder: Path) -> None:
    if case.setup is not None:
        case.setup(folder)
    else:
        (folder / "t.yaml").write_text(json.dumps(case.data))


def _folder(case: Case, folder: Path) -> None:
    from airflow_tfk.dagfactory.loader import load_folder

    _prepare(case, folder)
    result = load_folder(folder)
    if result.errors:
        raise Refused(result.errors[0].field, result.errors[0].message)


def _cli(case: Case, folder: Path) -> None:
    from airflow_tfk.core.printable import printable
    from airflow_tfk.dagfactory import validate

    _prepare(case, folder)
    out, err = io.StringIO(), io.StringIO()
    code = validate.run([str(folder)], out, err)
    lines = (out.getvalue() + err.getvalue()).splitlines()
    assert all(line.startswith(("ok: ", "error: ", "warning: ")) or "valid, " in line for line in lines), (
        lines
    )
    assert not any("\x1b" in line for line in lines)
    assert len([line for line in lines if line.startswith("ok: ")]) == (code == 0) * len(
        list(folder.iterdir())
    )
    if code != 0:
        first = next(line for line in lines if line.startswith("error: "))
        want = printable(case.field or "spec")
        raise Refused(case.field if f": {want}" in first else first, first)


def _api(case: Case, folder: Path) -> None:
    from airflow_tfk.core.errors import SpecError
    from airflow_tfk.dagfactory.builder import build_dag
    from airflow_tfk.dagfactory.training import parse_training

    assert case.data is not None
    try:
        build_dag(parse_training(json.loads(json.dumps(case.data)), default_dag_id="t", source="t.yaml"))
    except SpecError as exc:
        raise Refused(exc.field, exc.rule) from None


def _render(case: Case, folder: Path) -> None:
    """The worker's step: load the folder, render every task with the Params' defaults."""
    import jinja2.sandbox

    from airflow_tfk.dagfactory.loader import load_folder

    _prepare(case, folder)
    result = load_folder(folder)
    if result.errors:
        raise Refused(result.errors[0].field, result.errors[0].message)
    for dag in result.dags.values():
        defaults = {name: param.value for name, param in dag.params.items()}
        for task in dag.tasks:
            try:
                task.render_template_fields({"params": defaults, "ds": "2026-01-01"})
            except jinja2.sandbox.SecurityError as exc:
                raise Refused("cluster" if task.task_id == "train" else task.task_id, str(exc)) from None


def _ui_dag() -> Any:
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(ROOT / "dags" / "tfk_ui_training.py")).dags["tfk_ui_training"]


def _ui(case: Case, folder: Path) -> None:
    from airflow.sdk.definitions.param import ParamsDict

    from airflow_tfk.core.errors import SpecError

    dag = UI_DAG[0]
    params = ParamsDict(dag.params)
    try:
        resolved = params.deep_merge(case.conf) if hasattr(params, "deep_merge") else params
        for key, value in (case.conf or {}).items():
            if key in resolved:
                resolved[key] = value  # each value checked by its Param's schema
        values = resolved.validate()
    except Exception as exc:  # Airflow's ParamValidationError names the Param
        named = [k for k in (case.conf or {}) if k in str(exc)]
        raise Refused(named[0] if named else "params", str(exc)[:200]) from None
    values.update({k: v for k, v in (case.conf or {}).items() if k not in values})
    validate_task = dag.get_task("validate")
    try:
        spec = validate_task.python_callable(params=values)
    except SpecError as exc:
        raise Refused(exc.field, exc.rule) from None

    class TI:
        def xcom_pull(self, *args: Any, **kwargs: Any) -> Any:
            return spec

    for task in dag.tasks:
        task.render_template_fields({"params": values, "ti": TI(), "task_instance": TI()})


UI_DAG: list[Any] = []
RUNNERS = {"folder": _folder, "cli": _cli, "api": _api, "ui": _ui, "render": _render}


@pytest.fixture(scope="module", autouse=True)
def _warm(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Imports and the UI DAG once, so the bounds measure each case, not Airflow's imports."""
    from airflow_tfk.dagfactory.loader import load_folder

    folder = tmp_path_factory.mktemp("warm")
    (folder / "w.yaml").write_text(
        json.dumps(training(publish={"model_name": "m", "base_path": "/m"}, tensorboard={"base_path": "/l"}))
    )
    assert load_folder(folder).dags
    UI_DAG.append(_ui_dag())


def _run_bounded(fn: Callable[[], None]) -> tuple[BaseException | None, float, int, bool]:
    """(exception, CPU seconds, peak traced bytes, finished) of ``fn`` on a thread."""
    box: dict[str, Any] = {}

    def target() -> None:
        tracemalloc.start()
        start = time.thread_time()
        try:
            fn()
            box["exc"] = None
        except BaseException as exc:  # classified by the caller
            box["exc"] = exc
        box["cpu"] = time.thread_time() - start
        box["peak"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(HANG)
    if thread.is_alive():
        return None, HANG, 0, False
    return box["exc"], box["cpu"], box["peak"], True


def _field_ok(got: str, want: str) -> bool:
    return got == want or got.startswith((f"{want}.", f"{want}["))


@pytest.mark.parametrize(
    ("case", "interface"),
    [(c, i) for c in CASES for i in c.interfaces],
    ids=[f"{c.id}-{i}" for c in CASES for i in c.interfaces],
)
def test_case(case: Case, interface: str, tmp_path: Path) -> None:
    run_case(case, interface, tmp_path, RESULTS)


def summarize(results: list[tuple[str, str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    """Print the table of outcomes (skipped when no case ran) and fail on any crash, hang
    or code executed."""
    if not results:
        pytest.skip("run with the cases")
    counts = Counter(outcome for _, _, outcome in results)
    with capsys.disabled():
        print(f"\ncases tried: {len(results)}  " + "  ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    assert counts["crashed"] == counts["hung"] == counts["code executed"] == 0


def run_case(case: Case, interface: str, tmp_path: Path, results: list[tuple[str, str, str]]) -> None:
    """Run one case through one interface within the bounds, record its outcome in
    ``results`` and fail unless it was refused naming its field or accepted as valid."""
    MARKER.unlink(missing_ok=True)
    folder = tmp_path / "trainings"
    folder.mkdir()
    exc, cpu, peak, finished = _run_bounded(lambda: RUNNERS[interface](case, folder))
    if not finished:
        outcome = "hung"
    elif MARKER.exists():
        outcome = "code executed"
    elif exc is None:
        outcome = "accepted valid" if case.field is None else "accepted hostile"
    elif isinstance(exc, Refused) and case.field is not None and _field_ok(exc.field, case.field):
        outcome = "refused clearly"
    elif isinstance(exc, Refused):
        outcome = "refused, wrong field"
    else:
        outcome = "crashed"
    results.append((case.id, interface, outcome))
    MARKER.unlink(missing_ok=True)
    assert finished, "hung"
    assert outcome in ("refused clearly", "accepted valid"), f"{outcome}: {exc!r}"[:600]
    if cpu >= CPU_LIMIT:
        # The run above traced every allocation (for the memory bound), which costs about
        # three times the work itself: the bound is the work's, so it is measured again
        # untraced, in a fresh folder (the outcome was judged above).
        again = tmp_path / "again" / "trainings"
        again.mkdir(parents=True)
        start = time.thread_time()
        try:
            RUNNERS[interface](case, again)
        except Exception:
            pass
        cpu = time.thread_time() - start
        MARKER.unlink(missing_ok=True)
    assert cpu < CPU_LIMIT, f"{cpu:.2f} CPU-s"
    assert peak < MEMORY_LIMIT, f"{peak / 2**20:.0f} MB"


def test_summary(capsys: pytest.CaptureFixture[str]) -> None:
    """The report's table (shown with ``pytest tests/hostile/test_hostile_dagfactory.py -s``)."""
    summarize(RESULTS, capsys)
    assert len(CASES) >= 40
