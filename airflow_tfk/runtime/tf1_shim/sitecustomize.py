"""Device filters for unmodified TF1 between-graph scripts (installed by ``launch``).

``python -m airflow_tfk.runtime.launch`` puts this directory first on ``PYTHONPATH`` for
the tasks of a between-graph cluster, so Python imports this file at start-up. It
imports nothing heavy: an import hook waits for TensorFlow's own modules and then

- gives every session on a remote master (``grpc://...``) whose config has no
  ``device_filters`` the filters ``/job:ps`` + this task. Without them a worker's master
  lists the devices of every worker when it creates a session and waits for all of
  them, so a worker that starts after its peers have exited (or a peer that has not
  started yet) blocks until the deadline. This is what scripts that build their own
  ``MonitoredTrainingSession`` without a ``ConfigProto`` hit.
- makes a non-chief's session manager check every second (not every 30 s) whether the
  chief has initialised the variables, so the workers start together.
- adds a hook to ``MonitoredTrainingSession`` that prints the platform's progress line
  (the global step; the total from the script's ``StopAtStepHook``) at the first step,
  then every 10 s (``TFK_TF1_PROGRESS_SECONDS``), and ``done`` at the end, so an
  unmodified script's progress reaches the Airflow log and the stall bound applies;
- gives ``MonitoredTrainingSession`` a 2 s ``stop_grace_period_secs`` (TF's default is
  120 s) when the script passes none. In a synchronous script (``SyncReplicasOptimizer``)
  the chief's gradient-aggregation queue runner is left waiting for gradients that no
  worker will send once the workers are done; closing the session waits the whole grace
  period for that thread, so the chief exited 120 s after the workers.

A script that sets ``device_filters`` or ``recovery_wait_secs`` itself keeps its own.
Another ``sitecustomize`` further down the path still runs (it is chained below).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

RECOVERY_WAIT_SECS = 1
STOP_GRACE_PERIOD_SECS = 2
#: seconds between two progress lines of an unmodified script (``TFK_TF1_PROGRESS_SECONDS``;
#: 0: none)
try:
    PROGRESS_SECONDS = float(os.environ.get("TFK_TF1_PROGRESS_SECONDS", "10"))
except ValueError:
    PROGRESS_SECONDS = 10.0


def task_filters(env: Any = os.environ) -> list[str] | None:
    """``["/job:ps", "/job:<role>/task:<index>"]`` for this task, from ``TF_CONFIG``."""
    try:
        task = (json.loads(env.get("TF_CONFIG") or "{}") or {}).get("task") or {}
        role, index = task.get("type"), int(task.get("index", 0))
    except (ValueError, TypeError, AttributeError):
        return None
    if role not in ("worker", "chief"):
        return None
    return ["/job:ps", f"/job:{role}/task:{index}"]


def with_filters(config: Any, filters: list[str]) -> Any:
    """A copy of ``config`` (a ``ConfigProto`` or None) with ``filters`` when it has none."""
    from tensorflow.core.protobuf import config_pb2

    new = config_pb2.ConfigProto()
    if config is not None:
        if config.device_filters:
            return config
        new.CopyFrom(config)
    new.device_filters.extend(filters)
    return new


def _patch_session(module: ModuleType) -> None:
    filters = task_filters()
    if filters is None:
        return
    session_cls = module.Session
    original = session_cls.__init__

    def __init__(self: Any, target: Any = "", graph: Any = None, config: Any = None) -> None:
        text = target.decode() if isinstance(target, bytes) else str(target or "")
        if "://" in text:  # a remote master; in-process sessions have no cluster
            config = with_filters(config, filters)
        original(self, target, graph, config)

    session_cls.__init__ = __init__


def _patch_session_manager(module: ModuleType) -> None:
    manager_cls = module.SessionManager
    original = manager_cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        # recovery_wait_secs is the 5th parameter; only its default is changed
        if len(args) < 5:
            kwargs.setdefault("recovery_wait_secs", RECOVERY_WAIT_SECS)
        original(self, *args, **kwargs)

    manager_cls.__init__ = __init__


def _total_steps(hooks: Any) -> int:
    """The last step a ``StopAtStepHook`` among ``hooks`` stops at (0: not known)."""
    for hook in hooks or ():
        last = getattr(hook, "_last_step", None)
        if type(hook).__name__ == "StopAtStepHook" and isinstance(last, int):
            return last
    return 0


def _progress_hook(total: int) -> Any:
    """A ``SessionRunHook`` that prints the platform's progress line (the global step, the
    total when a ``StopAtStepHook`` says it) at the first step, then every
    ``PROGRESS_SECONDS``, and a last one with status ``done``: an unmodified script's
    progress shows in the Airflow log and its stall is noticed. No loss: the script's own
    tensor is not known."""
    import time

    from tensorflow.python.training import session_run_hook, training_util

    from airflow_tfk.protocol.progress import progress_line

    class ProgressHook(session_run_hook.SessionRunHook):
        def begin(self) -> None:
            self._step_tensor = training_util.get_global_step()
            self._start = time.time()
            self._printed = 0.0
            self._step = 0

        def before_run(self, run_context: Any) -> Any:
            if self._step_tensor is None:
                return None
            return session_run_hook.SessionRunArgs(self._step_tensor)

        def after_run(self, run_context: Any, run_values: Any) -> None:
            if run_values.results is None:
                return
            self._step = int(run_values.results)
            now = time.time()
            if not self._printed or now - self._printed >= PROGRESS_SECONDS:
                self._printed = now
                print(progress_line(self._step, total, None, self._start), flush=True)

        def end(self, session: Any) -> None:
            if self._step_tensor is not None:
                self._step = int(session.run(self._step_tensor))
            print(progress_line(self._step, total or self._step, None, self._start, "done"), flush=True)

    return ProgressHook()


def _patch_monitored_training_session(module: ModuleType) -> None:
    original = module.MonitoredTrainingSession

    def MonitoredTrainingSession(*args: Any, **kwargs: Any) -> Any:  # TF's name
        # stop_grace_period_secs is the 11th parameter; only its default is changed
        if len(args) < 11:
            kwargs.setdefault("stop_grace_period_secs", STOP_GRACE_PERIOD_SECS)
        # hooks is the 5th; the platform's own between-graph training prints its own lines
        if PROGRESS_SECONDS > 0 and "airflow_tfk.runtime.between_graph" not in sys.modules:
            if len(args) >= 5:
                args = (*args[:4], [*(args[4] or ()), _progress_hook(_total_steps(args[4]))], *args[5:])
            else:
                hooks = kwargs.get("hooks")
                kwargs["hooks"] = [*(hooks or ()), _progress_hook(_total_steps(hooks))]
        return original(*args, **kwargs)

    MonitoredTrainingSession.__doc__ = original.__doc__
    MonitoredTrainingSession.__wrapped__ = original  # type: ignore[attr-defined]
    module.MonitoredTrainingSession = MonitoredTrainingSession  # type: ignore[attr-defined]


PATCHES: dict[str, Callable[[ModuleType], None]] = {
    "tensorflow.python.client.session": _patch_session,
    "tensorflow.python.training.session_manager": _patch_session_manager,
    "tensorflow.python.training.monitored_session": _patch_monitored_training_session,
}


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, patch: Callable[[ModuleType], None]) -> None:
        self._loader, self._patch = loader, patch

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        try:
            self._patch(module)
        except Exception as exc:  # never break the script over a convenience
            print(f"[tfk] tf1 shim: not patched {module.__name__}: {exc}", file=sys.stderr)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        patch = PATCHES.get(name)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _PatchingLoader(spec.loader, patch)
        return spec


def _chain_next_sitecustomize() -> None:
    """Run the ``sitecustomize`` this one shadows, if any."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if os.environ.get("TFK_TF1_SHIM", "1") != "0":
    sys.meta_path.insert(0, _Finder())
# Imported by its package name (the launcher running a script in its own process), the
# interpreter's own sitecustomize has run already: only the hook is wanted then.
if __name__ == "sitecustomize":
    _chain_next_sitecustomize()
