"""Hostile template directories (issue 35, "templates read only their directory"): a
``template_dir`` comes from a repository whose authors may not read the worker's files nor
spend its CPU. Generated variants of each class:

- reading out: a symbolic link to a file or a directory outside, ``..`` and absolute names,
  each through ``include``, ``import``, ``from ... import`` and ``extends``, and the override
  file itself a link out; a FIFO, a directory, a huge or non-UTF-8 file named like a template;
- spending: nested loops, loops over text, macros that recurse or double their output,
  includes of themselves, repetition, widths, joins and replacements that allocate, ``~``
  and ``+`` doubling in a namespace, a shared list dumped as JSON.

Each is refused within 1 CPU-s and 100 MB with an error naming the template and the rule
(the API's ``RenderError``, the CLI's ``error: template:``), and the secret never appears;
a ``template_dir`` that is itself a link, and links inside the directory, are accepted.
"""

from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest

from airflow_tfk.cli import main as cli
from airflow_tfk.render.manifests import render
from airflow_tfk.render.template_loader import MAX_TEMPLATE_BYTES
from airflow_tfk.render.templating import RenderError, template_dirs
from airflow_tfk.spec.cluster import TFClusterSpec

from .test_hostile_dagfactory import CPU_LIMIT, MEMORY_LIMIT, _run_bounded

SPEC = {
    "name": "t",
    "image": "i",
    "mode": "all_reduce",
    "command": ["python", "a.py"],
    "worker": {"replicas": 1},
}
SECRET = "tfk-secret-3f9a"
Setup = Callable[[Path, Path], None]  # (template_dir, a directory outside it holding secret.txt)


@dataclass(frozen=True)
class Case:
    id: str
    setup: Setup
    rule: str | None  # a part of the refusal's message; None: accepted
    names: str = "job.yaml.j2"  # the template the refusal names


def _job(text: str) -> Setup:
    return lambda tdir, out: (tdir / "job.yaml.j2").write_text(text)


def _and(*steps: Setup) -> Setup:
    def run(tdir: Path, out: Path) -> None:
        for step in steps:
            step(tdir, out)

    return run


def _link(name: str, target: Callable[[Path, Path], str]) -> Setup:
    def run(tdir: Path, out: Path) -> None:
        (tdir / name).parent.mkdir(parents=True, exist_ok=True)
        (tdir / name).symlink_to(target(tdir, out))

    return run


USES = {
    "include": "{% include NAME %}",
    "import": "{% import NAME as m %}",
    "from": "{% from NAME import x %}",
    "extends": "{% extends NAME %}",
}


def _uses(name: str) -> dict[str, Setup]:
    return {use: _job(text.replace("NAME", json.dumps(name))) for use, text in USES.items()}


