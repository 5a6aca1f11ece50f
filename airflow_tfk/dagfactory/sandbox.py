"""The template language of training files, and the sandbox every such template renders in.

A training file is data: the people who may edit one are not always trusted to run code on
the workers. Airflow's own ``NativeEnvironment`` (what ``render_template_as_native_obj=True``
selects) is not sandboxed at all, and its ``SandboxedEnvironment`` allows single-underscore
attributes, module attributes and every filter and method; a template such as
``{{ cycler.__init__.__globals__.os.system('id') }}`` ran code there. So:

- :class:`SandboxedDAG` is a DAG whose template environment is always
  :class:`SandboxedNativeEnvironment`: Jinja's immutable sandbox with native results, no
  template loader (no ``include``), no globals, and a short list of filters;
- every template that environment compiles is first checked by :func:`check_tree`: only
  ``{{ expressions }}`` and ``{% if %}``, only the context names of :data:`NAMES`, only the
  filters of :data:`FILTERS` and the methods of :data:`METHODS`, no ``_`` attribute;
- at render time the sandbox also refuses ``_`` attributes, attributes that are modules or
  classes, calls of classes, sequence repetition and huge powers, whatever the text said;
- and every filter and method result is bounded (:data:`MAX_RESULT`): each allowed filter
  grows its input by a constant at most, but a chain of them (``|list|string`` five times
  per link, ``|tojson`` doubling quotes) or ``join`` of a text's characters by the text
  itself multiplies, so a 200-character template could ask the worker for terabytes.

:func:`check_template` runs the same check when a training file is read, so the file's
error names the field, and ``airflow-tfk validate`` refuses what the worker would.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import jinja2
import jinja2.filters
import jinja2.nativetypes
import jinja2.nodes as nodes
import jinja2.sandbox
from airflow.sdk import DAG

from airflow_tfk._airflow.template_text import (
    mark_spelled_values,
    mark_text_parts,
    text_case,
    text_items,
    text_operands,
    text_values,
)
from airflow_tfk._airflow.template_text import text_part as _text_part
from airflow_tfk.core.errors import SpecError
from airflow_tfk.core.errors import TemplateValueError as TemplateValueError

if TYPE_CHECKING:
    from jinja2.runtime import Context

#: the Airflow context names a training file's template may read
NAMES = frozenset(
    {
        "params",
        "run_id",
        "ds",
        "ds_nodash",
        "ts",
        "ts_nodash",
        "ts_nodash_with_tz",
        "logical_date",
        "data_interval_start",
        "data_interval_end",
    }
)
#: filters: none of them grows its input by a factor given in the template
FILTERS = frozenset(
    {
        "default",
        "d",
        "int",
        "float",
        "string",
        "lower",
        "upper",
        "trim",
        "tojson",
        "length",
        "count",
        "first",
        "last",
        "join",
        "round",
        "abs",
        "min",
        "max",
        "list",
        "ds",
        "ds_nodash",
        "ts",
        "ts_nodash",
        "ts_nodash_with_tz",
    }
)
#: methods a template may call (on a Param mapping, a date, a string)
METHODS = frozenset(
    {
        "get",
        "keys",
        "values",
        "items",
        "strftime",
        "isoformat",
        "add",
        "subtract",
        "date",
        "lower",
        "upper",
        "strip",
        "lstrip",
        "rstrip",
        "startswith",
        "endswith",
        "split",
    }
)
_EXPRESSIONS = (
    nodes.Name,
    nodes.Const,
    nodes.Getattr,
    nodes.Getitem,
    nodes.Slice,
    nodes.Filter,
    nodes.Test,
    nodes.Call,
    nodes.Keyword,
    nodes.Tuple,
    nodes.List,
    nodes.Dict,
    nodes.Pair,
    nodes.CondExpr,
    nodes.Concat,
    nodes.Compare,
    nodes.Operand,
    nodes.BinExpr,
    nodes.UnaryExpr,
)
_STATEMENTS = (nodes.Template, nodes.Output, nodes.TemplateData, nodes.If)
_MAX_POWER = 64
_MAX_INT_BITS = 256
#: characters (or items) one filter or method may produce: twice what one argument or
#: environment value of a process may hold (Linux's MAX_ARG_STRLEN), so only an amplifying
#: template meets it, and the last step before a refusal stays cheap
MAX_RESULT = 1 << 18
_STATEMENT_WORDS = {
    "For": "for",
    "Macro": "macro",
    "CallBlock": "call",
    "FilterBlock": "filter",
    "Assign": "set",
    "AssignBlock": "set",
    "With": "with",
    "Include": "include",
    "Import": "import",
    "FromImport": "from ... import",
    "Extends": "extends",
    "Block": "block",
    "ExprStmt": "do",
    "Scope": "scope",
}


class TemplateRefused(jinja2.sandbox.SecurityError):
    """A template uses what training-file templates may not (a statement, a name, a filter,
    a method, an internal attribute). Raised before the template is compiled."""


def _refuse(node: nodes.Node, what: str) -> TemplateRefused:
    return TemplateRefused(f"line {node.lineno}: {what}")


def _check_call(node: nodes.Call) -> None:
    if not isinstance(node.node, nodes.Getattr):
        raise _refuse(
            node, "only method calls are allowed, such as params.get('x') or logical_date.strftime('%Y')"
        )
    if node.node.attr not in METHODS:
        raise _refuse(
            node, f"the method {node.node.attr!r} is not allowed (allowed: {', '.join(sorted(METHODS))})"
        )
    if node.dyn_args is not None or node.dyn_kwargs is not None:
        raise _refuse(node, "*args and **kwargs are not allowed")


def _check_access(node: nodes.Node) -> None:
    if isinstance(node, nodes.Name) and node.name not in NAMES:
        raise _refuse(node, f"unknown name {node.name!r} (allowed: {', '.join(sorted(NAMES))})")
    if isinstance(node, nodes.Getattr) and node.attr.startswith("_"):
        raise _refuse(node, f"the attribute {node.attr!r} is internal")
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
        if isinstance(node.arg.value, str) and node.arg.value.startswith("_"):
            raise _refuse(node, f"the key {node.arg.value!r} is internal")


def _is_text(node: nodes.Node) -> bool:
    if isinstance(node, nodes.Const):
        return isinstance(node.value, (str, list, tuple))
    return isinstance(node, (nodes.List, nodes.Tuple, nodes.Concat))


def _check_operator(node: nodes.Node) -> None:
    """What the render-time sandbox would refuse, refused already when the text shows it."""
    if isinstance(node, (nodes.Mul, nodes.Mod)) and (_is_text(node.left) or _is_text(node.right)):
        raise _refuse(node, f"{node.operator!r} is allowed on numbers only (no repetition or % formatting)")
    if isinstance(node, nodes.Pow) and (
        isinstance(node.left, nodes.Pow) or isinstance(node.right, nodes.Pow)
    ):
        raise _refuse(node, "'**' of a power is not allowed")
    if isinstance(node, nodes.Pow) and isinstance(node.right, nodes.Const):
        if not isinstance(node.right.value, (int, float)) or abs(node.right.value) > _MAX_POWER:
            raise _refuse(node, f"'**' is limited to exponents up to {_MAX_POWER}")


def _check_node(node: nodes.Node) -> None:
    if isinstance(node, _STATEMENTS):
        return
    if not isinstance(node, _EXPRESSIONS):
        word = _STATEMENT_WORDS.get(type(node).__name__)
        kind = f"{{% {word} %}}" if word else type(node).__name__
        raise _refuse(
            node, f"{kind} is not allowed: training-file templates use {{{{ expressions }}}} and {{% if %}}"
        )
    _check_access(node)
    _check_operator(node)
    if isinstance(node, nodes.Filter) and node.name not in FILTERS:
        raise _refuse(
            node, f"the filter {node.name!r} is not allowed (allowed: {', '.join(sorted(FILTERS))})"
        )
    if isinstance(node, nodes.Call):
        _check_call(node)


def _walk(node: nodes.Node) -> Iterator[nodes.Node]:
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(list(current.iter_child_nodes())))


def check_tree(tree: nodes.Template) -> None:
    """Refuse what training-file templates may not use (raises :class:`TemplateRefused`)."""
    for node in _walk(tree):
        _check_node(node)


def _within(value: Any, what: str) -> Any:
    if isinstance(value, (str, bytes, list, tuple, dict)) and len(value) > MAX_RESULT:
        raise jinja2.sandbox.SecurityError(
            f"{what} made {len(value)} characters or items; a template may make at most {MAX_RESULT}"
        )
    return value


def _bounded(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with its result checked. Taking the context also keeps Jinja's compiler from
    folding a filter of constants at compile time, where a chain would be evaluated once per
    link, outside any bound."""
    takes = getattr(fn, "jinja_pass_arg", None)

    @jinja2.pass_context
    def run(context: Context, *args: Any, **kwargs: Any) -> Any:
        passes: dict[object, tuple[object, ...]] = {
            jinja2.utils._PassArg.context: (context,),
            jinja2.utils._PassArg.eval_context: (context.eval_ctx,),
            jinja2.utils._PassArg.environment: (context.environment,),
        }
        first = passes.get(takes, ())
        return _within(fn(*first, *args, **kwargs), f"the filter {name!r}")

    return run


