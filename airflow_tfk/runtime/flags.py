"""The platform's flags, shared by every training app.

All of them start with ``--tfk_`` so they cannot collide with an app's own flags;
anything else on the command line is left to the app (``parse_known_args``). Defaults
come from the task environment (``TFK_DATA_DIR``, ``TFK_LOG_DIR``, ``TFK_MODEL_DIR``,
``TFK_CLUSTER_NAME``) when present. Pure Python: no TensorFlow.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

PREFIX = "--tfk_"


@dataclass(frozen=True)
class PlatformFlags:
    """Parsed platform flags.

    :param steps: total training steps (batches, summed over all workers).
    :param batch_size: batch size per replica.
    :param sync: True = synchronous updates, False = asynchronous, None = the mode's
        natural choice. ``all_reduce`` is synchronous, ``parameter_server`` and
        ``between_graph`` are asynchronous; asking a mode for the other is an error.
    :param checkpoint_every: steps between checkpoints (0 = only at the end).
    :param progress_every: steps between progress lines.
    :param steps_per_call: steps each scheduled function runs on a worker
        (``parameter_server``: fewer round trips to the coordinator).
    :param use_gpu: True = require a GPU, False = hide GPUs, None = use them if present.
    :param model_version: export version (default, or 0 on the command line: one more
        than the newest existing one).
    :param cluster_wait: seconds to wait for the other tasks' addresses.
    :param metrics_port: where the training task serves Prometheus metrics
        (:mod:`airflow_tfk.runtime.metrics`); None: nowhere.
    """

    steps: int = 1000
    batch_size: int = 32
    sync: bool | None = None
    log_dir: str | None = None
    checkpoint_dir: str | None = None
    checkpoint_every: int = 100
    data_dir: str | None = None
    export_dir: str | None = None
    model_name: str | None = None
    model_version: int | None = None
    use_gpu: bool | None = None
    progress_every: int = 10
    steps_per_call: int = 1
    learning_rate: float | None = None
    cluster_wait: float = 600.0
    seed: int | None = None
    metrics_port: int | None = None
    metrics_path: str = "/metrics"
    checkpoint_on_notice: bool | None = None


def _bounded(convert: type, noun: str, minimum: float, inclusive: bool):
    """An argparse type: ``convert`` the text, then require ``>= minimum`` (or ``>``)."""
    bound = "at least" if inclusive else "greater than"

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {noun}, got {text!r}") from None
        if not (value >= minimum if inclusive else value > minimum):  # NaN fails too
            raise argparse.ArgumentTypeError(f"must be {bound} {minimum}, got {value}")
        return value

    return parse


_positive_int = _bounded(int, "an integer", 1, inclusive=True)
_non_negative_int = _bounded(int, "an integer", 0, inclusive=True)
_positive_float = _bounded(float, "a number", 0, inclusive=False)


def default_checkpoint_dir(env: Mapping[str, str], model_name: str | None) -> str | None:
    """``$TFK_MODEL_DIR/.checkpoints/<cluster or model name>``: stable across restarts and
    retries of the same training, and outside every ``<base>/<model>/`` that TF Serving
    scans for versions."""
    base = env.get("TFK_MODEL_DIR")
    name = env.get("TFK_CLUSTER_NAME") or model_name
    if not base or not name:
        return None
    return os.path.join(base, ".checkpoints", name)


# The valued flags, ``--tfk_<field>`` of :class:`PlatformFlags`, in ``--help`` order:
# (field, argparse type, the environment variable that gives the default, help). Without
# a variable the default is the field's.
_VALUED: tuple[tuple[str, Callable[[str], Any], str | None, str], ...] = (
    ("steps", _positive_int, None, "total training steps (summed over workers)"),
    ("batch_size", _positive_int, None, "batch size per replica"),
    ("log_dir", str, "TFK_LOG_DIR", "TensorBoard summaries (default: $TFK_LOG_DIR)"),
    ("checkpoint_dir", str, None, "checkpoints (default: $TFK_MODEL_DIR/.checkpoints/<cluster name>)"),
    ("checkpoint_every", _non_negative_int, None, "steps between checkpoints (0: only at the end)"),
    ("data_dir", str, "TFK_DATA_DIR", "input data (default: $TFK_DATA_DIR)"),
    (
        "export_dir",
        str,
        "TFK_MODEL_DIR",
        "SavedModel export base; the model goes to <export_dir>/<model_name>/<version>/ "
        "(default: $TFK_MODEL_DIR)",
    ),
    ("model_name", str, None, "model name under the export base (default: the app's model_name)"),
    ("model_version", _non_negative_int, None, "export version (default or 0: newest existing version + 1)"),
    ("progress_every", _positive_int, None, "steps between progress lines"),
    ("steps_per_call", _positive_int, None, "steps per function call on a worker (parameter_server)"),
    ("learning_rate", _positive_float, None, "learning rate (default: the app's learning_rate)"),
    ("cluster_wait", _positive_float, None, "seconds to wait for the other tasks to be reachable"),
    ("seed", int, None, "random seed"),
    (
        "metrics_port",
        _non_negative_int,
        "TFK_METRICS_PORT",
        "serve Prometheus metrics on this port (default: $TFK_METRICS_PORT; none: no metrics)",
    ),
    (
        "metrics_path",
        str,
        "TFK_METRICS_PATH",
        "the metrics' HTTP path (default: $TFK_METRICS_PATH or /metrics)",
    ),
)
# The switches: (field, its True flag and help, its False flag and help); unset is None.
_SWITCHES = (
    (
        "sync",
        ("--tfk_sync", "synchronous updates (all_reduce; refused by the other modes)"),
        ("--tfk_async", "asynchronous updates (between_graph, parameter_server)"),
    ),
    ("use_gpu", ("--tfk_use_gpu", "require a GPU"), ("--tfk_no_gpu", "hide GPUs and train on CPU")),
    (
        "checkpoint_on_notice",
        ("--tfk_checkpoint_on_notice", "on SIGTERM, checkpoint at the next step and exit 76 (default)"),
        ("--tfk_no_checkpoint_on_notice", "SIGTERM ends the task at once"),
    ),
)


def add_platform_flags(
    parser: argparse.ArgumentParser, env: Mapping[str, str] | None = None
) -> argparse.ArgumentParser:
    """Add the ``--tfk_*`` flags to ``parser``."""
    env = os.environ if env is None else env
    g = parser.add_argument_group("platform (airflow-tfk)")
    d = PlatformFlags()
    for name, kind, variable, help_text in _VALUED:
        default = (env.get(variable) if variable else None) or getattr(d, name)
        g.add_argument(PREFIX + name, type=kind, default=default, help=help_text)
    for name, (on, on_help), (off, off_help) in _SWITCHES:
        pair = g.add_mutually_exclusive_group()
        pair.add_argument(on, dest=f"tfk_{name}", action="store_true", default=None, help=on_help)
        pair.add_argument(off, dest=f"tfk_{name}", action="store_false", help=off_help)
    return parser


def parse_flags(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    parser: argparse.ArgumentParser | None = None,
    model_name: str | None = None,
) -> tuple[PlatformFlags, list[str]]:
    """Parse the platform flags out of ``argv``; returns them and the app's own arguments.

    An unknown ``--tfk_*`` flag is an error (a typo would otherwise be silently passed to
    the app); everything else is returned untouched, in order.
    """
    env = os.environ if env is None else env
    parser = parser or argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    add_platform_flags(parser, env)
    ns, rest = parser.parse_known_args(argv)
    unknown = [a for a in rest if a.startswith(PREFIX)]
    if unknown:
        parser.error(f"unknown platform flag(s): {' '.join(unknown)}")
    name = ns.tfk_model_name or model_name
    given = {f.name: getattr(ns, f"tfk_{f.name}") for f in fields(PlatformFlags)}
    flags = replace(
        PlatformFlags(**given),
        checkpoint_dir=ns.tfk_checkpoint_dir or default_checkpoint_dir(env, name),
        model_name=name,
        model_version=ns.tfk_model_version or None,  # 0: the next version
    )
    return flags, list(rest)
