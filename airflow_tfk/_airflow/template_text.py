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
:func:`mark_text_parts`; the provider's operators (:mod:`airflow_tfk._airflow.templated_fields`) do
it for the templates of a plain Python DAG, in the DAG's own Jinja environment.

Jinja's node classes load on first use: importing this module costs nothing at DAG parse
time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from typing import TYPE_CHECKING, Any

from airflow_tfk.core.errors import TemplateValueError, short_repr

if TYPE_CHECKING:
    import jinja2
    import jinja2.nodes as nodes

#: values with no spelling of their own inside a text: str() would write Python's repr
#: ("None", "True", "b'x'", "[1, 2]", "{'a': 1}", Airflow's ``ParamsDict``) into a command
#: line, a name or a path (a string is a sequence too, and the one exception)
NOT_TEXT = (type(None), bool, bytes, bytearray, Mapping, Set, Sequence)


class WholeValue(Exception):  # not an error: how the value leaves the render
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


def text_items(value: Any) -> Any:
    """The items ``join`` writes with ``str()``, each a part of its text (:func:`text_part`)."""
    if isinstance(value, str) or not isinstance(value, Iterable):
        return value
    items = list(value)
    for item in items:
        text_part(item)
    return items


def text_case(value: Any) -> Any:
    """The input of a case filter: a boolean spelt ``true``/``false`` (``| lower``) is
    the author's spelling of it; anything else as :func:`text_part`."""
    return value if isinstance(value, bool) else text_part(value)


def text_operands(value: Any) -> Any:
    """What ``'...%s...' % value`` writes into a text: a tuple's items, or the value
    itself, each a part of it (:func:`text_part`)."""
    for part in value if isinstance(value, tuple) else (value,):
        text_part(part)
    return value


def text_values(value: Any) -> Any:
    """What ``'...%(name)s...' % value`` or ``str.format_map`` writes into a text: a
    mapping's values (:func:`text_part`)."""
    for part in value.values() if isinstance(value, Mapping) else (value,):
        text_part(part)
    return value


_TEXT_PART = f"{__name__}.text_part"
_WHOLE_VALUE = f"{__name__}.whole_value"

#: filters that spell a boolean as its author chose (``{{ params.debug | lower }}``)
CASE_FILTERS = frozenset({"capitalize", "lower", "title", "upper"})
#: Jinja's filters that write their input with ``str()`` (``format`` its arguments): their
#: text spells a null or a list as printing it would. ``string`` and ``pprint`` ask for
#: Python's spelling by name, and keep it.
SPELLING_FILTERS = frozenset(
    {
        "capitalize",
        "center",
        "e",
        "escape",
        "forceescape",
        "format",
        "indent",
        "lower",
        "replace",
        "safe",
        "striptags",
        "title",
        "trim",
        "truncate",
        "upper",
        "urlize",
        "wordwrap",
    }
)


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


def _is_text_const(node: nodes.Node) -> bool:
    import jinja2.nodes as nodes

    return isinstance(node, (nodes.TemplateData, nodes.Const)) and isinstance(
        getattr(node, "data", getattr(node, "value", None)), str
    )


_Wrap = Callable[[str, "nodes.Expr"], "nodes.Expr"]


def _mark_arguments(node: nodes.Filter | nodes.Call, wrap: _Wrap) -> None:
    """Each argument of ``node`` (``format``'s, ``replace``'s) a part of its text."""
    node.args = [arg if _is_text_const(arg) else wrap("text_part", arg) for arg in node.args]
    for keyword in node.kwargs:
        keyword.value = wrap("text_part", keyword.value)


def _mark_filter(node: nodes.Filter, wrap: _Wrap) -> None:
    if node.name not in SPELLING_FILTERS and node.name != "join":
        return
    if node.name in ("format", "replace"):
        _mark_arguments(node, wrap)
    if node.node is None or _is_text_const(node.node):
        return  # a {% filter %} block's input is its body's output, marked as printed
    if node.name in CASE_FILTERS:
        node.node = wrap("text_case", node.node)
    elif node.name != "join":
        node.node = wrap("text_part", node.node)
    elif len(node.args) < 2 and not any(k.key == "attribute" for k in node.kwargs):
        node.node = wrap("text_items", node.node)  # (with an attribute, the items are not printed)


def mark_spelled_values(tree: nodes.Template, check: _Wrap | None = None) -> None:
    """Route every value an expression writes into a text of its own through a check, as
    printing it would be: the operands of ``~``, the input of a filter that spells it
    (:data:`SPELLING_FILTERS`) and ``format``'s arguments, the items ``join`` joins, what
    ``'...' % value`` and ``'...'.format(...)`` write. ``--lr={{ params.lr }}`` is refused
    with a null Param, and so is ``{{ '--lr=' ~ params.lr }}``: both make the text
    ``--lr=None``. ``check(name, part)`` wraps ``part`` in the function ``name`` of this
    module (:func:`text_part`, :func:`text_case`, :func:`text_items`,
    :func:`text_operands`, :func:`text_values`); by default an imported call."""
    import jinja2.nodes as nodes

    wrap = check or (lambda name, part: _call(f"{__name__}.{name}", part))
    for node in list(tree.find_all((nodes.Concat, nodes.Filter, nodes.Mod, nodes.Call))):
        if isinstance(node, nodes.Concat):
            node.nodes = [part if _is_text_const(part) else wrap("text_part", part) for part in node.nodes]
        elif isinstance(node, nodes.Filter):
            _mark_filter(node, wrap)
        elif isinstance(node, nodes.Mod) and _is_text_const(node.left):
            named = "%(" in node.left.value  # type: ignore[attr-defined]
            node.right = wrap("text_values" if named else "text_operands", node.right)
        elif isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr):
            if node.node.attr == "format":
                _mark_arguments(node, wrap)
            elif node.node.attr == "format_map" and node.args:
                node.args = [wrap("text_values", node.args[0]), *node.args[1:]]


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
        mark_spelled_values(tree)
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
        mark_spelled_values(tree)
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