@jinja2.pass_eval_context
def _join(eval_ctx: Any, value: Iterable[Any], d: Any = "", attribute: Any = None) -> str:
    """Jinja's ``join``, sized before it allocates: its separator is repeated once per item."""
    items = list(value)
    size = len(str(d)) * max(len(items) - 1, 0) + sum(len(i) for i in items if isinstance(i, str))
    if size > MAX_RESULT:
        raise jinja2.sandbox.SecurityError(
            f"the filter 'join' would make {size} characters; a template may make at most {MAX_RESULT}"
        )
    return str(jinja2.filters.do_join(eval_ctx, items, d, attribute))


class _AllowedContext(jinja2.runtime.Context):
    """The Airflow context, seen through :data:`NAMES` only (``var``, ``conn``, ``ti``,
    ``macros`` and the rest are undefined here, even to a template built by hand)."""

    def resolve_or_missing(self, key: str) -> Any:
        if key not in self.vars and key not in NAMES:
            return jinja2.utils.missing
        return super().resolve_or_missing(key)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_TEXT_FILTER = "tfk_text_part"


def _mark_text_parts(tree: nodes.Template) -> None:
    """Each printed value of a template that makes a text through ``text_part``
    (:func:`airflow_tfk._airflow.template_text.mark_text_parts`), as a filter: a call would go
    through the sandbox's own ``call`` and its result bound, which are for the template's
    calls, not for this check."""
    mark_spelled_values(
        tree, lambda name, part: nodes.Filter(part, f"tfk_{name}", [], [], None, None, lineno=part.lineno)
    )
    mark_text_parts(
        tree, lambda part: nodes.Filter(part, _TEXT_FILTER, [], [], None, None, lineno=part.lineno)
    )


