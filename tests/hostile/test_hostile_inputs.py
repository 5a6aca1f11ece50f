"""Every case of the hostile-input corpus through the Python API and the CLI: refused
with an error naming the field, within 1 s and 100 MB, or accepted. No traceback.

The accepted cases are dry-run against the real API server in
tests/k8s_integration/test_hostile_admission.py.
"""

from __future__ import annotations

import io
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from airflow_tfk.cli import main as cli
from airflow_tfk.core.errors import SpecError
from airflow_tfk.render.manifests import RenderError, render
from airflow_tfk.spec.cluster import RoleSpec, TFClusterSpec
from airflow_tfk.spec.yaml_reader import load_yaml_mapping

from .corpus import BASE, Case, bounded, cases

CASES = cases()
TIME_LIMIT = 1.0
MEMORY_LIMIT = 100 * 2**20


def _field_ok(got: str, want: str) -> bool:
    return got == want or got.startswith((f"{want}.", f"{want}["))


def _python_api(case: Case):
    data = case.python if case.python is not None else load_yaml_mapping(case.text)
    spec = TFClusterSpec.from_dict(data)
    return render(spec)


@pytest.mark.parametrize("case", [c for c in CASES if not c.cli_args], ids=lambda c: c.id)
def test_python_api(case: Case) -> None:
    result, seconds, peak = bounded(lambda: _python_api(case))
    assert peak < MEMORY_LIMIT, f"{peak / 2**20:.0f} MB"
    if case.field is None:
        assert not isinstance(result, Exception), repr(result)
    else:
        assert isinstance(result, SpecError), f"expected an error on {case.field}, got {result!r}"[:500]
        assert _field_ok(result.field, case.field), str(result)[:300]
        assert len(str(result)) < 1000  # quoted values are cut short
    # Timed without tracemalloc's overhead.
    t0 = time.process_time()
    try:
        _python_api(case)
    except SpecError:
        pass
    assert time.process_time() - t0 < TIME_LIMIT


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_cli(case: Case, tmp_path: Path) -> None:
    path = tmp_path / "spec.yaml"
    path.write_bytes(case.text if isinstance(case.text, bytes) else case.text.encode())
    out, err = io.StringIO(), io.StringIO()

    def run() -> int:
        with redirect_stdout(out), redirect_stderr(err):
            return cli.main(["render", str(path), *case.cli_args])

    code, seconds, peak = bounded(run)
    assert seconds < TIME_LIMIT * 2, seconds  # traced: about twice as slow
    assert peak < MEMORY_LIMIT, f"{peak / 2**20:.0f} MB"
    assert not isinstance(code, BaseException), repr(code)
    stderr = err.getvalue()
    assert "Traceback" not in stderr
    if case.field is None:
        assert code == 0, stderr
        assert out.getvalue().startswith("---\n")
    else:
        assert code == cli.EXIT_SPEC_ERROR, (code, stderr[:300])
        assert stderr.startswith(f"error: {case.field}"), stderr[:300]
        assert out.getvalue() == ""


def test_the_corpus_covers_every_class() -> None:
    ids = " ".join(c.id for c in CASES)
    for cls in (
        "alias-bomb",
        "deep-",
        "size-",
        "dup-",
        "yaml11-number",
        "yaml11-bool",
        "key-int",
        "huge-int",
        "quantity-",
        "gpu-resource",
        "reserved-label",
        "cli-map-index",
        "object-",
    ):
        assert cls in ids, cls
    assert len(CASES) >= 150
    assert sum(c.field is None for c in CASES) >= 20


# -- the Python API's own shapes ---------------------------------------------------------
def test_python_api_accepts_plain_mappings_for_nested_parts() -> None:
    spec = TFClusterSpec(
        name="m",
        image="tf:1",
        command=("python", "t.py"),
        ps={"replicas": 1},  # type: ignore[arg-type]
        worker=RoleSpec(resources={"cpu": "1"}, tolerations=[{"key": "a", "operator": "Exists"}]),  # type: ignore[arg-type]
        storage={"data": {"size": "1Gi"}},  # type: ignore[arg-type]
    )
    assert spec.worker.resources.cpu == "1" and spec.worker.tolerations[0].key == "a"
    assert spec.storage.data is not None and spec.storage.data.size == "1Gi"
    with pytest.raises(SpecError, match=r"^worker\.resources\.cpu"):
        RoleSpec(resources={"cpu": "١"}).validate("worker", 1, 1)
    with pytest.raises(SpecError, match=r"^worker\.resources\.cpus: unknown key"):
        RoleSpec(resources={"cpus": "1"}).validate("worker", 1, 1)


def test_python_api_mixed_type_keys() -> None:
    with pytest.raises(SpecError, match="^spec: keys must be strings"):
        TFClusterSpec.from_dict({1: "x", **BASE})
    with pytest.raises(SpecError, match="^worker: keys must be strings"):
        TFClusterSpec.from_dict({**BASE, "worker": {None: 1}})


def test_previous_run_policy_none_is_a_clear_error() -> None:
    from airflow_tfk.operators.training import TFTrainingOperator

    with pytest.raises(ValueError, match="^previous_run_policy: must be a string"):
        TFTrainingOperator(task_id="t", cluster_spec=BASE, previous_run_policy=None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "template",
    [
        "{% if %}",  # syntax error
        "kind: Job\nmetadata: {name: {{ nope | tojson }}}\n",  # undefined
        "kind: Job\nmetadata: {name: {{ c.name }}}\n",  # raw value (finalize refuses)
        "{% include 'missing.j2' %}",
        "{% macro f(n) %}{{ f(n) | fragment }}{% endmacro %}{{ f(1) | fragment }}",  # recursion
        "{{ (10 ** 100000) | tojson }}",
        "{{ c.name.__class__ | tojson }}",  # sandbox
    ],
)
def test_template_dir_errors_are_render_errors(template: str, tmp_path: Path) -> None:
    (tmp_path / "job.yaml.j2").write_text(template)
    spec = TFClusterSpec.from_dict(BASE)
    with pytest.raises(RenderError):
        render(spec, template_dir=tmp_path)
    src = tmp_path / "spec.yaml"
    src.write_text(str(BASE).replace("'", '"'))
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        code = cli.main(["render", str(src), "--template-dir", str(tmp_path)])
    assert code == cli.EXIT_SPEC_ERROR and err.getvalue().startswith("error: template:"), err.getvalue()[:300]
