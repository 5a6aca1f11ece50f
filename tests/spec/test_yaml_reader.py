"""Deep nesting gets the project's own message, whichever YAML parser meets it first.

The reader (spec and training files alike) is run with libyaml's parser and with PyYAML's
pure-Python one, on flow and block nesting: a libyaml build with its own nesting limit
(0.2.6, in PyYAML 6.0.4) refuses some of these before the project's check does, others it never sees.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from airflow_tfk.core.errors import SpecError
from airflow_tfk.spec import yaml_reader as spec_yaml

READERS: dict[str, tuple[Any, str, Callable[[str], Any]]] = {
    "spec": (spec_yaml, "_loader", spec_yaml.load_yaml_mapping),
}
LOADERS = {"libyaml": getattr(yaml, "CSafeLoader", None), "python": yaml.SafeLoader}
N = 200_000
DOCS = {
    # line 2 holds the nesting in each
    "flow": "a:\n  b: " + "[" * N + "]" * N + "\n",
    "block": "a:\n  b:\n" + "    " + "- " * 2_000 + "x\n",
    "flow-mapping": "a:\n  b: " + "{c: " * 3_000 + "1" + "}" * 3_000 + "\n",
}


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("doc", DOCS)
def test_deep_nesting_is_refused_with_the_projects_message_and_line(
    reader: str, loader: str, doc: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if LOADERS[loader] is None:
        pytest.skip("PyYAML was built without libyaml")
    module, attr, load = READERS[reader]
    monkeypatch.setattr(module, attr, lambda: LOADERS[loader])
    with pytest.raises(SpecError, match=rf"nested deeper than {spec_yaml.MAX_DEPTH} levels") as info:
        load(DOCS[doc])
    assert info.value.field == "spec"
    line = info.value.line
    assert line in (2, 3), line


def test_a_parsers_own_nesting_limit_reads_as_the_projects_message() -> None:
    """libyaml 0.2.6's refusal, as PyYAML raises it, whatever libyaml this venv has."""
    mark = yaml.Mark("<unicode string>", 0, 1, 1003, None, None)
    exc = yaml.scanner.ScannerError(
        "while increasing flow level", mark, "exceeded maximum nesting depth", mark
    )
    err = spec_yaml.parser_error(exc)
    assert err.field == "spec" and err.line == 2
    assert f"nested deeper than {spec_yaml.MAX_DEPTH} levels (line 2)" in str(err)


def test_other_parser_errors_keep_their_text_and_line() -> None:
    with pytest.raises(SpecError, match="is not valid YAML") as info:
        spec_yaml.load_yaml_mapping("a: 1\nb: [1, 2\n")
    assert info.value.line is not None
