"""The README says what the code does: its field table, its links, its words.

The field table is checked against the spec's dataclasses by introspection, so a field
added to any of them (or a default changed) fails here until the README says so.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import sys
import types
import typing
from collections.abc import Mapping
from pathlib import Path

from airflow_tfk import network
from airflow_tfk import spec as spec_module
from airflow_tfk.schema_check import MIN_KUBERNETES_VERSION

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")

# Where each dataclass's fields appear in the table.
PREFIX: dict[type, str] = {
    spec_module.TFClusterSpec: "",
    spec_module.RoleSpec: "<role>.",
    spec_module.Resources: "<role>.resources.",
    spec_module.Toleration: "<role>.tolerations[].",
    spec_module.StorageSpec: "storage.",
    spec_module.VolumeSpec: "storage.<volume>.",
    network.TrainingNetworkPolicy: "network_policy.",
    network.Peer: "network_policy.egress_to[].",
}


def _nested_dataclasses(hint: object) -> list[type]:
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return [hint]
    out: list[type] = []
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is not None:
        for arg in typing.get_args(hint):
            out += _nested_dataclasses(arg)
    return out


def _default(field: dataclasses.Field) -> str:
    if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
        return "required"
    value = field.default if field.default is not dataclasses.MISSING else field.default_factory()
    if value is None:
        return "none"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (tuple, list)):
        return f"`[{', '.join(str(v) for v in value)}]`"
    if isinstance(value, Mapping):
        assert not value, "a non-empty default mapping needs a rendering rule here"
        return "`{}`"
    return f"`{value}`"


def expected_rows() -> dict[str, str]:
    rows: dict[str, str] = {}
    for cls, prefix in PREFIX.items():
        hints = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))
        for field in dataclasses.fields(cls):
            nested = _nested_dataclasses(hints[field.name])
            unknown = [n for n in nested if n not in PREFIX]
            assert not unknown, (
                f"{cls.__name__}.{field.name} holds {unknown[0].__name__}: document its fields in the "
                "README's table and add it to PREFIX in tests/test_readme.py"
            )
            if field.default_factory is not dataclasses.MISSING and nested:
                continue  # a section that is always there (storage, resources): its fields are rows
            rows[f"{prefix}{field.name}"] = _default(field)
    return rows


def readme_rows() -> dict[str, str]:
    section = README[README.index("### Every field") :]
    section = section[: section.index("\n### ", 1)]
    rows = {}
    for line in section.splitlines():
        m = re.match(r"^\| `([^`]+)` \| ([^|]+?) \| (.+) \|$", line)
        if m:
            assert m.group(1) not in rows, f"{m.group(1)} is in the table twice"
            assert m.group(3).strip(), f"{m.group(1)} has no meaning"
            rows[m.group(1)] = m.group(2).strip()
    return rows


def test_every_spec_field_is_in_the_table_with_its_true_default():
    expected, documented = expected_rows(), readme_rows()
    missing = sorted(set(expected) - set(documented))
    assert not missing, f"fields missing from the README's table: {missing}"
    stale = sorted(set(documented) - set(expected))
    assert not stale, f"the README's table lists fields the spec does not have: {stale}"
    wrong = {k: (documented[k], v) for k, v in expected.items() if documented[k] != v}
    assert not wrong, f"README default != real default: {wrong}"


def test_the_table_would_catch_a_new_field():
    @dataclasses.dataclass(frozen=True)
    class Extra:
        queue: str | None = None

    PREFIX[Extra] = "extra."
    try:
        assert "extra.queue" in expected_rows()
        assert "extra.queue" not in readme_rows()
    finally:
        del PREFIX[Extra]


def test_the_example_spec_does_not_pass_non_defaults_off_as_defaults():
    example = README[README.index("## The cluster spec") : README.index("### Every field")]
    for line in example.splitlines():
        if line.startswith(("max_duration_seconds:", "retries_per_index:")):
            assert "not the default" in line, line


def test_minimum_kubernetes_version_is_stated():
    assert f"Kubernetes **{MIN_KUBERNETES_VERSION} or newer**" in README
    for feature in ("backoffLimitPerIndex", "batch.kubernetes.io/job-completion-index", "podFailurePolicy"):
        assert feature in README


def _markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_no_link_leaves_the_repository():
    bad = []
    for path in _markdown_files():
        text = path.read_text(encoding="utf-8")
        targets = re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r"<(https?://[^>]+)>", text)
        for target in targets:
            if target.startswith("#"):
                continue
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
                bad.append(f"{path.relative_to(ROOT)}: {target}")
                continue
            resolved = (path.parent / target.split("#")[0]).resolve()
            if not resolved.is_relative_to(ROOT) or not resolved.exists():
                bad.append(f"{path.relative_to(ROOT)}: {target} (outside the repository or missing)")
    assert not bad, bad


def test_anchors_in_the_readme_exist():
    def slug(heading: str) -> str:
        return re.sub(r"[^a-z0-9 -]", "", heading.strip().lower()).replace(" ", "-")

    anchors = {slug(h) for h in re.findall(r"^#+ (.+)$", README, flags=re.M)}
    for target in re.findall(r"\]\(#([^)]+)\)", README):
        assert target in anchors, f"#{target} is not a heading of the README"


def test_no_jargon():
    for word in ("seeds'", "the seeds"):
        assert word not in README
