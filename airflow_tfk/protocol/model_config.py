"""TF Serving's model config file (``--model_config_file``): the text proto this project
writes, and a parser for it.

Shared by the provider (it writes the version policy) and the local model server
(:mod:`airflow_tfk.runtime.model_server`, which reads it), so it imports neither Airflow
nor TensorFlow. The parser reads the general text-proto syntax (messages, scalars,
repeated fields, comments) and maps just the fields this project writes::

    model_config_list {
      config {
        name: "digits"
        base_path: "/tfk/models/digits"
        model_platform: "tensorflow"
        model_version_policy { specific { versions: 3 versions: 4 } }
        version_labels { key: "stable" value: 3 }
      }
    }

A model without ``specific`` versions follows TF Serving's default policy (the latest
version only).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["ModelConfig", "ModelServerConfig", "ConfigSyntaxError", "parse", "STABLE_LABEL"]

#: the version label that names the serving version
STABLE_LABEL = "stable"

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+|\#[^\n]*)
  | (?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<num>-?\d+)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<punct>[{}:<>;,\[\]])
""",
    re.VERBOSE,
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "'": "'", "\\": "\\"}


class ConfigSyntaxError(ValueError):
    """The file is not a model config this parser understands."""


@dataclass(frozen=True)
class ModelConfig:
    """One ``config { ... }`` entry.

    :param name: model name (the ``NAME`` of ``/v1/models/NAME``).
    :param base_path: directory holding ``<version>/saved_model.pb``.
    :param versions: the ``specific`` version policy; empty means TF Serving's default
        (the latest version).
    :param labels: version labels, e.g. ``{"stable": 3}``.
    """

    name: str
    base_path: str
    platform: str = "tensorflow"
    versions: tuple[int, ...] = ()
    labels: Mapping[str, int] = field(default_factory=dict)

    def with_versions(self, versions: Any, labels: Mapping[str, int] | None = None) -> ModelConfig:
        vs = tuple(sorted({int(v) for v in versions}))
        return replace(self, versions=vs, labels=dict(self.labels if labels is None else labels))

    @property
    def stable(self) -> int | None:
        return self.labels.get(STABLE_LABEL)


@dataclass(frozen=True)
class ModelServerConfig:
    models: tuple[ModelConfig, ...] = ()

    def get(self, name: str) -> ModelConfig | None:
        return next((m for m in self.models if m.name == name), None)

    def put(self, model: ModelConfig) -> ModelServerConfig:
        """This config with ``model`` added or replacing the entry of the same name."""
        others = tuple(m for m in self.models if m.name != model.name)
        return ModelServerConfig(tuple(sorted((*others, model), key=lambda m: m.name)))

    def to_text(self) -> str:
        lines = ["model_config_list {"]
        for m in self.models:
            lines += [
                "  config {",
                f"    name: {_quote(m.name)}",
                f"    base_path: {_quote(m.base_path)}",
                f"    model_platform: {_quote(m.platform)}",
            ]
            if m.versions:
                lines.append("    model_version_policy {")
                lines.append("      specific {")
                lines += [f"        versions: {v}" for v in m.versions]
                lines += ["      }", "    }"]
            for key, value in sorted(m.labels.items()):
                lines += [
                    "    version_labels {",
                    f"      key: {_quote(key)}",
                    f"      value: {int(value)}",
                    "    }",
                ]
            lines.append("  }")
        lines.append("}")
        return "\n".join(lines) + "\n"


def _quote(text: str) -> str:
    out = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{out}"'


def _unquote(token: str) -> str:
    body = token[1:-1]
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), body)


def _tokens(text: str) -> Iterator[tuple[str, str]]:
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ConfigSyntaxError(f"unexpected {text[pos : pos + 20]!r} at offset {pos}")
        pos = m.end()
        kind = m.lastgroup or ""
        if kind != "ws":
            yield kind, m.group()


def _message(tokens: list[tuple[str, str]], i: int, closer: str | None) -> tuple[dict, int]:
    """Parse fields until ``closer``; every field maps to a list of values."""
    out: dict[str, list[Any]] = {}
    while i < len(tokens):
        kind, tok = tokens[i]
        if closer is not None and tok == closer:
            return out, i + 1
        if kind != "ident":
            raise ConfigSyntaxError(f"expected a field name, got {tok!r}")
        i += 1
        if i < len(tokens) and tokens[i][1] == ":":
            i += 1
        if i >= len(tokens):
            raise ConfigSyntaxError(f"field {tok} has no value")
        values, i, separated = _values(tokens, i, tok)
        out.setdefault(tok, []).extend(values)
        if separated and i < len(tokens) and tokens[i][1] in (";", ","):
            i += 1
    if closer is not None:
        raise ConfigSyntaxError(f"missing {closer!r}")
    return out, i


def _values(tokens: list[tuple[str, str]], i: int, field: str) -> tuple[list[Any], int, bool]:
    """The value(s) of ``field`` starting at ``i``; the index after them; and whether a
    ``;``/``,`` separator may follow (not after a run of adjacent strings)."""
    vkind, value = tokens[i]
    if value in ("{", "<"):
        sub, i = _message(tokens, i + 1, "}" if value == "{" else ">")
        return [sub], i, True
    if vkind == "str":
        parts = []
        while i < len(tokens) and tokens[i][0] == "str":  # adjacent strings concatenate
            parts.append(_unquote(tokens[i][1]))
            i += 1
        return ["".join(parts)], i, False
    if vkind in ("num", "ident"):
        return [int(value) if vkind == "num" else value], i + 1, True
    if value == "[":
        i += 1
        items = []
        while tokens[i][1] != "]":
            if tokens[i][1] != ",":
                items.append(int(tokens[i][1]))
            i += 1
        return items, i + 1, True
    raise ConfigSyntaxError(f"field {field}: unexpected {value!r}")


def _one(msg: dict, key: str, default: Any = None) -> Any:
    values = msg.get(key) or []
    return values[-1] if values else default


def parse(text: str) -> ModelServerConfig:
    """Parse a model config file; raises :class:`ConfigSyntaxError`."""
    tree, _ = _message(list(_tokens(text)), 0, None)
    models = []
    for lst in tree.get("model_config_list", []):
        for cfg in lst.get("config", []):
            name, base = _one(cfg, "name"), _one(cfg, "base_path")
            if not isinstance(name, str) or not isinstance(base, str):
                raise ConfigSyntaxError("every config needs a string name and base_path")
            versions: list[int] = []
            for policy in cfg.get("model_version_policy", []):
                for specific in policy.get("specific", []):
                    versions += [int(v) for v in specific.get("versions", [])]
            labels = {str(_one(lb, "key")): int(_one(lb, "value")) for lb in cfg.get("version_labels", [])}
            models.append(
                ModelConfig(
                    name,
                    base,
                    str(_one(cfg, "model_platform", "tensorflow")),
                    tuple(sorted(set(versions))),
                    labels,
                )
            )
    return ModelServerConfig(tuple(models))
