"""The package tree is DESIGN's architecture drawing, and the import-linter contracts in
pyproject.toml hold it (scripts/gates.sh runs them). These tests keep the contracts honest:
they cover every package, an upward import breaks them, no import cycle spans two packages,
and the root stays a thin face."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "airflow_tfk"
NEUTRAL = {"runtime", "protocol", "__init__"}
# The lazy face, the provider's entry point and the DAG environment helper.
ROOT_MODULES = {"__init__", "provider_info", "dag_env"}


def _contracts() -> list[dict[str, object]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def _packages() -> set[str]:
    return {p.parent.name for p in PACKAGE.glob("*/__init__.py")}


def test_the_root_holds_only_the_face_the_entry_point_and_the_dag_helper() -> None:
    assert {p.stem for p in PACKAGE.glob("*.py")} == ROOT_MODULES


def test_every_provider_package_is_forbidden_to_the_runtime() -> None:
    (contract,) = [
        c for c in _contracts() if c.get("source_modules") == ["airflow_tfk.runtime", "airflow_tfk.protocol"]
    ]
    provider = {p.stem for p in PACKAGE.glob("*.py")} | _packages()
    missing = {f"airflow_tfk.{m}" for m in provider - NEUTRAL} - set(contract["forbidden_modules"])  # type: ignore[arg-type]
    assert not missing, f"add to the runtime contract in pyproject.toml: {sorted(missing)}"


def test_every_provider_package_has_its_place_in_the_layers() -> None:
    (layers,) = [c for c in _contracts() if c.get("type") == "layers"]
    placed = {
        name.strip().removeprefix("airflow_tfk.")
        for layer in layers["layers"]  # type: ignore[union-attr]
        for name in str(layer).replace(":", "|").split("|")
    }
    assert _packages() - NEUTRAL == placed


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "lint-imports"),
            "--no-cache",
            "--config",
            str(ROOT / "pyproject.toml"),
        ],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("module", "imported", "contract"),
    [
        ("spec/checks.py", "airflow_tfk.run.wait", "Layers"),  # a stage importing a later one
        ("core/naming.py", "airflow_tfk.spec.cluster", "Layers"),  # the vocabulary importing a stage
        ("backends/local/records.py", "airflow_tfk.backends.kubernetes.status", "The two backends"),
        ("run/wait.py", "airflow_tfk._airflow.compat", "Only the Airflow face uses the Airflow glue"),
        ("serving/gate.py", "airflow.sdk", "Nothing below the Airflow face imports Airflow"),
    ],
)
def test_an_import_across_the_drawing_breaks_the_gates(
    tmp_path: Path, module: str, imported: str, contract: str
) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(PACKAGE, tree / "airflow_tfk", ignore=shutil.ignore_patterns("__pycache__", "runtime"))
    (tree / "airflow_tfk" / "runtime").mkdir()
    (tree / "airflow_tfk" / "runtime" / "__init__.py").write_text("")
    assert _lint(tree).returncode == 0, "the unchanged tree must keep every contract"
    target = tree / "airflow_tfk" / module
    target.write_text(target.read_text() + f"\nimport {imported}  # noqa\n")
    result = _lint(tree)
    assert result.returncode != 0
    broken = [line for line in result.stdout.splitlines() if "BROKEN" in line or line.startswith(contract)]
    assert any(line.startswith(contract) for line in broken), result.stdout[-3000:]


def test_no_import_cycle_spans_two_packages() -> None:
    """Strongly connected components of the module graph (grimp's, as import-linter reads
    it, function-level imports included): a cycle inside one package is that package's
    business; one across two packages would tie two stages together."""
    graph = grimp.build_graph("airflow_tfk")
    modules = sorted(graph.modules)
    succ = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    counter = 0

    def package(module: str) -> str:
        return ".".join(module.split(".")[:2])

    # Tarjan's algorithm, iterative (the graph is a few hundred modules).
    for start in modules:
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            edges = [s for s in succ.get(node, []) if s in succ]
            if i < len(edges):
                work.append((node, i + 1))
                nxt = edges[i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                components.append(component)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    spanning = [sorted(c) for c in components if len(c) > 1 and len({package(m) for m in c}) > 1]
    assert not spanning, spanning
