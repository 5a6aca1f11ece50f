"""The template fields of the provider's operators and sensor, rendered so that a value
with no text spelling never reaches a text as Python's repr.

A plain Python DAG renders an operator's fields in the DAG's own Jinja environment (its
macros, filters, search path, undefined, native or text results). Airflow hands that
environment to the operator (the task runner passes the DAG's, a mapped task renders
through the unmapped one's ``_do_render_template_fields``), so the check is here, in the
two methods every one of those paths calls, and not in an environment of our own:

- :meth:`CheckedTemplateFields.render_template` compiles each string of a field in the
  environment it is given, with its printed values marked
  (:func:`airflow_tfk._airflow.template_text.render`): ``--lr={{ params.lr }}`` with a null Param
  is refused, ``{{ params.version }}`` alone keeps its null;
- :meth:`CheckedTemplateFields._do_render_template_fields` turns a refusal into a
  :class:`~airflow_tfk.core.errors.TemplateFieldError` that names the field, the path in it
  and the task.

Nothing is built at DAG parse time: the marking (and Jinja's nodes) load at render time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from airflow_tfk.core.errors import TemplateFieldError, TemplateValueError, short_repr

if TYPE_CHECKING:
    import jinja2


def field_path(value: Any, template: str | None, field: str) -> str:
    """Where in a field's value (as written, before rendering) the string ``template``
    is: ``cluster_spec.args[1]``; the field itself when it is not found."""
    stack: list[tuple[Any, str]] = [(value, field)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if item == template:
                return where
        elif isinstance(item, Mapping):
            stack.extend(reversed([(v, f"{where}.{k}") for k, v in item.items()]))
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed([(v, f"{where}[{i}]") for i, v in enumerate(item)]))
    return field


class CheckedTemplateFields:
    """Mixin of a ``BaseOperator`` subclass (first in its bases): its template fields render
    as Airflow renders them, in the environment Airflow gives, with the printed values of
    every template checked (module docstring)."""

    task_id: str
    template_ext: Any

    def render_template(
        self,
        content: Any,
        context: Any,
        jinja_env: jinja2.Environment | None = None,
        seen_oids: set[int] | None = None,
    ) -> Any:
        if not isinstance(content, str):
            # Collections come back here item by item, and XComArgs resolve as they do.
            return super().render_template(content, context, jinja_env, seen_oids)  # type: ignore[misc]
        from airflow_tfk._airflow import template_text

        env = jinja_env or self.get_template_env()  # type: ignore[attr-defined]

        def render(template: jinja2.Template) -> Any:
            return self._render(template, context)  # type: ignore[attr-defined]

        if self.template_ext and content.endswith(tuple(self.template_ext)):
            return template_text.render_file(env, content, render)  # a subclass's template file
        return template_text.render(env, content, render)

    def _do_render_template_fields(
        self,
        parent: Any,
        template_fields: Iterable[str],
        context: Any,
        jinja_env: jinja2.Environment,
        seen_oids: set[int],
    ) -> None:
        # One field at a time, as Airflow's loop does: a refusal then knows its field.
        for field in template_fields:
            try:
                super()._do_render_template_fields(parent, (field,), context, jinja_env, seen_oids)  # type: ignore[misc]
            except TemplateFieldError:
                raise  # a nested object's field, named already
            except TemplateValueError as exc:
                where = field_path(getattr(parent, field, None), exc.template, field)
                shown = "" if exc.template is None else f", the template {short_repr(exc.template)}"
                raise TemplateFieldError(where, f"in task {self.task_id!r}{shown}: {exc}") from None
