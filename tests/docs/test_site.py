"""The docs site builds with MkDocs in strict mode (every warning an error: a page left out
of the navigation, a link to a missing page or anchor), and every page of docs/ is in it.
The examples in the pages are run by tests/test_docs_examples.py; this test says how many
there are, so the CI log shows what the site's examples cover."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from tests.test_docs_examples import blocks

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).parent / "mkdocs"


def _nav_pages(nav: list[object]) -> set[str]:
    pages: set[str] = set()
    for item in nav:
        for value in item.values() if isinstance(item, dict) else [item]:
            if isinstance(value, list):
                pages |= _nav_pages(value)
            elif isinstance(value, str):
                pages.add(value)
    return pages


def test_the_site_builds_strict_with_every_page_in_the_navigation(tmp_path: Path, summary_line) -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["strict"] is True
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages == _nav_pages(config["nav"]), pages ^ _nav_pages(config["nav"])
    out = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    assert "WARNING" not in out.stderr, out.stderr[-4000:]
    for page in pages:
        built = tmp_path / "site" / ("index.html" if page == "index.md" else f"{page[:-3]}/index.html")
        assert built.is_file(), page
    counts = {
        lang: len([b for b in blocks(lang) if "docs" in b.path.parts]) for lang in ("yaml", "python", "bash")
    }
    summary_line(
        f"docs site: {len(pages)} pages built strict; examples run by tests/test_docs_examples.py: {counts}"
    )


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The strict build is a link check: a page linking a missing page fails it."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# x\n\n[gone](missing.md) [anchor](other.md#nowhere)\n")
    (docs / "other.md").write_text("# other\n")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    config.update(docs_dir=str(docs), site_dir=str(tmp_path / "site"), nav=["index.md", "other.md"])
    config.pop("exclude_docs", None)
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    out = subprocess.run(
        [str(MKDOCS), "build", "--strict", "-f", str(tmp_path / "mkdocs.yml")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode != 0
    assert "missing.md" in out.stderr or "nowhere" in out.stderr, out.stderr