def _reading_out() -> list[Case]:
    secret_file = lambda tdir, out: str(out / "secret.txt")  # noqa: E731
    ways: dict[str, tuple[str, Setup | None, str]] = {
        "link-to-file": ("leak.j2", _link("leak.j2", secret_file), "outside its directory"),
        "link-to-passwd": ("leak.j2", _link("leak.j2", lambda t, o: "/etc/passwd"), "outside its directory"),
        "relative-link-out": ("leak.j2", _link("leak.j2", lambda t, o: "../outside/secret.txt"), "outside"),
        "link-to-dir": ("d/secret.txt", _link("d", lambda t, o: str(o)), "outside its directory"),
        "link-in-subdir": ("sub/leak.j2", _link("sub/leak.j2", secret_file), "outside its directory"),
        "dotdot": ("../outside/secret.txt", None, "'..' part"),
        "dot": ("./job.yaml.j2", None, "'..' part"),
        "absolute-passwd": ("/etc/passwd", None, "absolute name"),
        "absolute-secret": ("ABS", None, "absolute name"),
        "backslash": ("..\\outside\\secret.txt", None, "backslash"),
        "dangling-link": ("gone.j2", _link("gone.j2", lambda t, o: str(o / "nope")), "outside"),
        "link-to-dev-zero": ("zero.j2", _link("zero.j2", lambda t, o: "/dev/zero"), "outside"),
        "fifo": ("fifo.j2", lambda t, o: os.mkfifo(t / "fifo.j2"), "a FIFO"),
        "directory": ("dir.j2", lambda t, o: (t / "dir.j2").mkdir(), "a directory"),
        "huge": ("big.j2", lambda t, o: (t / "big.j2").write_text("x" * (MAX_TEMPLATE_BYTES + 1)), "bytes"),
        "not-utf8": ("bin.j2", lambda t, o: (t / "bin.j2").write_bytes(b"\xff\xfe{{"), "UTF-8"),
    }
    out = []
    for way, (name, setup, rule) in ways.items():
        for use, job in _uses(name).items():
            if name == "ABS":
                job = _abs_job(USES[use])
            steps = [s for s in (setup, job) if s is not None]
            out.append(Case(f"{way}-{use}", _and(*steps), rule))
    out += [
        Case("override-is-link-out", _link("job.yaml.j2", secret_file), "outside its directory"),
        Case("override-is-fifo", lambda t, o: os.mkfifo(t / "job.yaml.j2"), "a FIFO"),
        Case(
            "override-is-huge",
            lambda t, o: (t / "job.yaml.j2").write_text("#" * (MAX_TEMPLATE_BYTES + 1)),
            "bytes",
        ),
        Case(
            "override-macros-link-out",
            _link("_macros.yaml.j2", secret_file),
            "outside its directory",
            names="'_macros.yaml.j2'",
        ),
        Case(
            "include-ignore-missing-link-out",
            _and(_link("l.j2", secret_file), _job("{% include 'l.j2' ignore missing %}")),
            "outside",
        ),
    ]
    return out


def _abs_job(text: str) -> Setup:
    return lambda tdir, out: (tdir / "job.yaml.j2").write_text(
        text.replace("NAME", json.dumps(str(out / "secret.txt")))
    )


LOOP = "{% for i in range(10000) %}{% for j in range(10000) %}BODY{% endfor %}{% endfor %}"
DOUBLE = (
    "{% macro f(n) %}{% if n %}{{ f(n - 1) | fragment }}{{ f(n - 1) | fragment }}"
    "{% else %}BODY{% endif %}{% endmacro %}{{ f(40) | fragment }}"
)


def _ns(start: str, each: str, end: str = "", times: int = 60) -> str:
    """A namespace value replaced ``times`` times by ``each`` of itself (``X``)."""
    head = f"{{% set ns = namespace(x={start}) %}}{{% for i in range({times}) %}}"
    return head + f"{{% set ns.x = {each.replace('X', 'ns.x')} %}}{{% endfor %}}" + end


