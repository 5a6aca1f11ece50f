"""One retry decorator for transient Kubernetes API errors, sync and async.

Retried: 429 (honouring ``Retry-After``), 5xx, connection-level errors, and 409 only
where the caller says a conflict is transient (server-side apply racing another
applier). Everything else is raised at once. Bounded in attempts and in each wait.

The tunables are module attributes read at call time, so tests can shrink the waits.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import inspect
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

log = logging.getLogger(__name__)

ATTEMPTS = 5
BASE_DELAY = 0.5
MAX_DELAY = 30.0
TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})

F = TypeVar("F", bound=Callable[..., Any])


def api_status(exc: BaseException) -> int | None:
    """HTTP status of an ApiException of either client (``kubernetes``/``kubernetes_asyncio``)."""
    if _is_api_exception(exc):
        status = getattr(exc, "status", None)
        return int(status) if isinstance(status, int) else None
    return None


def _is_api_exception(exc: BaseException) -> bool:
    # NotFoundException, ServiceException... subclass ApiException; match on the MRO by
    # name so this module never has to import either client.
    return any(cls.__name__ == "ApiException" for cls in type(exc).__mro__)


def _is_connection_error(exc: BaseException) -> bool:
    if isinstance(exc, (ConnectionError, asyncio.TimeoutError, TimeoutError)):
        return True
    for cls in type(exc).__mro__:
        module = cls.__module__ or ""
        if (module.startswith("urllib3") and cls.__name__ == "HTTPError") or (
            module.startswith("aiohttp") and cls.__name__ == "ClientError"
        ):
            return True
    return False


def is_transient(
    exc: BaseException, *, conflict: bool = False, statuses: frozenset[int] | None = None
) -> bool:
    status = api_status(exc)
    if status is not None:
        return status in (TRANSIENT_STATUS if statuses is None else statuses) or (conflict and status == 409)
    return _is_connection_error(exc)


def _retry_after(exc: BaseException) -> float | None:
    headers = getattr(exc, "headers", None)
    if not headers:
        return None
    value = None
    for key in ("Retry-After", "retry-after"):
        try:
            value = headers.get(key)
        except AttributeError:
            return None
        if value is not None:
            break
    if value is None:
        return None
    value = str(value).strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def delay_for(exc: BaseException, attempt: int) -> float:
    """Seconds to wait before attempt ``attempt + 1``: Retry-After, else jittered backoff."""
    hinted = _retry_after(exc)
    if hinted is not None:
        return min(hinted, MAX_DELAY)
    backoff = BASE_DELAY * (2 ** (attempt - 1))
    return min(backoff * (0.5 + random.random() / 2), MAX_DELAY)


@dataclass(frozen=True)
class _Policy:
    conflict: bool = False
    attempts: int | None = None
    statuses: frozenset[int] | None = None

    def wait_before_retry(self, name: str, exc: Exception, attempt: int) -> float | None:
        """Seconds to wait before calling again, or None: give up (re-raise ``exc``)."""
        limit = self.attempts or ATTEMPTS
        if attempt >= limit or not is_transient(exc, conflict=self.conflict, statuses=self.statuses):
            return None
        wait = delay_for(exc, attempt)
        log.warning(
            "%s: transient Kubernetes API error (%s); retry %d/%d in %.1fs",
            name,
            _short(exc),
            attempt,
            limit - 1,
            wait,
        )
        return wait


def _sync(fn: F, policy: _Policy) -> F:
    name = getattr(fn, "__qualname__", repr(fn))

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        attempt = 1
        while True:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                wait = policy.wait_before_retry(name, exc, attempt)
                if wait is None:
                    raise
            time.sleep(wait)
            attempt += 1

    return wrapper  # type: ignore[return-value]


def _async(fn: F, policy: _Policy) -> F:
    name = getattr(fn, "__qualname__", repr(fn))

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        attempt = 1
        while True:
            try:
                return await fn(*args, **kwargs)
            except Exception as exc:
                wait = policy.wait_before_retry(name, exc, attempt)
                if wait is None:
                    raise
            await asyncio.sleep(wait)
            attempt += 1

    return wrapper  # type: ignore[return-value]


def retry_transient(
    func: F | None = None,
    *,
    conflict: bool = False,
    attempts: int | None = None,
    statuses: frozenset[int] | None = None,
) -> Any:
    """Retry ``func`` (a function or a coroutine function) on transient API errors.

    :param conflict: also retry 409 Conflict (only where repeating the call is safe).
    :param attempts: at most this many calls (default: the module's ``ATTEMPTS``).
    :param statuses: the HTTP statuses retried (default: ``TRANSIENT_STATUS``).
    """
    policy = _Policy(conflict, attempts, statuses)

    def decorate(fn: F) -> F:
        return _async(fn, policy) if inspect.iscoroutinefunction(fn) else _sync(fn, policy)

    if func is not None:
        return decorate(func)
    return decorate


def _short(exc: BaseException) -> str:
    status = api_status(exc)
    if status is not None:
        return f"HTTP {status} {getattr(exc, 'reason', '') or ''}".strip()
    return f"{type(exc).__name__}: {exc}"
