"""Plans: the Kubernetes backend's logic written once for the sync and the async client.

A plan is a generator. It yields what it needs done - a :class:`Request`, or for the
watch, opening a pod watch, its next event, a pause, a status for the caller - and is
sent back the answer. Two small drivers per client run plans: :func:`run` /
:func:`arun` for request-only plans, :func:`drive_watch` / :func:`adrive_watch` for the
watch, which also hand the statuses a plan yields to their caller. So ``watch`` (the
blocking operator and sensor) and ``awatch`` (the deferrable trigger) share every line
of their logic, down to the Job cache they keep. No I/O here but in the drivers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Generator, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.kube.api import BY_KIND, AsyncApi, KubernetesApiError, SyncApi, error_message, is_not_found
from airflow_tfk.kube.retry import api_status
from airflow_tfk.status import ClusterStatus

log = logging.getLogger(__name__)


class Request(NamedTuple):
    method: str
    path: str
    query: dict[str, Any] | None = None
    body: Any = None
    optional: bool = False  # a failure is logged, not raised (answered with None)
    forbidden_is_absent: bool = False  # 403 answers None quietly, like 404


@dataclass(frozen=True)
class OpenWatch:
    """Open a watch request; its events are then asked for with :data:`NEXT_EVENT`."""

    path: str
    query: dict[str, Any]
    seconds: int


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class StreamFailed:
    """The answer to :data:`NEXT_EVENT` when the watch request broke."""

    error: BaseException


NEXT_EVENT = "next-event"  # answered with an event dict, WATCH_ENDED or StreamFailed
CLOSE_WATCH = "close-watch"
WATCH_ENDED = "watch-ended"  # the server ended the watch request

# A request plan is sent (status, body) for each Request, or None for 404 (and for
# optional failures); a watch plan may also yield the other operations and statuses.
Plan = Generator[Request, "tuple[int, Any] | None", Any]
WatchOp = Request | OpenWatch | Sleep | ClusterStatus | str
WatchPlan = Generator[WatchOp, Any, None]


def reraise(what: str, exc: BaseException) -> None:
    """Raise an API error as :class:`KubernetesApiError` naming what failed; others as is."""
    status = api_status(exc)
    if status is None:
        raise exc
    raise KubernetesApiError(what, status, error_message(exc)) from exc


def failed(req: Request, exc: Exception) -> None:
    """A request of a plan failed: 404 and optional requests answer None, others raise."""
    if is_not_found(exc) or (req.forbidden_is_absent and api_status(exc) == 403):
        return
    if req.optional:
        log.warning("kubernetes: %s %s failed (%s); carrying on", req.method, req.path, error_message(exc))
        return
    reraise(f"{req.method} {req.path}", exc)


def single(req: Request) -> Plan:
    return (yield req)


def list_plan(ref: ClusterRef, kind: str, selector: str | None = None) -> Plan:
    """(items, resourceVersion) of one kind, by the cluster's label or ``selector``."""
    result = yield Request(
        "GET", BY_KIND[kind].collection(ref.namespace), {"labelSelector": selector or ref.label_selector}
    )
    body = result[1] if result else {}
    return body.get("items") or [], (body.get("metadata") or {}).get("resourceVersion")


# -- the drivers ------------------------------------------------------------------------------
def _sync_request(api: SyncApi, req: Request) -> tuple[int, Any] | None:
    try:
        return api.request(req.method, req.path, req.query, req.body)
    except Exception as exc:
        failed(req, exc)
        return None


async def _async_request(api: AsyncApi, req: Request) -> tuple[int, Any] | None:
    try:
        return await api.request(req.method, req.path, req.query, req.body)
    except Exception as exc:
        failed(req, exc)
        return None


def run(api: SyncApi, plan: Plan) -> Any:
    """Drive a request plan with the sync client; its return value."""
    try:
        req = next(plan)
        while True:
            req = plan.send(_sync_request(api, req))
    except StopIteration as stop:
        return stop.value


async def arun(api: AsyncApi, plan: Plan) -> Any:
    try:
        req = next(plan)
        while True:
            req = plan.send(await _async_request(api, req))
    except StopIteration as stop:
        return stop.value


def drive_watch(api: SyncApi, plan: WatchPlan) -> Iterator[ClusterStatus]:
    """Drive a watch plan with the sync client, yielding the statuses it yields."""
    stream: Iterator[dict[str, Any]] | None = None
    try:
        op = next(plan)
        while True:
            result: Any = None
            if isinstance(op, ClusterStatus):
                yield op
            elif isinstance(op, Request):
                result = _sync_request(api, op)
            elif isinstance(op, OpenWatch):
                stream = api.watch(op.path, op.query, op.seconds)
            elif op == NEXT_EVENT:
                assert stream is not None
                try:
                    result = next(stream)
                except StopIteration:
                    result = WATCH_ENDED
                except Exception as exc:
                    result = StreamFailed(exc)
            elif op == CLOSE_WATCH:
                _close(stream)
                stream = None
            elif isinstance(op, Sleep):
                time.sleep(op.seconds)
            op = plan.send(result)
    except StopIteration:
        return
    finally:
        _close(stream)
        plan.close()


async def adrive_watch(api: AsyncApi, plan: WatchPlan) -> AsyncIterator[ClusterStatus]:
    """:func:`drive_watch` with the async client (the deferrable trigger)."""
    stream: Any = None
    try:
        op = next(plan)
        while True:
            result: Any = None
            if isinstance(op, ClusterStatus):
                yield op
            elif isinstance(op, Request):
                result = await _async_request(api, op)
            elif isinstance(op, OpenWatch):
                stream = api.watch(op.path, op.query, op.seconds)
            elif op == NEXT_EVENT:
                try:
                    result = await stream.__anext__()
                except StopAsyncIteration:
                    result = WATCH_ENDED
                except Exception as exc:
                    result = StreamFailed(exc)
            elif op == CLOSE_WATCH:
                await _aclose(stream)
                stream = None
            elif isinstance(op, Sleep):
                await asyncio.sleep(op.seconds)
            op = plan.send(result)
    except StopIteration:
        return
    finally:
        await _aclose(stream)
        plan.close()


def _close(stream: Any) -> None:
    if stream is not None:
        stream.close()


async def _aclose(stream: Any) -> None:
    if stream is not None:
        await stream.aclose()
