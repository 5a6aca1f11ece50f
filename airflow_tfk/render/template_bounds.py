"""Time and size bounds on rendering a template of a template directory.

Jinja's sandbox stops a template from reaching code, not from working forever: two nested
loops over ``range(10000)`` run 10^8 times, a macro that calls itself twice per level
doubles its output per level, and ``'a'.ljust(10**10)`` asks for 10 GB. A template
directory comes from a repository, so its templates get a budget per render
(:class:`Budget`): steps, CPU time and characters printed.

Where the budget is spent, each place one that a template cannot avoid:

- every loop iteration (each ``for`` iterable is wrapped when the template is parsed),
  every call, attribute and item lookup of the sandbox, every filter;
- every printed chunk, in a macro, a ``set`` block or a ``call`` block as well as at the
  top (each ``Output`` node is counted when the template is parsed), so the memory the
  buffers hold is bounded by :data:`MAX_OUTPUT`;
- and each value a filter, a call, ``~`` or ``+`` makes is at most :data:`MAX_VALUE`
  characters or items, checked before the allocation where its size is known beforehand
  (widths, ``join``, ``replace``, ``*`` and ``%`` are refused on text).

The CPU time is checked every few steps with the thread's own clock, so a busy machine does
not make a render fail; the time the garbage collector spends during a render is not the
template's either (a full collection of a large process, run by whichever allocation comes
next, took 0.75 CPU seconds in CI) and is given back to the budget.
"""

from __future__ import annotations

import contextvars
import gc
import re
import string
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, cast

import jinja2
import jinja2.nodes as nodes
import jinja2.sandbox

#: steps of one render: a built-in template takes at most a few hundred (150 for the Job of
#: 600 workers); a nested loop meets the bound in a fraction of a CPU-second
MAX_STEPS = 100_000
#: CPU seconds of one render: a built-in template renders in about a millisecond, but a
#: loaded 2-core machine charged 0.25 s to a first render with a user directory (the steps
#: bound, deterministic, is what stops a loop; this one stops what steps do not count)
MAX_CPU_SECONDS = 0.75
#: characters printed by one render, counted everywhere they are printed (a Kubernetes
#: object is at most about 1.5 MB; a macro's output is printed again by its caller)
MAX_OUTPUT = 4 * 2**20
#: characters of one value a template makes
MAX_VALUE = 2**20
#: items of one list or mapping a template makes, counted as a dump visits them
MAX_ITEMS = 100_000
#: parsed nodes of one template: 3.5 times the largest built-in (_macros.yaml.j2, 426);
#: compiling costs about 0.13 CPU-ms a node
MAX_TEMPLATE_NODES = 1_500
#: levels of nesting of one template's nodes (the built-ins: at most 8)
MAX_TEMPLATE_DEPTH = 50
#: ``{{`` and ``{%`` of one template, counted before it is lexed (the built-ins: at most 105)
MAX_TEMPLATE_TAGS = 500
_CHECK_CLOCK_EVERY = 256
_MAX_INT_BITS = 256
_MAX_POWER = 64


class TemplateBoundError(jinja2.sandbox.SecurityError):
    """A render spent more than its budget (steps, CPU time, characters)."""


@dataclass
class Budget:
    """What one render has spent."""

    deadline: float
    steps: int = 0
    output: int = 0
    gc_started: float | None = None

    def step(self, n: int = 1, *, clock: bool = False) -> None:
        """Spend ``n`` steps; ``clock``: look at the clock now (before a filter or a call,
        whose one step may be long), else every few steps."""
        self.steps += n
        if self.steps > MAX_STEPS:
            raise TemplateBoundError(
                f"the render took more than {MAX_STEPS} steps (loop iterations, calls, lookups)"
            )
        if (clock or self.steps % _CHECK_CLOCK_EVERY < n) and time.thread_time() > self.deadline:
            raise TemplateBoundError(f"the render took more than {MAX_CPU_SECONDS} CPU seconds")

    def printed(self, n: int) -> None:
        self.output += n
        if self.output > MAX_OUTPUT:
            raise TemplateBoundError(f"the render printed more than {MAX_OUTPUT} characters")
        self.step()


