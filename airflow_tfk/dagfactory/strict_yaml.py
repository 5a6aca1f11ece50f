"""A strict, safe YAML reader for training files: plain data only, every key once.

Training files are reviewed in pull requests and parsed by the DAG processor on every
loop, so the reader refuses what a reviewer cannot see or what can blow up a parser:
duplicate keys (the second silently wins in plain YAML), anchors and aliases (the
"billion laughs" expansion, and values defined far from where they are used), merge keys,
non-standard tags, files over :data:`MAX_BYTES` and nesting past :data:`MAX_DEPTH`.

It also returns the line of every key and list item, so an error can point at the line.
The YAML is composed into nodes by libyaml when available (the C parser), then turned into
Python values here; scalars are resolved by PyYAML's ``SafeLoader`` rules.

Engineer note: the spec module's ``load_yaml_mapping`` is the cluster spec's own reader;
this one adds the line map and the refusals above.
"""

from __future__ import annotations

from typing import Any

from airflow_tfk.errors import SpecError
from airflow_tfk.spec_yaml import check_plain_scalar, parser_error, raise_misread

MAX_BYTES = 1 << 20  # a training file is a page of settings, not a data set
MAX_DEPTH = 64
# Keys, values and items: bounds the parse time of a file (a 1 MiB file of 60,000 keys
# took 0.9 CPU-s to build before this check; 20,000 events take ~20 ms to count).
MAX_NODES = 20_000

_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MERGE_TAG = "tag:yaml.org,2002:merge"


def _loader_class() -> type:
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Builder:
    """Turns a composed node tree into plain values, recording each path's line."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.lines: dict[str, int] = {}
        self.misread: list[SpecError] = []
        self._seen: set[int] = set()

    def value(self, node: Any, path: str, depth: int) -> Any:
        import yaml

        if depth > MAX_DEPTH:
            raise SpecError(path or "spec", f"is nested deeper than {MAX_DEPTH} levels")
        # The composer hands out the very same node object for every alias of an anchor:
        # meeting a node twice means the file used an alias.
        if id(node) in self._seen:
            exc = SpecError(path or "spec", "uses a YAML alias (*name); anchors and aliases are not allowed")
            # An alias node carries its anchor's position: use the line of the enclosing key.
            key_path = path
            while key_path.endswith("]"):
                key_path = key_path[: key_path.rfind("[")]
            exc.line = self.lines.get(key_path)
            raise exc
        self._seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node, path)
        if isinstance(node, yaml.SequenceNode):
            return self._sequence(node, path, depth)
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path, depth)
        raise SpecError(path or "spec", f"has an unsupported YAML node {type(node).__name__}")

    def _sequence(self, node: Any, path: str, depth: int) -> list[Any]:
        if node.tag != _SEQ_TAG:
            raise SpecError(path or "spec", f"has a non-standard tag {node.tag!r}")
        out = []
        for i, item in enumerate(node.value):
            where = f"{path}[{i}]"
            self.lines.setdefault(where, item.start_mark.line + 1)
            out.append(self.value(item, where, depth + 1))
        return out

    def _mapping(self, node: Any, path: str, depth: int) -> dict[Any, Any]:
        if node.tag != _MAP_TAG:
            raise SpecError(path or "spec", f"has a non-standard tag {node.tag!r}")
        mapping: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                raise SpecError(path or "spec", "uses a merge key (<<); write the keys out")
            key = self.value(key_node, path, depth + 1)
            if isinstance(key, (list, dict)):
                raise SpecError(path or "spec", "has a key that is not a scalar", key)
            where = f"{path}.{key}" if path else str(key)
            if key in mapping:
                exc = SpecError(
                    where,
                    f"is defined twice (lines {self.lines.get(where, '?')} and "
                    f"{key_node.start_mark.line + 1}); remove one",
                )
                exc.line = key_node.start_mark.line + 1
                raise exc
            self.lines[where] = key_node.start_mark.line + 1
            mapping[key] = self.value(value_node, where, depth + 1)
        return mapping

    def _scalar(self, node: Any, path: str) -> Any:
        import yaml

        # As the spec reader: `off` is text, `15:00` and `010` are refused, not 900 and 8;
        # each such value is reported with its line, all of them in one pass.
        try:
            check_plain_scalar(node, path or "spec")
        except SpecError as exc:
            exc.line = node.start_mark.line + 1
            self.misread.append(exc)
            return node.value
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            raise SpecError(path or "spec", f"is not a plain YAML value: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _check_depth(text: str | bytes) -> None:
    """Refuse deep nesting and too many nodes on the event stream, before the composer (recursive, in C with
    libyaml: a few hundred thousand brackets crash the interpreter) ever sees it."""
    import yaml

    depth = 0
    for count, event in enumerate(yaml.parse(text, Loader=_loader_class())):
        if count > MAX_NODES:
            raise SpecError(
                "spec", f"has more than {MAX_NODES} YAML nodes; a training file is a page of settings"
            )
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                exc = SpecError("spec", f"is nested deeper than {MAX_DEPTH} levels")
                mark = event.start_mark
                exc.line = mark.line + 1 if mark is not None else None
                raise exc
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def load_mapping(text: str | bytes) -> tuple[dict[str, Any], dict[str, int]]:
    """The top-level mapping of a YAML document and the line (1-based) of each key path.

    Paths use the spec's error syntax: ``cluster.worker.replicas``, ``cluster.args[1]``.
    Every refusal is a :class:`SpecError` (field ``spec`` for whole-file problems).
    """
    import yaml

    size = len(text)
    if size > MAX_BYTES:
        raise SpecError("spec", f"is larger than {MAX_BYTES} bytes ({size})")
    try:
        _check_depth(text)
    except yaml.YAMLError as exc:
        raise parser_error(exc) from None
    loader = _loader_class()(text)
    try:
        try:
            root = loader.get_single_node()
        except (yaml.YAMLError, RecursionError) as exc:
            raise parser_error(exc) from None
        if root is None:
            raise SpecError("spec", "is empty; a training file is a YAML mapping")
        builder = _Builder(loader)
        data = builder.value(root, "", 0)
        raise_misread(builder.misread)
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise SpecError("spec", "must be a YAML mapping", type(data).__name__)
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise SpecError("spec", "keys must be strings", bad[0])
    return data, builder.lines
