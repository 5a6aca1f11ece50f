"""The README says what the code does: its field table, its links, its words.

The field table is generated from the spec's declarations (scripts/gen_spec_docs.py): a
field added to the spec, or a default changed, fails here until the script is rerun.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from airflow_tfk.dagfactory.spec_docs import README_BEGIN, README_END, readme_rows, readme_table
from airflow_tfk.render.schema_check import MIN_KUBERNETES_VERSION

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
sys.path.insert(0, str(ROOT / "scripts"))


def test_the_field_table_is_the_one_the_declarations_generate():
    from gen_spec_docs import readme_with_table

    assert readme_with_table(README, readme_table()) == README, "stale: run python scripts/gen_spec_docs.py"


def test_the_table_has_every_section_and_a_meaning_for_every_row():
    section = README[README.index(README_BEGIN) : README.index(README_END)]
    paths = re.findall(r"^\| `([^`]+)` \|", section, flags=re.M)
    assert len(paths) == len(set(paths)) == len(readme_rows())
    for prefix in (
        "<role>.resources.",
        "<role>.tolerations[].",
        "storage.<volume>.",
        "network_policy.egress_to[].",
    ):
        assert any(p.startswith(prefix) for p in paths), prefix
    assert all(meaning.strip() for _, _, meaning in readme_rows())
    assert ("`worker`", "required") in {(f"`{p}`", d) for p, d, _ in readme_rows()}


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
