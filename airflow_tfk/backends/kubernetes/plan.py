"""Request plans: a sequence of API requests written once for the sync and the async client.

A plan is a generator that yields :class:`Request` s and is sent each answer:
``(status, body)``, or None for 404 (and for an optional request that failed). It holds
the logic between the requests (what to ask next, what the answers mean) and no I/O, so
``status``, ``logs`` and ``delete`` run the same plan from the blocking operator
(:func:`run`, the sync client) and from a wait on the event loop (:func:`arun`, the async
client). The watch itself is plain async code (:mod:`.watch`).
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from airflow_tfk.backends.base import ClusterRef
from airflow_tfk.kube.api import BY_KIND, AsyncApi, KubernetesApiError, SyncApi, error_message, is_not_found
from airflow_tfk.kube.retry import api_status

log = logging.getLogger(__name__)


class Request(NamedTuple):
    method: str
    path: str
    query: dict[str, Any] | None = None
    body: Any = None
    optional: bool = False  # a failure is logged, not raised (answered with None)
    forbidden_is_absent: bool = False  # 403 answers None quietly, like 404
    text: bool = False  # the body as text (a pod's log); 400 (not started yet) answers None
    what: str = ""  # what failed, for the error (default: the method and path)


# Sent (status, body) for each Request, or None for 404 (and for optional failures).
Plan = Generator[Request, "tuple[int, Any] | None", Any]


def reraise(what: str, exc: BaseException) -> None:
    """Raise an API error as :class:`KubernetesApiError` naming what failed; others as is."""
    status = api_status(exc)
    if status is None:
        raise exc
    raise KubernetesApiError(what, status, error_message(exc)) from exc


def failed(req: Request, exc: Exception) -> None:
    """A request of a plan failed: 404 and optional requests answer None, others raise."""
    status = api_status(exc)
    if is_not_found(exc) or (req.forbidden_is_absent and status == 403) or (req.text and status == 400):
        return
    if req.optional:
        log.warning("kubernetes: %s %s failed (%s); carrying on", req.method, req.path, error_message(exc))
        return
    reraise(req.what or f"{req.method} {req.path}", exc)


def single(req: Request) -> Plan:
    return (yield req)


#: Objects per page of a list: a 2,000-pod list comes in pages the event loop decodes in
#: small steps, and the server never builds the whole answer at once.
LIST_PAGE = 500


def list_plan(ref: ClusterRef, kind: str, selector: str | None = None) -> Plan:
    """(items, resourceVersion) of one kind, by the cluster's label or ``selector``, read
    page by page (``limit``/``continue``; every page is of the same snapshot)."""
    items: list[dict[str, Any]] = []
    query: dict[str, Any] = {"labelSelector": selector or ref.label_selector, "limit": LIST_PAGE}
    while True:
        result = yield Request("GET", BY_KIND[kind].collection(ref.namespace), query)
        body = (result[1] if result else None) or {}
        items += body.get("items") or []
        meta = body.get("metadata") or {}
        if not meta.get("continue"):
            return items, meta.get("resourceVersion")
        query = {**query, "continue": meta["continue"]}


class _Steps:
    """Steps a plan: iterating yields each request, whose answer the caller sets in
    :attr:`answer` inside :meth:`answering`; :attr:`value` is the plan's return value.
    The sync and async runners differ only in how they call the client."""

    def __init__(self, plan: Plan) -> None:
        self._plan = plan
        self.answer: tuple[int, Any] | None = None
        self.value: Any = None

    def __iter__(self) -> Iterator[Request]:
        while True:
            try:
                req = self._plan.send(self.answer)
            except StopIteration as stop:
                self.value = stop.value
                return
            self.answer = None  # stays None when the request fails and failed() lets it pass
            yield req

    @contextmanager
    def answering(self, req: Request) -> Iterator[None]:
        try:
            yield
        except Exception as exc:
            failed(req, exc)


def run(api: SyncApi, plan: Plan) -> Any:
    """Run a plan with the sync client; its return value."""
    steps = _Steps(plan)
    for req in steps:
        with steps.answering(req):
            steps.answer = (
                (200, api.text(req.path, req.query))
                if req.text
                else api.request(req.method, req.path, req.query, req.body)
            )
    return steps.value


async def arun(api: AsyncApi, plan: Plan) -> Any:
    """:func:`run` with the async client."""
    steps = _Steps(plan)
    for req in steps:
        with steps.answering(req):
            steps.answer = (
                (200, await api.text(req.path, req.query))
                if req.text
                else await api.request(req.method, req.path, req.query, req.body)
            )
    return steps.value