def _spending() -> list[Case]:
    texts = {
        "nested-loops-empty": LOOP.replace("BODY", ""),
        "nested-loops-print": LOOP.replace("BODY", "x"),
        "nested-loops-set": LOOP.replace("BODY", "{% set y = i %}"),
        "triple-loops": "{% for a in range(1000) %}" + LOOP.replace("BODY", "") + "{% endfor %}",
        "loop-over-text": "{% for i in range(100000) %}{% for ch in 'abcdefghij' %}{% endfor %}{% endfor %}",
        "loop-in-set-block": "{% set s %}" + LOOP.replace("BODY", "xxxxxxxxxxxxxxxx") + "{% endset %}",
        "loop-in-macro": "{% macro m() %}"
        + LOOP.replace("BODY", "xy")
        + "{% endmacro %}{{ m() | fragment }}",
        "macro-doubling": DOUBLE.replace("BODY", "ab"),
        "macro-doubling-empty": DOUBLE.replace("BODY", ""),
        "macro-recursion": "{% macro f(n) %}{{ f(n) | fragment }}{% endmacro %}{{ f(1) | fragment }}",
        "call-block-recursion": (
            "{% macro f() %}{% call f() %}x{% endcall %}{% endmacro %}{{ f() | fragment }}"
        ),
        "include-self": "{% include 'job.yaml.j2' %}",
        "string-times": "{{ ('a' * 10**9) | tojson }}",
        "string-times-var": "{% set n = 10**9 %}{{ ('ab' * n) | tojson }}",
        "list-times": "{{ ([1] * 10**9) | tojson }}",
        "power": "{{ (9 ** 9 ** 9) | tojson }}",
        "big-int-product": _ns("10", "X * X", times=40),
        "ljust": "{{ 'a'.ljust(10**9) | tojson }}",
        "center-method": "{{ 'a'.center(10**9) | tojson }}",
        "zfill": "{{ '1'.zfill(10**9) | tojson }}",
        "center-filter": "{{ 'a' | center(10**9) | tojson }}",
        "indent-filter": "{{ 'a\nb' | indent(10**9) | tojson }}",
        "percent-width": "{{ ('%0999999999d' | format(1)) | tojson }}",
        "percent-precision": "{{ ('%.999999999f' | format(1.0)) | tojson }}",
        "str-format-width": "{{ '{:>999999999}'.format(1) | tojson }}",
        "str-format-nested": "{{ '{:>{}}'.format(1, 999999999) | tojson }}",
        "percent-operator": "{{ ('%0999999999d' % 1) | tojson }}",
        "replace-empty": "{% set s = range(100000) | join('') %}{{ s.replace('', s) | tojson }}",
        "replace-filter": "{% set s = range(100000) | join('') %}{{ (s | replace('', s)) | tojson }}",
        "join-squared": "{% set s = range(100000) | join('') %}{{ (s | list | join(s)) | tojson }}",
        "str-join-squared": "{% set s = range(100000) | join('') %}{{ s.join(s) | tojson }}",
        "tilde-doubling": _ns("'ab'", "X ~ X"),
        "plus-doubling": _ns("'ab'", "X + X"),
        "list-plus-doubling": _ns("[1]", "X + X"),
        "shared-list-tojson": _ns("[1]", "[X, X]", "{{ ns.x | tojson }}"),
        "shared-list-string": _ns("[1]", "[X, X]", "{{ ns.x | string | tojson }}"),
        "dense-template": "{{ c | tojson }}\n" * ((MAX_TEMPLATE_BYTES - 100) // 17),
        "dense-ifs": "{% if c %}a{% endif %}" * ((MAX_TEMPLATE_BYTES - 100) // 22),
        "deep-parentheses": "{{ " + "(" * 10_000 + "1" + ")" * 10_000 + " }}",
        "deep-ifs": "{% if c %}" * 2_000 + "{% endif %}" * 2_000,
        "deep-ifs-under-tags": "{% if c %}" * 400 + "{% endif %}" * 400,
        "long-expression": "{{ (" + " + ".join(["c"] * 3_000) + ") | tojson }}",
        "range-bomb": "{{ range(10**9) | list | tojson }}",
        "list-string-chain": "{{ ('aaaa'" + " | list | string" * 30 + ") | length | tojson }}",
        "sort-in-loop": (
            "{% set xs = range(100000) | list %}"
            "{% for i in range(100000) %}{% set y = xs | sort %}{% endfor %}"
        ),
    }
    return [Case(name, _job(text), "") for name, text in texts.items()]


def _accepted() -> list[Case]:
    service = (template_dirs()[0] / "service.yaml.j2").read_text()

    def link_dir(tdir: Path, out: Path) -> None:  # the template_dir itself is a link
        real = out / "real-templates"
        real.mkdir()
        (real / "service.yaml.j2").write_text(service)
        tdir.rmdir()
        tdir.symlink_to(real)

    return [
        Case("plain-override", lambda t, o: (t / "service.yaml.j2").write_text(service), None),
        Case("template-dir-is-a-link", link_dir, None),
        Case(
            "link-inside",
            _and(
                lambda t, o: (t / "real.j2").write_text(service),
                _link("service.yaml.j2", lambda t, o: "real.j2"),
            ),
            None,
        ),
        Case(
            "link-into-subdir",
            _and(
                lambda t, o: (t / "parts").mkdir(),
                lambda t, o: (t / "parts" / "svc.j2").write_text(service),
                _link("shared", lambda t, o: "parts"),
                lambda t, o: (t / "service.yaml.j2").write_text("{% include 'shared/svc.j2' %}"),
            ),
            None,
        ),
        Case("builtin-macros-import", lambda t, o: (t / "service.yaml.j2").write_text(service), None),
        Case(
            "bounded-loop",
            lambda t, o: (t / "service.yaml.j2").write_text(
                "{% for i in range(1000) %}{% endfor %}" + service
            ),
            None,
        ),
    ]


CASES = _reading_out() + _spending() + _accepted()


def _prepare(tmp_path: Path, case: Case) -> Path:
    tdir, out = tmp_path / "templates", tmp_path / "outside"
    tdir.mkdir()
    out.mkdir()
    (out / "secret.txt").write_text(SECRET)
    case.setup(tdir, out)
    return tdir


def _api(tdir: Path) -> str:
    try:
        manifests = render(TFClusterSpec.from_dict(SPEC), template_dir=tdir)
    except RenderError as exc:
        return f"refused: {exc}"
    return json.dumps(manifests)


def _cli(tdir: Path) -> str:
    src = tdir.parent / "spec.yaml"
    src.write_text(json.dumps(SPEC))
    out, err = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(out):
        code = cli.main(["render", str(src), "--template-dir", str(tdir)])
    if code == 0:
        return out.getvalue()
    assert code == cli.EXIT_SPEC_ERROR and err.getvalue().startswith("error: template:"), err.getvalue()[:300]
    assert out.getvalue() == ""
    return "refused: " + err.getvalue()


def _untraced_cpu(fn: Callable[[], object]) -> float:
    """Thread CPU seconds of ``fn`` with no allocation tracing and the compiled-template
    cache emptied (as the traced run found it for a new template directory)."""
    from airflow_tfk.render import manifests

    manifests._templates.cache_clear()
    start = time.thread_time()
    try:
        fn()
    except Exception:  # the traced run judged the outcome; only the time is wanted here
        pass
    return time.thread_time() - start


@pytest.fixture(scope="module", autouse=True)
def _warm() -> None:
    render(TFClusterSpec.from_dict(SPEC))


@pytest.mark.parametrize("interface", ["api", "cli"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_template_dir_case(case: Case, interface: str, tmp_path: Path) -> None:
    tdir = _prepare(tmp_path, case)
    run = {"api": _api, "cli": _cli}[interface]
    box: list[str] = []
    exc, cpu, peak, finished = _run_bounded(lambda: box.append(run(tdir)))
    assert finished, "hung"
    assert exc is None, f"crashed: {exc!r}"[:600]
    result = box[0]
    assert SECRET not in result and "root:x:0" not in result
    if case.rule is None:
        assert not result.startswith("refused"), result[:600]
    else:
        assert result.startswith("refused"), result[:300]
        assert case.rule in result, result[:600]
        assert case.names in result and len(result) < 2000, result[:600]
    if cpu >= CPU_LIMIT:
        # The run above traced every allocation (tracemalloc, for the memory bound), which
        # costs about three times the work itself: the CPU bound is the work's, so a case
        # over it is measured again untraced, from the same cold template cache.
        cpu = _untraced_cpu(lambda: run(tdir))
    assert cpu < CPU_LIMIT, f"{cpu:.2f} CPU-s"
    assert peak < MEMORY_LIMIT, f"{peak / 2**20:.0f} MB"


def test_corpus_size() -> None:
    assert len([c for c in CASES if c.rule is not None]) >= 100


SERVER_OVERRIDES = {
    "serving": ("serving/service.yaml.j2", "serving/_macros.yaml.j2"),
    "tensorboard": ("tensorboard/service.yaml.j2", "serving/_macros.yaml.j2"),
}


def _server(kind: str, tdir: Path) -> list[dict]:
    from airflow_tfk.serving.render import render_serving
    from airflow_tfk.serving.spec import ServingSpec, TensorBoardSpec
    from airflow_tfk.tensorboard.render import render_tensorboard

    if kind == "serving":
        return render_serving(ServingSpec(model_name="m", claim="models"), template_dir=tdir)
    return render_tensorboard(TensorBoardSpec(name="tb", claim="logs"), template_dir=tdir)


@pytest.mark.parametrize("kind", sorted(SERVER_OVERRIDES))
@pytest.mark.parametrize(
    "case",
    [c for c in CASES if c.rule is not None and (c.id.endswith(("-include", "-import")) or "loop" in c.id)],
    ids=lambda c: c.id,
)
def test_serving_and_tensorboard_templates_are_confined(case: Case, kind: str, tmp_path: Path) -> None:
    """The serving and TensorBoard renders read their template_dir through the same loader
    and bounds: the training's hostile ``job.yaml.j2``, moved to their service template."""
    tdir = _prepare(tmp_path, case)
    override, _ = SERVER_OVERRIDES[kind]
    (tdir / override).parent.mkdir(parents=True, exist_ok=True)
    if (tdir / "job.yaml.j2").exists() or (tdir / "job.yaml.j2").is_symlink():
        (tdir / "job.yaml.j2").rename(tdir / override)
    box: list[BaseException] = []

    def run() -> None:
        try:
            _server(kind, tdir)
        except RenderError as exc:
            box.append(exc)

    exc, cpu, peak, finished = _run_bounded(run)
    assert finished and exc is None, f"{exc!r}"[:600]
    assert box and case.rule in str(box[0]) and override in str(box[0]), box
    assert SECRET not in str(box[0])
    if cpu >= CPU_LIMIT:  # traced allocations cost about three times the work: measure untraced
        cpu = _untraced_cpu(run)
    assert cpu < CPU_LIMIT and peak < MEMORY_LIMIT, (cpu, peak)


VALIDATE_CASES = [c for c in CASES if c.id.endswith("-include") or "loop" in c.id or c.rule is None]


@pytest.fixture(scope="module")
def warm_validate(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Airflow's imports once, so the bounds measure each case."""
    from airflow_tfk.dagfactory import validate

    folder = tmp_path_factory.mktemp("warm-validate")
    cluster = {k: v for k, v in SPEC.items() if k != "name"}
    (folder / "w.yaml").write_text(json.dumps({"cluster": cluster}))
    assert validate.run([str(folder)], io.StringIO(), io.StringIO()) == validate.EXIT_OK


@pytest.mark.usefixtures("warm_validate")
@pytest.mark.parametrize("case", VALIDATE_CASES, ids=lambda c: c.id)
def test_validate_renders_the_template_dir_with_the_bounds(case: Case, tmp_path: Path) -> None:
    """``airflow-tfk validate`` renders a training file's ``template_dir`` (relative to the
    file) as the worker would: refused naming ``cluster.template_dir`` and the template."""
    from airflow_tfk.dagfactory import validate

    tdir = _prepare(tmp_path, case)
    cluster = {k: v for k, v in SPEC.items() if k != "name"}
    (tmp_path / "t.yaml").write_text(json.dumps({"cluster": {**cluster, "template_dir": tdir.name}}))
    out, err = io.StringIO(), io.StringIO()
    box: list[int] = []
    exc, cpu, peak, finished = _run_bounded(
        lambda: box.append(validate.run([str(tmp_path / "t.yaml")], out, err))
    )
    assert finished and exc is None, f"{exc!r}"[:600]
    text = out.getvalue() + err.getvalue()
    assert SECRET not in text
    if case.rule is None:
        assert box == [validate.EXIT_OK], text
    else:
        assert box == [validate.EXIT_INVALID], text
        assert "cluster.template_dir: does not render" in text and case.names in text, text
        assert case.rule in text, text
    if cpu >= CPU_LIMIT:  # traced allocations cost about three times the work: measure untraced
        cpu = _untraced_cpu(lambda: validate.run([str(tmp_path / "t.yaml")], io.StringIO(), io.StringIO()))
    assert cpu < CPU_LIMIT and peak < MEMORY_LIMIT, (cpu, peak)