class SandboxedNativeEnvironment(
    jinja2.nativetypes.NativeEnvironment, jinja2.sandbox.ImmutableSandboxedEnvironment
):
    """Jinja's immutable sandbox with native results (``"{{ params.workers }}"`` renders
    the int the form gave), restricted to the training-file template language."""

    context_class = _AllowedContext
    #: every template it compiles is marked (:func:`_mark_text_parts`) already
    marks_text_parts = True
    # Intercepted, so also never folded at compile time (``{{ 9**9**9 }}`` would hang there).
    intercepted_binops = frozenset({"*", "**", "%", "//"})

    def __init__(self, undefined: type[jinja2.Undefined] = jinja2.StrictUndefined) -> None:
        from airflow.sdk.definitions._internal.templater import FILTERS as AIRFLOW_FILTERS

        super().__init__(undefined=undefined, cache_size=0, autoescape=False)
        self.globals.clear()
        found = {**self.filters, **AIRFLOW_FILTERS, "join": _join}
        self.filters = {name: _bounded(name, f) for name, f in found.items() if name in FILTERS}
        self.tests = dict(self.tests)
        # not in FILTERS: a template cannot name it; _mark_text_parts adds it after the check
        self.filters[_TEXT_FILTER] = _text_part
        self.filters["tfk_text_items"] = text_items
        self.filters["tfk_text_case"] = text_case
        self.filters["tfk_text_operands"] = text_operands
        self.filters["tfk_text_values"] = text_values

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        check_tree(tree)
        _mark_text_parts(tree)
        return tree

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if isinstance(value, (types.ModuleType, type, types.FrameType, types.CodeType)):
            return False
        return super().is_safe_attribute(obj, attr, value)

    def unsafe_undefined(self, obj: Any, attribute: str) -> jinja2.Undefined:
        # The stock sandbox returns an Undefined, and a native result would carry that
        # object on, unrendered: fail here instead.
        raise jinja2.sandbox.SecurityError(f"access to the attribute {attribute!r} is not allowed")

    def is_safe_callable(self, obj: Any) -> bool:
        return not isinstance(obj, type) and super().is_safe_callable(obj)

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # Jinja's signature
        return _within(super().call(__context, __obj, *args, **kwargs), "a method call")

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if not (_is_number(left) and _is_number(right)):
            raise jinja2.sandbox.SecurityError(f"{operator!r} is allowed on numbers only")
        if operator == "**" and (abs(right) > _MAX_POWER or abs(left) > 2**_MAX_POWER):
            raise jinja2.sandbox.SecurityError(f"'**' is limited to exponents up to {_MAX_POWER}")
        result = super().call_binop(context, operator, left, right)
        if isinstance(result, int) and result.bit_length() > _MAX_INT_BITS:
            raise jinja2.sandbox.SecurityError(
                f"the result of {operator!r} has more than {_MAX_INT_BITS} bits"
            )
        return result


class SandboxedDAG(DAG):
    """A DAG whose templates always render in :class:`SandboxedNativeEnvironment`: the
    task runner, ``airflow tasks render`` and the operators all take the DAG's environment.

    Its ``render_template_as_native_obj`` must stay true: Airflow picks native results by that
    flag, and the environment compiles for native results.
    """

    def get_template_env(self, *, force_sandboxed: bool = False) -> jinja2.Environment:
        return SandboxedNativeEnvironment(undefined=self.template_undefined)


def check_template(text: str, field: str) -> None:
    """Parse one templated string as the worker would; :class:`SpecError` naming ``field``
    for a syntax error or anything the template language refuses."""
    if "{" not in text:
        return  # no Jinja syntax can start without a brace
    try:
        SandboxedNativeEnvironment().parse(text)
    except jinja2.TemplateSyntaxError as exc:
        raise SpecError(field, f"is not a valid template: {exc.message} (line {exc.lineno})") from None
    except TemplateRefused as exc:
        raise SpecError(field, f"template refused: {exc}") from None


def check_templates(value: Any, where: str) -> None:
    """:func:`check_template` on every string in ``value`` (Airflow renders every string of
    a templated field, not only those with ``{{``)."""
    if isinstance(value, str):
        check_template(value, where)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_templates(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_templates(item, f"{where}[{i}]")
