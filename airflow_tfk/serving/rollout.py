"""Waiting until every replica of a model server has a version: the publish's waits.

A deployment of several replicas reads one model config, but each replica applies it on
its own (the kubelet refreshes each pod's copy of the ConfigMap at its own time, each
server polls it on its own clock). A version counts as loaded, or a label as moved, only
once every replica that runs reports it (one not taking client traffic yet takes it as
soon as it serves the ``stable`` version); asking through the Service would ask
whichever replica the proxy picks. A single-server backend is its own only
replica, so the same waits serve it unchanged.
"""

from __future__ import annotations

from airflow_tfk.core.deadline import SYSTEM, Clock
from airflow_tfk.serving.base import Emit, ServingError, ServingTarget, VersionState


class ServerDown(ServingError):
    """The model server stopped during a publish and was not (or could not be) started again."""


class ServerWatch:
    """The server behind one publish: notices that it stopped, and starts it again once
    where the backend can (the local backend's process). The model config on disk holds
    what it must load, so a restarted server picks up where the killed one was."""

    def __init__(self, target: ServingTarget, emit: Emit, restarts: int = 1) -> None:
        self.target = target
        self.emit = emit
        self.restarts = restarts
        self.restarted: list[str] = []  # why, for each restart

    def restarted_now(self) -> bool:
        """True if the server was down and has just been started again; raises
        :class:`ServerDown` if it is down and stays down."""
        why = self.target.server_down()
        if why is None:
            return False
        if not self.target.restartable:
            raise ServerDown(why)
        if self.restarts <= 0:
            raise ServerDown(
                f"{why} (it was already started again {len(self.restarted)} time(s) in this publish)"
            )
        self.restarts -= 1
        self.emit(f"{why}: starting it again")
        try:
            self.target.ensure(self.emit)
        except Exception as exc:  # the reason is what the user must see
            raise ServerDown(f"{why}; starting it again failed: {exc}") from exc
        self.restarted.append(why)
        return True


def _state_text(state: VersionState) -> str:
    return state.state + (f" ({state.error_code}: {state.error_message})" if state.failed else "")


def wait_available(
    target: ServingTarget,
    version: int,
    timeout: float,
    emit: Emit,
    poll: float = 1.0,
    clock: Clock = SYSTEM,
    model: str | None = None,
    server: ServerWatch | None = None,
) -> list[str]:
    """Return the replicas' names once every replica that takes traffic reports
    ``version`` of ``model`` AVAILABLE; raise as soon as one reports it failed (END), on
    timeout naming the replicas that do not have it, or (with ``server``) as soon as the
    server is down for good."""
    model = model or target.spec.model_name
    deadline = clock.deadline(timeout)
    last: dict[str, VersionState] = {}
    while True:
        views = target.replicas()
        states = {name: view.version_state(version, model=model) for name, view in views.items()}
        if server is not None and None in states.values() and server.restarted_now():
            deadline = clock.deadline(timeout)  # the new server loads from the start
            last = {}
            continue
        many = len(views) > 1
        for name, state in states.items():
            if state is not None and state != last.get(name):
                emit(f"{model} version {version}: {_state_text(state)}" + (f" on {name}" if many else ""))
                last[name] = state
        if states and all(s is not None and s.state == "AVAILABLE" for s in states.values()):
            return sorted(states)
        for name, state in states.items():
            if state is not None and state.failed:
                where = f" on {name}" if many else ""
                raise ServingError(
                    f"version {version} of {model} failed to load{where}: "
                    f"{state.error_code}: {state.error_message}"
                )
        if deadline.passed():
            raise ServingError(
                f"version {version} of {model} did not become AVAILABLE within {timeout:.0f} s "
                f"({_missing(views, states, last)})"
            )
        deadline.pause(poll)


def _missing(
    views: dict[str, ServingTarget], states: dict[str, VersionState | None], last: dict[str, VersionState]
) -> str:
    """What each replica without the version last said, and why one gave no answer."""
    parts = []
    for name, state in states.items():
        if state is not None and state.state == "AVAILABLE":
            continue
        seen = f"last state {last[name].state}" if name in last else "the server never reported it"
        why = views[name].unreachable()
        if why:  # e.g. the service proxy's 503 while no pod is ready
            seen += f"; last answer: {why}"
        parts.append(seen if len(views) == 1 else f"{name}: {seen}")
    return "; ".join(parts) or "no replica takes traffic"


def wait_label(
    target: ServingTarget,
    label: str,
    version: int,
    timeout: float,
    emit: Emit,
    poll: float,
    clock: Clock,
) -> None:
    """Wait until ``label`` resolves to ``version`` on every replica. Only warns on timeout:
    the config holding the label is written, so a late replica applies it on its next
    poll, and moving the label back now would flip the replicas that already did."""
    deadline = clock.deadline(timeout)
    while True:
        views = target.replicas()
        behind = sorted(name for name, view in views.items() if view.label_version(label) != version)
        if not behind:
            return
        if deadline.passed():
            where = f" on {', '.join(behind)}" if len(views) > 1 else ""
            emit(
                f"warning: the server has not applied the '{label}' label to version "
                f"{version} within {timeout:.0f} s{where}; it will on its next config poll"
            )
            return
        clock.sleep(poll)


def wait_ready(target: ServingTarget, timeout: float, emit: Emit, poll: float, clock: Clock) -> None:
    """Wait until every replica that runs takes client traffic: once the label resolves on
    a replica, its readiness probe passes within one probe period, and the endpoint a
    publish returns should answer when it returns (on a first publish no replica was in
    the Service before). Only warns on timeout: the version is published either way."""
    deadline = clock.deadline(timeout)
    while True:
        waiting = target.not_ready()
        if not waiting:
            return
        if deadline.passed():
            emit(
                f"warning: {', '.join(waiting)} serve(s) the version but did not turn Ready "
                f"within {timeout:.0f} s; the Service sends them traffic once they do"
            )
            return
        clock.sleep(poll)
