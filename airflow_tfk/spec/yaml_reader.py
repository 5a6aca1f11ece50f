"""The one YAML reader of the project: spec files, training files and the CLI read YAML
here, strictly and with bounds, so hostile text fails fast and clearly, and a value means
the same in every kind of file.

What the plain safe loader lets through, and this module refuses with a
:class:`~airflow_tfk.core.errors.SpecError` naming the field (and its line):

- anchors and aliases: a value defined far from where it is used, and the "billion laughs"
  bomb (a few hundred bytes expanding to billions of nodes: its expanded size is counted
  from the event stream and refused before anything is composed);
- too large (over 1 MiB), too many values (over 20,000) or too deep (over 64 levels)
  documents; the depth is checked on the event stream too, so a 10,000-level document
  never reaches the recursive composer;
- duplicate keys (the plain loader keeps the last one silently; Kubernetes' strict field
  validation refuses them), keys that are not strings, merge keys (``<<``), tags other
  than YAML's own plain types;
- YAML 1.1 surprises: ``010`` (octal 8), ``1:30`` (sexagesimal 90), ``1_000``, ``0b11``;
  and integers of more than 30 digits. All of them are reported at once, each with its line.

A plain ``yes``/``no``/``on``/``off``/``y``/``n`` is read as YAML 1.2 reads it: as text, not
a boolean (:func:`yaml12_bool`). ``capacity_check: off`` means ``"off"``; a field that takes a
boolean refuses the text, naming itself, and says to write ``true`` or ``false``. An unquoted
date is a date: ``start_date`` takes it, a field that wants text refuses it by name.

Errors are on the dotted path of the field, e.g. ``worker.replicas``; :func:`load_yaml_lines`
also returns the line of every key and item, so later errors can point at their line too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from airflow_tfk.core.errors import SpecError, SpecErrors

__all__ = [
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_NODES",
    "load_yaml_lines",
    "load_yaml_mapping",
    "check_plain_scalar",
    "parser_error",
    "raise_misread",
    "yaml12_bool",
]

MAX_BYTES = 1 << 20
MAX_DEPTH = 64
# Keys, values and items: bounds the parse time of a file (a 1 MiB file of 60,000 keys
# took 0.9 CPU-s to build); a spec or a training file is a page of settings.
MAX_NODES = 20_000
MAX_INT_DIGITS = 30

_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_ALLOWED_TAGS = {_STR, _INT, _FLOAT, _BOOL, _NULL, _MAP, _SEQ, _TIMESTAMP}
_PLAIN_BOOLS = {"true", "True", "TRUE", "false", "False", "FALSE"}
_PLAIN_INT = re.compile(r"^[-+]?(0|[1-9][0-9]*)$", re.ASCII)
_PLAIN_FLOAT = re.compile(
    r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$|^[-+]?\.(inf|Inf|INF)$|^\.(nan|NaN|NAN)$",
    re.ASCII,
)


def _loader() -> Any:
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _at(mark: Any) -> str:
    return f"line {mark.line + 1}" if mark is not None else "the document"


def parser_error(exc: Exception) -> SpecError:
    """The project's own error for a YAML parser's refusal, with the line where it is known.

    Deep nesting has one message whichever parser meets it first: our event check, or a
    libyaml build with its own nesting limit (libyaml 0.2.6 in PyYAML 6.0.4 stops at 1000
    levels, and its scanner's look-ahead can reach that before our check sees the 65th).
    """
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = mark.line + 1 if mark is not None else None
    problem = str(getattr(exc, "problem", None) or "")
    if "nesting" in problem or isinstance(exc, RecursionError):
        err = SpecError("spec", f"is nested deeper than {MAX_DEPTH} levels ({_at(mark)})")
    else:
        text = " ".join(str(exc).split())[:500]
        err = SpecError("spec", f"is not valid YAML: {text}")
    err.line = line
    return err


def _check_events(text: str) -> None:
    """Depth and expanded size from the event stream (no tree is built yet)."""
    import yaml

    nodes = 0
    depth = 0
    stack: list[tuple[str | None, int]] = []
    sizes: dict[str, int] = {}
    for event in yaml.parse(text, Loader=_loader()):
        if isinstance(event, yaml.ScalarEvent):
            nodes += 1
            if event.anchor:
                sizes[event.anchor] = 1
        elif isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            nodes += 1
            depth += 1
            if depth > MAX_DEPTH:
                err = SpecError("spec", f"is nested deeper than {MAX_DEPTH} levels ({_at(event.start_mark)})")
                err.line = event.start_mark.line + 1 if event.start_mark is not None else None
                raise err
            stack.append((event.anchor, nodes))
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
            anchor, start = stack.pop()
            if anchor:
                sizes[anchor] = nodes - start + 1
        elif isinstance(event, yaml.AliasEvent):
            nodes += sizes.get(event.anchor or "", 1)
        if nodes > MAX_NODES:
            raise SpecError(
                "spec",
                f"expands to more than {MAX_NODES} values ({_at(event.start_mark)}): "
                "excessive YAML aliasing or an oversized spec",
            )


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def check_plain_scalar(node: Any, where: str) -> None:
    """A plain scalar as YAML 1.2 reads it: refuse the YAML 1.1 number forms that are easily
    misread (``010``, ``1:30``, ``1_000``, ``0b11``) and over-long integers, and read YAML 1.1
    boolean words as text (:func:`yaml12_bool`)."""
    if node.style:  # quoted or block text: always a string (plain is None, or "" in libyaml)
        return
    value = node.value
    if node.tag == _INT:
        if not _PLAIN_INT.match(value):
            raise SpecError(
                where,
                "is a YAML 1.1 number form (leading zero, ':', '_', 0b/0x) that is easily misread; "
                "write a plain decimal, or quote it to mean text",
                value,
            )
        if len(value.lstrip("+-")) > MAX_INT_DIGITS:
            raise SpecError(where, f"is an integer of more than {MAX_INT_DIGITS} digits", value)
    elif node.tag == _FLOAT and not _PLAIN_FLOAT.match(value):
        raise SpecError(
            where, "is a YAML 1.1 number form (':' or '_') that is easily misread; quote it", value
        )
    else:
        yaml12_bool(node)


def yaml12_bool(node: Any) -> None:
    """Only ``true``/``false`` are booleans (YAML 1.2's core schema): retag a plain YAML 1.1
    boolean word (``off``, ``yes``, ``n``...) of a composed scalar node as the text it is,
    so the field that reads it decides (an enum takes ``off``; a boolean field refuses
    ``yes`` by name). Both the spec reader and the training-file reader call it."""
    if node.tag == _BOOL and not node.style and node.value not in _PLAIN_BOOLS:
        node.tag = _STR


class _Builder:
    """Turns the composed node tree into plain values: every rule on the way, the line of
    each key path recorded, the misread scalars collected."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.lines: dict[str, int] = {}
        self.misread: list[SpecError] = []
        self._seen: set[int] = set()

    def value(self, node: Any, path: str) -> Any:
        import yaml

        # The composer hands out the very same node object for every alias of an anchor:
        # meeting a node twice means the file used an alias.
        if id(node) in self._seen:
            err = SpecError(path or "spec", "uses a YAML alias (*name); anchors and aliases are not allowed")
            key_path = path
            while key_path.endswith("]"):  # an alias node carries its anchor's position
                key_path = key_path[: key_path.rfind("[")]
            err.line = self.lines.get(path) or self.lines.get(key_path)
            raise err
        self._seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node, path)
        if isinstance(node, yaml.SequenceNode):
            if node.tag != _SEQ:
                raise _refusal(path, f"has a non-standard tag {node.tag!r}", node)
            out = []
            for i, item in enumerate(node.value):
                where = f"{path}[{i}]"
                self.lines.setdefault(where, item.start_mark.line + 1)
                out.append(self.value(item, where))
            return out
        if not isinstance(node, yaml.MappingNode) or node.tag != _MAP:
            raise _refusal(path, f"has a non-standard tag {node.tag!r}", node)
        return self._mapping(node, path)

    def _mapping(self, node: Any, path: str) -> dict[str, Any]:
        import yaml

        mapping: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise _refusal(path, "uses a merge key (<<); write the keys out", key_node)
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag != _STR:
                shown = key_node.value if isinstance(key_node, yaml.ScalarNode) else key_node.tag
                raise _refusal(path, "keys must be strings (quote it)", key_node, shown)
            key = key_node.value
            where = _join(path, key)
            line = key_node.start_mark.line + 1
            if key in mapping:
                err = SpecError(
                    where, f"is defined twice (lines {self.lines.get(where, '?')} and {line}); remove one"
                )
                err.line = line
                raise err
            self.lines[where] = line
            mapping[key] = self.value(value_node, where)
        return mapping

    def _scalar(self, node: Any, path: str) -> Any:
        import yaml

        where = path or "spec"
        if node.tag not in _ALLOWED_TAGS:
            kind = node.tag.rsplit(":", 1)[-1]
            raise _refusal(
                path,
                f"has a non-standard tag {node.tag!r} (a YAML {kind}); quote it to mean text",
                node,
                node.value,
            )
        try:
            check_plain_scalar(node, where)
        except SpecError as exc:
            exc.line = node.start_mark.line + 1
            self.misread.append(exc)
            return node.value
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            raise _refusal(path, f"is not a plain YAML value: {' '.join(str(exc).split())}", node) from None


def _refusal(path: str, rule: str, node: Any, value: object = ...) -> SpecError:
    err = SpecError(path or "spec", rule, value)
    err.line = node.start_mark.line + 1 if node.start_mark is not None else None
    return err


def raise_misread(misread: list[SpecError]) -> None:
    """Raise the scalar errors of a document together, in file order (both readers)."""
    misread.sort(key=lambda e: e.line or 0)
    if len(misread) == 1:
        raise misread[0]
    if misread:
        raise SpecErrors(misread)


def load_yaml_mapping(text: str | bytes) -> dict[str, Any]:
    """A spec file's top-level mapping, read strictly (see the module docstring)."""
    return load_yaml_lines(text)[0]


def load_yaml_lines(text: str | bytes) -> tuple[dict[str, Any], dict[str, int]]:
    """The top-level mapping of a YAML document and the line (1-based) of each key path
    (``cluster.worker.replicas``, ``cluster.args[1]``).

    Every refusal is a :class:`SpecError`: ``spec`` for the file as a whole, else the field.
    """
    import yaml

    if isinstance(text, bytes):
        if len(text) > MAX_BYTES:
            raise SpecError("spec", f"is larger than {MAX_BYTES} bytes", f"{len(text)} bytes")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SpecError("spec", f"is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not isinstance(text, str):
        raise SpecError("spec", "must be YAML text", type(text).__name__)
    if len(text) > MAX_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise SpecError("spec", f"is larger than {MAX_BYTES} bytes", f"{len(text)} characters")
    try:
        _check_events(text)
        loader = _loader()(text)
        try:
            node = loader.get_single_node()
            if node is None:
                raise SpecError("spec", "is empty: it must be a YAML mapping")
            builder = _Builder(loader)
            data = builder.value(node, "")
        finally:
            loader.dispose()
    except (yaml.YAMLError, RecursionError) as exc:  # RecursionError: a shape the bounds missed
        raise parser_error(exc) from None
    raise_misread(builder.misread)
    if not isinstance(data, Mapping):
        raise SpecError("spec", "must be a YAML mapping", type(data).__name__)
    return dict(data), builder.lines
