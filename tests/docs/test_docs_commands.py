"""The doc-section reader the first-day and day-two tests use (tests/docs_commands.py)."""

from __future__ import annotations

from pathlib import Path

from tests.docs_commands import section


def test_a_comment_line_in_a_code_block_does_not_end_the_section(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(
        "# Page\n\n## First\n\n```python\n# my_project/app.py\nx = 1\n```\n\ntext after\n\n"
        "### Sub\n\nmore\n\n## Second\n\nnot here\n"
    )
    got = section(page, "## First")
    assert "# my_project/app.py" in got and "text after" in got and "### Sub" in got
    assert "not here" not in got and "## Second" not in got
    assert section(page, "### Sub").strip() == "more"