_BUDGET: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("tfk_template_budget", default=None)


def _collector_pause(phase: str, info: dict[str, int]) -> None:
    """A ``gc.callbacks`` entry: a collection inside a render moves its deadline by the
    collection's CPU time (the callback runs in the thread whose allocation started it)."""
    budget = _BUDGET.get()
    if budget is None:
        return
    if phase == "start":
        budget.gc_started = time.thread_time()
    elif budget.gc_started is not None:
        budget.deadline += time.thread_time() - budget.gc_started
        budget.gc_started = None


if _collector_pause not in gc.callbacks:
    gc.callbacks.append(_collector_pause)


def _budget() -> Budget:
    budget = _BUDGET.get()
    if budget is None:  # a template of this environment is always rendered by BoundedTemplate.render
        raise TemplateBoundError("a template of a template directory renders only through render()")
    return budget


def within(value: Any, what: str) -> Any:
    if isinstance(value, (str, bytes)) and len(value) > MAX_VALUE:
        raise TemplateBoundError(f"{what} made {len(value)} characters; a value may have at most {MAX_VALUE}")
    if isinstance(value, (list, tuple, dict, set, frozenset)) and len(value) > MAX_ITEMS:
        raise TemplateBoundError(f"{what} made {len(value)} items; a value may have at most {MAX_ITEMS}")
    return value


def _refuse_big_ints(args: Iterable[Any], what: str) -> None:
    for arg in args:
        if isinstance(arg, int) and not isinstance(arg, bool) and abs(arg) > MAX_VALUE:
            raise TemplateBoundError(f"{what}: the number {arg} is over the bound of {MAX_VALUE}")


_PERCENT_SPEC = re.compile(r"%[#0\- +]*(\d*)(?:\.(\d+))?")


def _refuse_wide_specs(text: str, what: str) -> None:
    """Widths and precisions of ``%`` and ``{}`` formats, which allocate before returning."""
    numbers = [n for m in _PERCENT_SPEC.finditer(text) for n in m.groups() if n]
    try:
        numbers += [
            n for _, _, spec, _ in string.Formatter().parse(text) if spec for n in re.findall(r"\d+", spec)
        ]
    except ValueError:
        pass  # not a str.format text; format() itself says so
    if any(len(n) > 7 or int(n) > MAX_VALUE for n in numbers):
        raise TemplateBoundError(f"{what}: a format width or precision is over the bound of {MAX_VALUE}")


def _join_size(items: list[Any], sep: Any) -> int:
    """The length of ``sep.join(items)``, counted up to just over the bound."""
    size = len(str(sep)) * max(len(items) - 1, 0)
    for item in items:
        if size > MAX_VALUE:
            break
        size += len(item) if isinstance(item, str) else len(str(item))
    return size


def _replace_size(text: str, old: str, new: str) -> int:
    count = len(text) + 1 if old == "" else text.count(old)
    return len(text) + count * max(len(new) - len(old), 0)


def _precheck(name: str, value: Any, args: tuple[Any, ...], what: str, *, method: bool) -> tuple[Any, ...]:
    """Refuse, before it allocates, a filter or text method whose result size its
    arguments give away; the arguments to call it with (an iterable to join is read once,
    here, and passed on as a list)."""
    _refuse_big_ints(args, what)
    if name in ("format", "format_map") and isinstance(value, str):
        _refuse_wide_specs(value, what)
    if name == "join" and method and args:  # text.join(items): the text is the separator
        items = list(args[0])
        if _join_size(items, value) > MAX_VALUE:
            raise TemplateBoundError(f"{what} would make more than {MAX_VALUE} characters")
        return (items, *args[1:])
    if name == "replace" and isinstance(value, str) and len(args) >= 2:
        if _replace_size(value, str(args[0]), str(args[1])) > MAX_VALUE:
            raise TemplateBoundError(f"{what} would make more than {MAX_VALUE} characters")
    return args


