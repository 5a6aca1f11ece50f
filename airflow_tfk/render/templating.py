"""The sandbox every template of the project renders in (training, TF Serving, TensorBoard).

One place decides how a template may turn values into text, so the rules hold for the
training templates and the serving ones alike:

- templates run in ``ImmutableSandboxedEnvironment`` with ``StrictUndefined``;
- every value reaches the text through the ``tojson`` filter (a JSON scalar, list or
  mapping is also a YAML flow node), and a ``finalize`` hook rejects any other value a
  template tries to print, so an override template cannot splice raw text by accident;
- the JSON is made YAML-exact: characters YAML would fold, reject or split on (NEL,
  U+2028/2029, C1 controls, BOM, lone surrogates) are written as ``\\uXXXX`` escapes;
- :func:`k8s_escape` escapes Kubernetes' ``$(VAR)`` expansion, so a process sees exactly
  the string the DAG author wrote.

Jinja2 and YAML load on first use: importing this module costs nothing at DAG parse time.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

# JSON escapes nothing of these, YAML reads them as line breaks or rejects them, and
# str.splitlines() (used by Jinja's indent filter) splits on some of them.
_YAML_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff\ud800-\udfff]")
# Kubernetes expands $(VAR) and turns $$ into $ in command, args and env values.
_K8S_OPERATOR = re.compile(r"\$(?=[$(])")


class RenderError(RuntimeError):
    """A template produced something that is not the object it was meant to be."""


class _Json(str):
    """Text produced by the ``tojson`` filter: the only values templates may print."""

    __slots__ = ()


class _Fragment(str):
    """Template-made text (a macro's output) that a template prints on purpose."""

    __slots__ = ()


def _tojson(value: Any) -> _Json:
    text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    return _Json(_YAML_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text))


def _fragment(value: Any) -> _Fragment:
    return _Fragment(value)


def _finalize(value: Any) -> Any:
    if isinstance(value, (_Json, _Fragment)):
        return value
    from jinja2 import TemplateError

    raise TemplateError(
        f"template printed a raw value ({type(value).__name__}); every value must go "
        "through '| tojson' (macro output through '| fragment')"
    )


def k8s_escape(text: str) -> str:
    """Escape ``text`` so Kubernetes' ``$(VAR)`` expansion gives back exactly ``text``."""
    return _K8S_OPERATOR.sub("$$", text)


def template_dirs(template_dir: str | Path | None = None) -> list[Path]:
    """Where templates are looked up, first match wins: the user's dir, then the built-ins."""
    here = Path(__file__).resolve().parents[1]  # the package: airflow_tfk/render/..
    builtin = here / "_templates"
    if not builtin.is_dir():  # a source checkout or an editable install
        builtin = here.parent / "templates"
    dirs = [builtin]
    if template_dir is not None:
        user = Path(template_dir).expanduser().resolve()
        if not user.is_dir():
            raise RenderError(f"template_dir {str(user)!r} is not a directory")
        dirs.insert(0, user)
    return dirs


@functools.lru_cache(maxsize=16)
def template_environment(dirs: tuple[Path, ...]) -> Any:
    """The sandboxed Jinja2 environment every template of this project renders in (training,
    serving, TensorBoard): strict undefined, values printed only through ``tojson``, each
    template read only from its own directory (:mod:`~airflow_tfk.render.template_loader`)
    and each render within a time and size budget (:mod:`~airflow_tfk.render.template_bounds`)."""
    from jinja2 import StrictUndefined

    from airflow_tfk.render.template_bounds import INTERNAL_FILTERS, BoundedSandbox, bounded_filter
    from airflow_tfk.render.template_loader import SHARED_BYTECODE, ConfinedLoader

    env = BoundedSandbox(
        loader=ConfinedLoader(dirs),
        undefined=StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        auto_reload=False,
        bytecode_cache=SHARED_BYTECODE,
        finalize=_finalize,
    )
    found = {**env.filters, "tojson": _tojson, "fragment": _fragment}
    env.filters = {name: bounded_filter(name, f) for name, f in found.items()}
    env.filters.update(INTERNAL_FILTERS)
    return env


def yaml_loader() -> Any:
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)
