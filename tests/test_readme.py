"""The README and the docs pages say what the code does: the field table, the links, the
words; the README stays a short front page.

The field table (docs/cluster-spec.md) is generated from the spec's declarations
(scripts/gen_spec_docs.py): a field added to the spec, or a default changed, fails here
until the script is rerun.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from airflow_tfk.dagfactory.spec_docs import README_BEGIN, README_END, readme_rows, readme_table
from airflow_tfk.render.schema_check import MIN_KUBERNETES_VERSION

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
SPEC_PAGE = (ROOT / "docs" / "cluster-spec.md").read_text(encoding="utf-8")
sys.path.insert(0, str(ROOT / "scripts"))


def test_the_field_table_is_the_one_the_declarations_generate():
    from gen_spec_docs import readme_with_table

    assert readme_with_table(SPEC_PAGE, readme_table()) == SPEC_PAGE, (
        "stale: run python scripts/gen_spec_docs.py"
    )


def test_the_table_has_every_section_and_a_meaning_for_every_row():
    section = SPEC_PAGE[SPEC_PAGE.index(README_BEGIN) : SPEC_PAGE.index(README_END)]
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
    example = SPEC_PAGE[SPEC_PAGE.index("## The cluster spec") : SPEC_PAGE.index("### Every field")]
    for line in example.splitlines():
        if line.startswith(("max_duration_seconds:", "retries_per_index:")):
            assert "not the default" in line, line


def test_minimum_kubernetes_version_is_stated():
    assert f"Kubernetes **{MIN_KUBERNETES_VERSION} or newer**" in SPEC_PAGE
    for feature in ("backoffLimitPerIndex", "batch.kubernetes.io/job-completion-index", "podFailurePolicy"):
        assert feature in SPEC_PAGE


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


def _slug(heading: str) -> str:
    return re.sub(r"[^a-z0-9_ -]", "", heading.strip().lower()).replace(" ", "-")


def test_every_anchor_a_page_links_to_is_a_heading_of_its_target():
    """Within a page (``#x``) and across pages (``other.md#x``): the README's sections moved
    to docs/, and a link that still points at the old place fails here."""
    bad = []
    for path in _markdown_files():
        text = path.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]*#[^)\s]+)\)", text):
            file, _, anchor = target.partition("#")
            if re.match(r"^[a-z][a-z0-9+.-]*:", file):
                continue
            page = (path.parent / file).resolve() if file else path
            if page.suffix != ".md" or not page.is_file():
                continue
            anchors = {
                _slug(h) for h in re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), flags=re.M)
            }
            if anchor not in anchors:
                bad.append(f"{path.relative_to(ROOT)}: {target}")
    assert not bad, bad


def test_the_readme_is_a_short_front_page_that_links_every_docs_page():
    assert len(README.splitlines()) < 250
    linked = set(re.findall(r"\]\(docs/([^)#]+\.md)", README))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages - linked == set(), f"pages the README does not link: {sorted(pages - linked)}"


def test_no_jargon():
    for path in _markdown_files():
        text = path.read_text(encoding="utf-8")
        for word in ("seeds'", "the seeds"):
            assert word not in text, path
