"""Plans: the Kubernetes backend's logic written once for the sync and the async client.

A plan is a generator. It yields what it needs done - a :class:`Request`, or for the
watch, opening a pod watch, its next event, a pause, a status for the caller - and is
sent back the answer. What each operation does with a client is :class:`SyncIO` /
:class:`AsyncIO`, one method per kind; the stepping is :mod:`airflow_tfk._plan_driver`'s,
written once. :func:`run` / :func:`arun` drive request-only plans, :func:`drive_watch` /
:func:`adrive_watch` the watch, handing the statuses a plan yields to their caller. So
``watch`` (the blocking operator and sensor) and ``awatch`` (the deferrable trigger)
share every line of their logic, down to the Job cache they keep. No I/O here but in
the two I/O classes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Generator, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from airflow_tfk._plan_driver import PlanIO, Steps, adrive, afinish, drive, finish
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
class NextEvent:
    """The open watch's next event: answered with the event dict, :data:`WATCH_ENDED`
    or :class:`StreamFailed`."""


@dataclass(frozen=True)
class CloseWatch:
    """Close the open watch request."""


@dataclass(frozen=True)
class StreamFailed:
    """The answer to :data:`NEXT_EVENT` when the watch request broke."""

    error: BaseException


NEXT_EVENT = NextEvent()
CLOSE_WATCH = CloseWatch()
WATCH_ENDED = "watch-ended"  # the server ended the watch request

# A request plan is sent (status, body) for each Request, or None for 404 (and for
# optional failures); a watch plan may also yield the other operations and statuses.
Plan = Generator[Request, "tuple[int, Any] | None", Any]
WatchOp = Request | OpenWatch | NextEvent | CloseWatch | Sleep | ClusterStatus
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
class _ClientIO(PlanIO):
    """What each operation of a plan does with a client (see :mod:`airflow_tfk._plan_driver`).
    Both clients turn errors into the same answers (:func:`failed` for a request, a
    :class:`StreamFailed` for a broken watch); only the calls differ between them."""

    OPS = {
        Request: "request",
        OpenWatch: "open_watch",
        NextEvent: "next_event",
        CloseWatch: "close_watch",
        Sleep: "sleep",
    }


class SyncIO(_ClientIO):
    """The sync client's side (the blocking operator and the sensor)."""

    def __init__(self, api: SyncApi) -> None:
        self.api = api
        self.stream: Any = None  # the open watch: an iterator with close()

    def request(self, req: Request) -> tuple[int, Any] | None:
        try:
            return self.api.request(req.method, req.path, req.query, req.body)
        except Exception as exc:
            failed(req, exc)
            return None

    def open_watch(self, op: OpenWatch) -> None:
        self.stream = self.api.watch(op.path, op.query, op.seconds)

    def next_event(self, _: NextEvent) -> dict[str, Any] | str | StreamFailed:
        assert self.stream is not None, "NEXT_EVENT before OpenWatch"
        try:
            return next(self.stream)
        except StopIteration:
            return WATCH_ENDED
        except Exception as exc:
            return StreamFailed(exc)

    def close_watch(self, _: CloseWatch) -> None:
        self.close()

    def sleep(self, op: Sleep) -> None:
        time.sleep(op.seconds)

    def close(self) -> None:
        stream, self.stream = self.stream, None
        if stream is not None:
            stream.close()


class AsyncIO(_ClientIO):
    """The async client's side (the deferrable trigger)."""

    def __init__(self, api: AsyncApi) -> None:
        self.api = api
        self.stream: Any = None  # the open watch: an async generator

    async def request(self, req: Request) -> tuple[int, Any] | None:
        try:
            return await self.api.request(req.method, req.path, req.query, req.body)
        except Exception as exc:
            failed(req, exc)
            return None

    async def open_watch(self, op: OpenWatch) -> None:
        self.stream = self.api.watch(op.path, op.query, op.seconds)

    async def next_event(self, _: NextEvent) -> dict[str, Any] | str | StreamFailed:
        assert self.stream is not None, "NEXT_EVENT before OpenWatch"
        try:
            return await self.stream.__anext__()
        except StopAsyncIteration:
            return WATCH_ENDED
        except Exception as exc:
            return StreamFailed(exc)

    async def close_watch(self, _: CloseWatch) -> None:
        await self.aclose()

    async def sleep(self, op: Sleep) -> None:
        await asyncio.sleep(op.seconds)

    async def aclose(self) -> None:
        stream, self.stream = self.stream, None
        if stream is not None:
            await stream.aclose()


def run(api: SyncApi, plan: Plan) -> Any:
    """Drive a request plan with the sync client; its return value."""
    return finish(plan, SyncIO(api))


async def arun(api: AsyncApi, plan: Plan) -> Any:
    return await afinish(plan, AsyncIO(api))


def drive_watch(api: SyncApi, plan: WatchPlan) -> Iterator[ClusterStatus]:
    """Drive a watch plan with the sync client, yielding the statuses it yields."""
    return drive(Steps(plan), SyncIO(api))


def adrive_watch(api: AsyncApi, plan: WatchPlan) -> AsyncIterator[ClusterStatus]:
    """:func:`drive_watch` with the async client (the deferrable trigger)."""
    return adrive(Steps(plan), AsyncIO(api))
