"""How the values a template prints become text, for every template of an operator field.

Jinja writes a printed value with ``str()``. A value with no text spelling of its own gets
Python's repr that way: ``--lr={{ params.lr }}`` with a null Param hands the training
``--lr=None``, a boolean ``True``, a list ``[1, 2]``, a mapping ``{'a': 1}``. So:

- every printed value of a template that makes a text (more than one part, or parts that
  a loop repeats, a block captures or another template joins) goes through
  :func:`text_part`, which refuses such a value with :class:`TemplateValueError`;
- a template of one ``{{ expression }}`` keeps the value itself, rendered natively or not
  (:func:`whole_value`), and the spec checks its type where it lands: a null ``version``
  still means "the newest", a null in ``args`` is refused by the spec, naming the field.

The training-file sandbox (:mod:`airflow_tfk.dagfactory.sandbox`) marks its templates with
:func:`mark_text_parts`; the provider's operators (:mod:`airflow_tfk.templated_fields`) do
it for the templates of a plain Python DAG, in the DAG's own Jinja environment.

Jinja's node classes load on first use: importing this module costs nothing at DAG parse
time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set
from typing import TYPE_CHECKING, Any

from airflow_tfk.errors import TemplateValueError, short_repr

if TYPE_CHECKING:
    import jinja2
    import jinja2.nodes as nodes

#: values with no spelling of their own inside a text: str() would write Python's repr
#: ("None", "True", "b'x'", "[1, 2]", "{'a': 1}", Airflow's ``ParamsDict``) into a command
#: line, a name or a path (a string is a sequence too, and the one exception)
NOT_TEXT = (type(None), bool, bytes, bytearray, Mapping, Set, Sequence)


class WholeValue(Exception):  # noqa: N818 - not an error: how the value leaves the render
    """The value of a template that is one ``{{ expression }}``, leaving a text render."""

    def __init__(self, value: Any) -> None:
        super().__init__(type(value).__name__)
        self.value = value


def has_text_spelling(value: object) -> bool:
    """``str(value)`` is a spelling of the value a reader of the text expects, not
    Python's repr of a structure: strings, numbers, dates; not None, booleans, bytes,
    mappings, sets or sequences."""
    return isinstance(value, str) or not isinstance(value, NOT_TEXT)


def text_part(value: Any) -> Any:
    """``value``, printed inside a text: refused when it has no text spelling."""
    if has_text_spelling(value):
        return value
    kind = "null" if value is None else type(value).__name__
    raise TemplateValueError(
        f"a {kind} value ({short_repr(value)}) printed inside a text would be written as Python's "
        f"{short_repr(str(value))}; give it a string or number, or spell it in the template "
        "('| tojson' for JSON, '| string' for Python's spelling)"
    )


def whole_value(value: Any) -> Any:
    """``value``, the only thing a template prints: one with no text spelling leaves the
    render as itself (:class:`WholeValue`), where a text render would write its repr."""
    if has_text_spelling(value):
        return value
    raise WholeValue(value)


_TEXT_PART = f"{__name__}.text_part"
_WHOLE_VALUE = f"{__name__}.whole_value"


def _call(importname: str, part: nodes.Expr) -> nodes.Expr:
    """``part`` passed through the function ``importname``: an imported name, so the
    template compiles in any environment without adding a filter or a global to it."""
    import jinja2.nodes as nodes

    return nodes.Call(nodes.ImportedName(importname), [part], [], None, None, lineno=part.lineno)


def _joined(tree: nodes.Template) -> bool:
    """The template's output is a text: several parts, or parts a loop repeats, a block
    captures or another template's output joins."""
    import jinja2.nodes as nodes

    parts = sum(len(out.nodes) for out in tree.find_all(nodes.Output))
    if parts > 1:
        return True
    joins = (
        nodes.For,
        nodes.Macro,
        nodes.CallBlock,
        nodes.FilterBlock,
        nodes.AssignBlock,
        nodes.Include,
        nodes.Extends,
        nodes.Block,
    )
    return next(tree.find_all(joins), None) is not None


