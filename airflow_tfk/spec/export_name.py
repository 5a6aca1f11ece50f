"""The model name a training exports under, where its spec says so before it runs.

A ``TrainingApp`` exports to ``<export_dir>/<model_name>/<version>/``; the runtime's
``--tfk_model_name`` flag sets that name over the app's own ``model_name``. When the
exporting task's argv carries the flag with a plain value, the name is known before
anything runs, and a publish step for another name can be refused then rather than after
a whole training. Anything else (no flag: the app's class attribute, which only the
training image knows; a templated value) is unknown here, and nothing is checked.

Pure: the provider never imports the runtime, so the flag's spelling is repeated here
(tests/spec/test_export_name.py checks it against the runtime's parser).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: the runtime's platform flag that names the exported model
MODEL_NAME_FLAG = "--tfk_model_name"


def flag_value(argv: Sequence[object], flag: str = MODEL_NAME_FLAG) -> str | None:
    """The value argparse would give ``flag`` in ``argv`` (the last one wins): from
    ``--flag VALUE`` or ``--flag=VALUE``; None when absent."""
    value: str | None = None
    tokens = [str(a) for a in argv]
    for i, token in enumerate(tokens):
        if token == flag and i + 1 < len(tokens):
            value = tokens[i + 1]
        elif token.startswith(flag + "="):
            value = token[len(flag) + 1 :]
    return value


def exporting_role(cluster: Mapping[str, Any]) -> str:
    """The role whose task exports: the chief when the cluster has one, else the workers
    (worker 0), as the runtime decides."""
    chief = cluster.get("chief")
    replicas = chief.get("replicas", 1) if isinstance(chief, Mapping) else 0
    return "chief" if replicas else "worker"


def known_export_name(cluster: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(name, field)``: the model name the exporting task's argv gives, and the spec
    field it is in (``args``, ``chief.args``, ``command``...); None when the argv does not
    say, or says it through a template."""
    role = exporting_role(cluster)
    role_spec = cluster.get(role)
    role_args = role_spec.get("args") if isinstance(role_spec, Mapping) else None
    args_field, args = (f"{role}.args", role_args) if role_args is not None else ("args", cluster.get("args"))
    found: tuple[str, str] | None = None
    for where, argv in (("command", cluster.get("command")), (args_field, args)):
        if not isinstance(argv, (list, tuple)):
            continue  # absent, or a whole template: unknown
        value = flag_value(argv)
        if value is not None:
            found = (value, where)  # args come after the command: the later one wins
    if found is None or "{{" in found[0] or "{%" in found[0]:
        return None
    return found


def publish_name_mismatch(cluster: Mapping[str, Any], model_name: object, prefix: str = "") -> str | None:
    """Why a publish of ``model_name`` cannot find what this training exports, or None
    when the names agree or either is not known before the run. ``prefix`` is the spec's
    place in its file (``cluster.``), so the message names the field as written."""
    if not isinstance(model_name, str) or "{{" in model_name or "{%" in model_name:
        return None
    known = known_export_name(cluster)
    if known is None or known[0] == model_name:
        return None
    name, where = known
    return (
        f"is {model_name!r}, but {prefix}{where} gives {MODEL_NAME_FLAG} {name!r}: the training "
        f"exports <export_dir>/{name}/<version>/, so the publish would find no version of "
        f"{model_name!r} from this run. Use the same name in both places"
    )


def spec_view(spec: Any) -> dict[str, Any]:
    """The fields of a ``TFClusterSpec`` that :func:`known_export_name` reads, as a mapping."""
    view: dict[str, Any] = {"command": list(spec.command or ()), "args": list(spec.args or ())}
    for role in ("chief", "worker"):
        role_spec = getattr(spec, role, None)
        if role_spec is not None:
            args = None if role_spec.args is None else list(role_spec.args)
            view[role] = {"replicas": role_spec.replicas, "args": args}
    return view
