"""The YAML reader (spec files, training files, the CLI) refuses what a reviewer cannot see
or what can blow up, naming the field and its line."""

from __future__ import annotations

import pytest

from airflow_tfk.core.errors import SpecError
from airflow_tfk.spec.yaml_reader import MAX_BYTES, MAX_DEPTH
from airflow_tfk.spec.yaml_reader import load_yaml_lines as load_mapping


def test_plain_data_and_the_line_of_every_key() -> None:
    data, lines = load_mapping("a: 1\nb:\n  c: [x, 2]\n  d: 2026-01-01\n")
    assert data["a"] == 1 and data["b"]["c"] == ["x", 2]
    assert str(data["b"]["d"]) == "2026-01-01"
    assert lines == {"a": 1, "b": 2, "b.c": 3, "b.c[0]": 3, "b.c[1]": 3, "b.d": 4}


def test_one_reader_for_every_kind_of_file() -> None:
    import airflow_tfk.dagfactory.loader as loader

    assert loader.load_yaml_lines is load_mapping


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        ("a: 1\nb: 2\na: 3\n", "a", "is defined twice (lines 1 and 3)"),
        ("x:\n  a: 1\n  a: 1\n", "x.a", "is defined twice"),
        ("a: &x [1, 2]\nb: *x\n", "b", "alias"),
        ("a: &x 1\nb: *x\n", "b", "alias"),
        ("a: &x {q: 1}\nb:\n  <<: *x\n", "b", "merge key"),
        ("a: !!python/object/apply:os.system [true]\n", "a", "non-standard tag"),
        ("a: !!python/name:os.system x\n", "a", "non-standard tag"),
        ("a: !!binary aGVsbG8=\n", "a", "non-standard tag"),
        ("a: !!set {x}\n", "a", "non-standard tag"),
        ("- 1\n", "spec", "must be a YAML mapping"),
        ("", "spec", "is empty"),
        ("a: {1: x}\n", "a", "keys must be strings"),
        ("a: [\n", "spec", "is not valid YAML"),
        ("1: x\n", "spec", "keys must be strings"),
        ("a: 1\n---\nb: 2\n", "spec", "is not valid YAML"),
    ],
)
def test_refusals_name_the_field(text: str, field: str, words: str) -> None:
    with pytest.raises(SpecError) as info:
        load_mapping(text)
    assert info.value.field == field and words in str(info.value)


def test_billion_laughs_is_refused_before_it_is_composed() -> None:
    text = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
    )
    with pytest.raises(SpecError, match="expands to more than") as info:
        load_mapping(text)
    assert info.value.field == "spec"


def test_size_and_depth_limits() -> None:
    with pytest.raises(SpecError, match="larger than"):
        load_mapping("a: '" + "x" * MAX_BYTES + "'\n")
    deep = "a: " + "[" * (MAX_DEPTH + 2) + "]" * (MAX_DEPTH + 2) + "\n"
    with pytest.raises(SpecError, match="nested deeper"):
        load_mapping(deep)


def test_very_deep_nesting_is_refused_before_the_recursive_composer() -> None:
    # 200,000 levels in 400 kB: libyaml's composer would overflow the C stack (SIGSEGV).
    n = 200_000
    with pytest.raises(SpecError, match="nested deeper") as info:
        load_mapping("a:\n  b: " + "[" * n + "]" * n + "\n")
    assert info.value.field == "spec" and info.value.line == 2