def mark_text_parts(
    tree: nodes.Template, wrap: Callable[[nodes.Expr], nodes.Expr] | None = None, *, force: bool = False
) -> bool:
    """Route every printed value of a template that makes a text through
    :func:`text_part` (or through ``wrap``, an environment's own way to call it); returns
    whether it did. A template of one ``{{ expression }}`` is left as it is, unless
    ``force`` says its output is a part of another's text.

    The check is in the compiled template, not in a concat: Airflow joins a native render's
    parts itself, with Jinja's ``native_concat``."""
    import jinja2.nodes as nodes

    if not force and not _joined(tree):
        return False
    around = wrap or (lambda part: _call(_TEXT_PART, part))
    for out in tree.find_all(nodes.Output):
        out.nodes = [part if isinstance(part, nodes.TemplateData) else around(part) for part in out.nodes]
    return True


def _call_finalize(tree: nodes.Template) -> None:
    """Each printed value of ``tree`` through the environment's ``finalize`` (the global
    :data:`_FINALIZE`), as Jinja would call it; Jinja's own call is then switched off."""
    import jinja2.nodes as nodes

    for out in tree.find_all(nodes.Output):
        out.nodes = [
            part
            if isinstance(part, nodes.TemplateData)
            else nodes.Call(nodes.Name(_FINALIZE, "load"), [part], [], None, None, lineno=part.lineno)
            for part in out.nodes
        ]


def mark_template(tree: nodes.Template) -> None:
    """:func:`mark_text_parts`, or, for a template of one ``{{ expression }}``, its value
    passed through :func:`whole_value`."""
    import jinja2.nodes as nodes

    if mark_text_parts(tree):
        return
    for out in tree.find_all(nodes.Output):
        out.nodes = [
            part if isinstance(part, nodes.TemplateData) else _call(_WHOLE_VALUE, part) for part in out.nodes
        ]


#: the global through which a marked template calls its environment's ``finalize``
_FINALIZE = "_tfk_finalize"


def _marking_overlay(env: jinja2.Environment) -> jinja2.Environment:
    """An overlay of ``env`` (its loader, filters, globals, undefined, class) whose loaded
    templates (``include``, ``import``, ``extends``) are marked as parts of a text, and
    whose ``finalize``, if ``env`` has one, is called by the templates themselves, before
    the check: it spells values its own way (``None`` as ``""``, say), and the check reads
    what it made. ``env`` itself is not changed."""
    finalize = env.finalize
    overlay = env.overlay(finalize=None) if finalize is not None else env.overlay()
    if finalize is not None:
        overlay.globals = {**env.globals, _FINALIZE: finalize}
    parse = overlay._parse

    def parse_loaded(source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = parse(source, name, filename)
        if finalize is not None:
            _call_finalize(tree)
        mark_text_parts(tree, force=True)
        return tree

    overlay._parse = parse_loaded  # type: ignore[method-assign]
    return overlay


def render(env: jinja2.Environment, source: str, render_template: Callable[[jinja2.Template], Any]) -> Any:
    """``source`` compiled with its printed values marked (:func:`mark_template`) in an
    overlay of ``env`` (:func:`_marking_overlay`), then rendered by ``render_template``
    (Airflow's native or text render). An environment that marks its own templates
    (``marks_text_parts``, the training-file sandbox) compiles ``source`` itself.

    Raises :class:`TemplateValueError` with ``template`` set to ``source``."""
    try:
        if getattr(env, "marks_text_parts", False):
            return render_template(env.from_string(source))
        tree = env.parse(source)
        if env.finalize is not None:
            _call_finalize(tree)
        mark_template(tree)
        try:
            return render_template(_marking_overlay(env).from_string(tree))
        except WholeValue as whole:
            return whole.value
    except TemplateValueError as exc:
        if exc.template is None:
            exc.template = source
        raise


def render_file(env: jinja2.Environment, name: str, render_template: Callable[[jinja2.Template], Any]) -> Any:
    """The template file ``name`` (an operator's ``template_ext``), loaded by ``env``'s
    loader and marked as a text (a file is one), then rendered by ``render_template``."""
    try:
        if getattr(env, "marks_text_parts", False):
            return render_template(env.get_template(name))
        return render_template(_marking_overlay(env).get_template(name))
    except TemplateValueError as exc:
        if exc.template is None:
            exc.template = name
        raise