def _nodes_of(value: Any, cap: int) -> int:
    """Items in ``value``, counted as a dump would visit them (shared lists once per use), up
    to ``cap``: ``[x, x]`` nested 60 times is small in memory and 2^60 items in JSON."""
    seen, stack = 0, [value]
    while stack and seen <= cap:
        current = stack.pop()
        seen += 1
        if isinstance(current, dict):
            stack.extend(current.values())
            seen += len(current)
        elif isinstance(current, (list, tuple, set, frozenset)):
            stack.extend(current)
    return seen


def bounded_filter(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, spending a step, checked before (sizes it can tell) and after (the result)."""
    takes = getattr(fn, "jinja_pass_arg", None)

    @jinja2.pass_context
    def run(context: Any, value: Any = None, *args: Any, **kwargs: Any) -> Any:
        _budget().step(clock=True)
        what = f"the filter {name!r}"
        args = _precheck(name, value, args, what, method=False)
        if name == "join" and not isinstance(value, str):  # items joined by args[0]
            value = list(value)
            if _join_size(value, args[0] if args else kwargs.get("d", "")) > MAX_VALUE:
                raise TemplateBoundError(f"{what} would make more than {MAX_VALUE} characters")
        if _nodes_of(value, MAX_ITEMS) > MAX_ITEMS:
            raise TemplateBoundError(f"{what}: its value has more than {MAX_ITEMS} items")
        passes: dict[object, tuple[object, ...]] = {
            jinja2.utils._PassArg.context: (context,),
            jinja2.utils._PassArg.eval_context: (context.eval_ctx,),
            jinja2.utils._PassArg.environment: (context.environment,),
        }
        return within(fn(*passes.get(takes, ()), value, *args, **kwargs), what)

    return run


@jinja2.pass_context
def _loop(context: Any, iterable: Iterable[Any]) -> Iterator[Any]:
    budget = _budget()
    for item in iterable:
        budget.step()
        yield item


@jinja2.pass_context
def _out(context: Any, value: Any) -> Any:
    _budget().printed(len(value) if isinstance(value, str) else 1)
    return value


@jinja2.pass_context
def _data(context: Any, size: int) -> None:
    _budget().printed(size)


@jinja2.pass_context
def _value(context: Any, value: Any) -> Any:
    _budget().step()
    return within(value, "'~'")


#: filters the parse step adds; their names start with a character a template cannot
#: write in a filter name, so no template calls them itself
INTERNAL_FILTERS = {"tfk-loop": _loop, "tfk-out": _out, "tfk-data": _data, "tfk-value": _value}


def _filter(node: nodes.Node, name: str) -> nodes.Filter:
    return nodes.Filter(node, name, [], [], None, None, lineno=node.lineno)


def _bound_outputs(body: list[nodes.Node]) -> list[nodes.Node]:
    out: list[nodes.Node] = []
    for item in body:
        if isinstance(item, nodes.Output):
            data = sum(len(n.data) for n in item.nodes if isinstance(n, nodes.TemplateData))
            if data:
                size = nodes.Const(data, lineno=item.lineno)
                out.append(nodes.ExprStmt(_filter(size, "tfk-data"), lineno=item.lineno))
            item.nodes = [
                n if isinstance(n, nodes.TemplateData) else _filter(n, "tfk-out") for n in item.nodes
            ]
        out.append(item)
    return out


def bound_tree(tree: nodes.Template) -> None:
    """Spend the budget in the parsed ``tree``: every loop iteration, printed chunk and ``~``."""
    for node in list(tree.find_all(nodes.Node)) + [tree]:
        if isinstance(node, nodes.For):
            node.iter = _filter(node.iter, "tfk-loop")
        for field in node.fields:
            value = getattr(node, field, None)
            if isinstance(value, list):
                value = [_filter(v, "tfk-value") if isinstance(v, nodes.Concat) else v for v in value]
                setattr(node, field, _bound_outputs(value))
            elif isinstance(value, nodes.Concat):
                setattr(node, field, _filter(value, "tfk-value"))


def _check_shape(tree: nodes.Template, shown: str) -> None:
    """Nodes and nesting, before compiling: it costs per node and recurses per level."""
    count, stack = 0, [(cast(nodes.Node, tree), 0)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_TEMPLATE_NODES:
            raise TemplateBoundError(
                f"template {shown!r} has more than {MAX_TEMPLATE_NODES} expressions and statements"
            )
        if depth > MAX_TEMPLATE_DEPTH:
            raise TemplateBoundError(f"template {shown!r} is nested more than {MAX_TEMPLATE_DEPTH} levels")
        stack.extend((child, depth + 1) for child in node.iter_child_nodes())


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class BoundedTemplate(jinja2.Template):
    """A template whose :meth:`render` runs within a fresh :class:`Budget`."""

    def render(self, *args: Any, **kwargs: Any) -> str:
        if _BUDGET.get() is not None:  # a render inside a render shares the outer budget
            return super().render(*args, **kwargs)
        token = _BUDGET.set(Budget(deadline=time.thread_time() + MAX_CPU_SECONDS))
        shown = self.name or "<string>"
        try:
            return super().render(*args, **kwargs)
        except TemplateBoundError as exc:
            raise TemplateBoundError(f"template {shown!r}: {exc}") from None
        except RecursionError:
            raise TemplateBoundError(
                f"template {shown!r}: recursion too deep (a macro or include calls itself)"
            ) from None
        except MemoryError:
            raise TemplateBoundError(f"template {shown!r}: out of memory") from None
        finally:
            _BUDGET.reset(token)


class BoundedSandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox with a budget per render (see the module's docstring)."""

    template_class = BoundedTemplate
    # Intercepted, so also never folded at compile time (``{{ 9**9**9 }}`` would hang there).
    intercepted_binops = frozenset({"*", "**", "%", "//", "+"})

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        shown = name or "<string>"
        tags = source.count("{{") + source.count("{%")
        if tags > MAX_TEMPLATE_TAGS:  # cheap, before the lexer and the parser run
            raise TemplateBoundError(
                f"template {shown!r} has {tags} tags; a template may have {MAX_TEMPLATE_TAGS}"
            )
        try:
            tree = super()._parse(source, name, filename)
        except RecursionError:
            raise TemplateBoundError(f"template {shown!r} is nested too deeply") from None
        _check_shape(tree, shown)
        bound_tree(tree)
        return tree

    def _load_template(self, name: str, globals: Any) -> jinja2.Template:
        """A template an ``import`` or ``include`` reads is compiled on the render's clock;
        that time is not the template's to spend (a template's size bounds it)."""
        budget, start = _BUDGET.get(), time.thread_time()
        try:
            return super()._load_template(name, globals)
        finally:
            if budget is not None:
                budget.deadline += time.thread_time() - start

    def getattr(self, obj: Any, attribute: str) -> Any:
        _budget().step()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        _budget().step()
        return super().getitem(obj, argument)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapper = super().wrap_str_format(value)
        if wrapper is None:
            return None
        text = value.__self__

        def checked(*args: Any, **kwargs: Any) -> str:
            _refuse_wide_specs(text, f"the method {value.__name__!r}")
            _refuse_big_ints([*args, *kwargs.values()], f"the method {value.__name__!r}")
            return within(wrapper(*args, **kwargs), f"the method {value.__name__!r}")

        return checked

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # Jinja's signature
        _budget().step(clock=True)
        owner = getattr(__obj, "__self__", None)
        name = getattr(__obj, "__name__", "")
        what = f"the call of {name or type(__obj).__name__!r}"
        if isinstance(owner, (str, bytes)):
            args = _precheck(name, owner, args, what, method=True)
            _refuse_big_ints(kwargs.values(), what)
        return within(super().call(__context, __obj, *args, **kwargs), what)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        _budget().step()
        if operator != "+" and not (_is_number(left) and _is_number(right)):
            raise TemplateBoundError(
                f"{operator!r} is allowed on numbers only (no repetition or % formatting)"
            )
        if operator == "**" and (abs(right) > _MAX_POWER or abs(left) > 2**_MAX_POWER):
            raise TemplateBoundError(f"'**' is limited to exponents up to {_MAX_POWER}")
        result = within(super().call_binop(context, operator, left, right), f"{operator!r}")
        if isinstance(result, int) and result.bit_length() > _MAX_INT_BITS:
            raise TemplateBoundError(f"the result of {operator!r} has more than {_MAX_INT_BITS} bits")
        return result
