"""Raw JSON access to the Kubernetes API through the clients the cncf hooks build.

The backend speaks plain dicts (the API's own JSON), not the generated models: one code
path for every kind, no discovery round-trips (a small kind -> path table), and no cost
deserialising hundreds of pods into objects on every list.

:class:`SyncApi` wraps a ``kubernetes.client.ApiClient`` (``KubernetesHook.api_client``);
:class:`AsyncApi` a ``kubernetes_asyncio`` one (``AsyncKubernetesHook.get_conn()``). Both
go through the client's ``call_api``, so authentication, TLS and proxies are the hook's.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, cast

from airflow_tfk.kube.retry import TRANSIENT_STATUS, api_status, retry_transient

APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
# Generous client-side cap on a plain request; watches get their own.
REQUEST_TIMEOUT = (10.0, 60.0)

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True)
class Kind:
    """Where one kind lives in the API."""

    kind: str
    api_version: str
    plural: str
    namespaced: bool = True
    collection_delete: bool = True  # supports DELETE on the collection

    @property
    def prefix(self) -> str:
        return f"/api/{self.api_version}" if "/" not in self.api_version else f"/apis/{self.api_version}"

    def collection(self, namespace: str | None) -> str:
        if self.namespaced:
            return f"{self.prefix}/namespaces/{namespace}/{self.plural}"
        return f"{self.prefix}/{self.plural}"

    def item(self, namespace: str | None, name: str) -> str:
        return f"{self.collection(namespace)}/{name}"

    def everywhere(self) -> str:
        """The collection across all namespaces."""
        return f"{self.prefix}/{self.plural}"


_KINDS = [
    Kind("Namespace", "v1", "namespaces", namespaced=False, collection_delete=False),
    Kind("Node", "v1", "nodes", namespaced=False, collection_delete=False),
    Kind("ServiceAccount", "v1", "serviceaccounts"),
    Kind("ConfigMap", "v1", "configmaps"),
    Kind("Secret", "v1", "secrets"),
    Kind("PersistentVolumeClaim", "v1", "persistentvolumeclaims"),
    # Services only gained DeleteCollection recently; delete them one by one.
    Kind("Service", "v1", "services", collection_delete=False),
    Kind("Pod", "v1", "pods"),
    Kind("Deployment", "apps/v1", "deployments"),
    Kind("Job", "batch/v1", "jobs"),
    Kind("PodDisruptionBudget", "policy/v1", "poddisruptionbudgets"),
    Kind("NetworkPolicy", "networking.k8s.io/v1", "networkpolicies"),
    Kind("EndpointSlice", "discovery.k8s.io/v1", "endpointslices"),
    # TF Serving's scaling and exposure (deleted by name, never by collection)
    Kind("HorizontalPodAutoscaler", "autoscaling/v2", "horizontalpodautoscalers", collection_delete=False),
    Kind("Ingress", "networking.k8s.io/v1", "ingresses", collection_delete=False),
    Kind("HTTPRoute", "gateway.networking.k8s.io/v1", "httproutes", collection_delete=False),
    Kind("JobSet", "jobset.x-k8s.io/v1alpha2", "jobsets"),
    Kind("PodGroup", "scheduling.k8s.io/v1beta1", "podgroups"),
    Kind("Event", "v1", "events"),
]
KINDS: dict[tuple[str, str], Kind] = {(k.api_version, k.kind): k for k in _KINDS}
BY_KIND: dict[str, Kind] = {k.kind: k for k in _KINDS}
# Kueue's LocalQueue, made in a training's own namespace, in whichever version the
# cluster serves (Kueue >= 0.15: v1beta2); only by (version, kind), as BY_KIND has one.
for _version in ("kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1"):
    KINDS[(_version, "LocalQueue")] = Kind("LocalQueue", _version, "localqueues")


def kind_of(manifest: dict[str, Any]) -> Kind:
    key = (manifest.get("apiVersion", ""), manifest.get("kind", ""))
    try:
        return KINDS[key]
    except KeyError:
        raise ValueError(
            f"kubernetes backend: no API path known for {key[0]} {key[1]}; "
            f"known kinds: {', '.join(sorted(BY_KIND))}"
        ) from None


class KubernetesApiError(RuntimeError):
    """A Kubernetes API call failed for good; carries the server's status and message."""

    def __init__(self, what: str, status: int | None, message: str) -> None:
        self.what = what
        self.status = status
        self.message = message
        super().__init__(f"{what}: HTTP {status}: {message}")


def error_message(exc: BaseException) -> str:
    """The ``message`` of the server's Status body, else the exception's reason."""
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if isinstance(body, str) and body:
        try:
            data = json.loads(body)
            if isinstance(data, dict) and data.get("message"):
                return str(data["message"])
        except ValueError:
            return body[:500]
    return str(getattr(exc, "reason", "") or exc)


def _query(params: dict[str, Any] | None) -> list[tuple[str, str]]:
    out = []
    for key, value in (params or {}).items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        out.append((key, str(value)))
    return out


# -- the operations, written once for both clients ------------------------------------------
# An operation is a pure plan - its arguments -> the HTTP call and how to read the answer -
# and its retry policy. The clients only send calls and read bodies (``_send``), and
# :func:`_sync_method` / :func:`_async_method` make each operation a method of both, so the
# two cannot drift apart (they did: only one of them checked statuses).
@dataclass(frozen=True)
class Call:
    """One HTTP request to the API server."""

    method: str
    path: str
    query: dict[str, Any] | None = None
    body: Any = None
    content_type: str | None = None
    accept: str = "application/json"
    timeout: Any = REQUEST_TIMEOUT

    def call_api_args(self) -> dict[str, Any]:
        """``call_api`` arguments of both clients: the hook's auth, no model deserialisation."""
        return {
            "query_params": _query(self.query),
            "header_params": {"Accept": self.accept, "Content-Type": self.content_type or "application/json"},
            "body": self.body,
            "auth_settings": ["BearerToken"],
            "_preload_content": False,
            # Clients before 30 answer (response, status, headers) without it, even unpreloaded.
            "_return_http_data_only": True,
            "_request_timeout": self.timeout,
        }


@dataclass(frozen=True)
class Exchange(Generic[T]):
    """A call and how its answer (status, body) becomes the operation's result."""

    call: Call
    reply: Callable[[int, bytes], T]


@dataclass(frozen=True)
class Operation(Generic[P, T]):
    name: str
    plan: Callable[P, Exchange[T]]
    retry: Callable[[Callable[..., Any]], Any]

    def method(self, driver: Callable[..., Any], owner: str) -> Any:
        """``driver`` named and documented as this operation, behind its retry policy."""
        driver.__name__ = self.name
        driver.__qualname__ = f"{owner}.{self.name}"  # what a retry's log line names
        driver.__doc__ = self.plan.__doc__
        return self.retry(driver)


def operation(name: str, **retry: Any) -> Callable[[Callable[P, Exchange[T]]], Operation[P, T]]:
    """Make a plan the operation (method) ``name``; ``retry``: :func:`retry_transient`'s options."""

    def make(plan: Callable[P, Exchange[T]]) -> Operation[P, T]:
        return Operation(name, plan, retry_transient(**retry))

    return make


def _status_and_json(status: int, data: bytes) -> tuple[int, Any]:
    return status, (json.loads(data) if data else None)


def _text(status: int, data: bytes) -> str:
    return data.decode("utf-8", "replace")


@operation("request")
def _request(
    method: str,
    path: str,
    query: dict[str, Any] | None = None,
    body: Any = None,
    content_type: str | None = None,
) -> Exchange[tuple[int, Any]]:
    """Any call answered with JSON: (status, the decoded body or None)."""
    return Exchange(Call(method, path, query, body, content_type), _status_and_json)


@operation("apply", conflict=True)
def _apply(path: str, manifest: dict[str, Any], field_manager: str) -> Exchange[tuple[int, Any]]:
    """Server-side apply; 201 when the object was created, 200 when it existed."""
    query = {"fieldManager": field_manager, "force": True}
    return Exchange(Call("PATCH", path, query, manifest, APPLY_CONTENT_TYPE), _status_and_json)


# Logs are best effort (progress lines, logs copied before a delete) and on the path to
# deleting the PS: one retry, not four, and none for a 500 - the API server's answer when
# it cannot reach the pod's kubelet, which a retry 0.3 s later does not change.
#: The most of a pod's log one read takes (the API server's ``limitBytes``). A log is
#: written by the pod, so by whatever runs in it: ``tailLines`` alone bounds lines, not one
#: line of a gigabyte. Nothing the provider reads from a log comes near this.
LOG_LIMIT_BYTES = 4 << 20


@operation("text", attempts=2, statuses=TRANSIENT_STATUS - {500})
def _text_of(path: str, query: dict[str, Any] | None = None) -> Exchange[str]:
    """The body as text (a pod's log), at most :data:`LOG_LIMIT_BYTES` unless the query
    asks for less."""
    query = dict(query or {})
    query["limitBytes"] = min(int(query.get("limitBytes") or LOG_LIMIT_BYTES), LOG_LIMIT_BYTES)
    return Exchange(Call("GET", path, query, accept="*/*"), _text)


def watch_call(path: str, query: dict[str, Any], timeout_seconds: int, timeout: Any) -> Call:
    """One watch request; the server ends it after ``timeout_seconds``, the client after ``timeout``."""
    return Call("GET", path, {**query, "watch": True, "timeoutSeconds": timeout_seconds}, timeout=timeout)


def _sync_method(op: Operation[P, T]) -> Callable[Concatenate[SyncApi, P], T]:
    def driver(self: SyncApi, *args: P.args, **kwargs: P.kwargs) -> T:
        exchange = op.plan(*args, **kwargs)
        resp = self._send(exchange.call)
        return exchange.reply(resp.status, resp.data)

    return cast("Callable[Concatenate[SyncApi, P], T]", op.method(driver, "SyncApi"))


def _async_method(op: Operation[P, T]) -> Callable[Concatenate[AsyncApi, P], Coroutine[Any, Any, T]]:
    async def driver(self: AsyncApi, *args: P.args, **kwargs: P.kwargs) -> T:
        exchange = op.plan(*args, **kwargs)
        resp = await self._send(exchange.call)
        data = await resp.read()
        resp.release()
        return exchange.reply(resp.status, data)

    return cast("Callable[Concatenate[AsyncApi, P], Coroutine[Any, Any, T]]", op.method(driver, "AsyncApi"))


class SyncApi:
    """Plain-JSON requests through a ``kubernetes.client.ApiClient``."""

    def __init__(self, api_client: Any) -> None:
        self.client = api_client

    def _send(self, call: Call) -> Any:
        return self.client.call_api(call.path, call.method, **call.call_api_args())

    request = _sync_method(_request)
    apply = _sync_method(_apply)
    text = _sync_method(_text_of)

    @retry_transient
    def _open_watch(self, path: str, query: dict[str, Any], timeout_seconds: int) -> Any:
        return self._send(watch_call(path, query, timeout_seconds, (10.0, timeout_seconds + 15.0)))

    def watch(self, path: str, query: dict[str, Any], timeout_seconds: int) -> Iterator[dict[str, Any]]:
        """Events of one watch request until the server ends it; closed when abandoned.

        Each event is decoded straight from its JSON line into plain dicts: no client
        models, no str round trip (600 workers finishing are ~1,800 events of ~5 kB)."""
        resp = self._open_watch(path, query, timeout_seconds)
        try:
            for line in json_lines(resp.stream(amt=None, decode_content=True)):
                yield json.loads(line)
        finally:
            resp.close()
            resp.release_conn()


def json_lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The non-empty lines of a chunked stream, each once whole. A chunk may hold many
    events or part of one; what follows the last newline waits for the next chunk."""
    rest = b""
    for chunk in chunks:
        if not chunk:
            continue
        lines = (rest + chunk if rest else chunk).split(b"\n")
        rest = lines.pop()
        for line in lines:
            if line.strip():
                yield line
    if rest.strip():
        yield rest


def _async_api_exception(status: int, reason: str, body: bytes, headers: Any) -> Exception:
    from kubernetes_asyncio.client.exceptions import ApiException

    exc: Any = ApiException(status=status, reason=reason)
    exc.body = body.decode("utf-8", "replace")
    exc.headers = headers
    return exc


class AsyncApi:
    """Plain-JSON requests through a ``kubernetes_asyncio.client.ApiClient``."""

    def __init__(self, api_client: Any) -> None:
        self.client = api_client

    async def _send(self, call: Call) -> Any:
        args = call.call_api_args()
        if isinstance(call.timeout, tuple):
            # kubernetes_asyncio before 31 hands the timeout to aiohttp as it is, and aiohttp
            # takes a number or a ClientTimeout, not the (connect, read) pair of urllib3.
            import aiohttp

            connect, read = call.timeout
            args["_request_timeout"] = aiohttp.ClientTimeout(
                connect=connect, sock_connect=connect, sock_read=read
            )
        resp = await self.client.call_api(call.path, call.method, **args)
        # Without preloading, kubernetes_asyncio does not check the status itself.
        if not 200 <= resp.status <= 299:
            data = await resp.read()
            resp.release()
            raise _async_api_exception(resp.status, resp.reason or "", data, resp.headers)
        return resp

    request = _async_method(_request)
    apply = _async_method(_apply)
    text = _async_method(_text_of)

    @retry_transient
    async def _open_watch(self, path: str, query: dict[str, Any], timeout_seconds: int) -> Any:
        return await self._send(watch_call(path, query, timeout_seconds, timeout_seconds + 15))

    async def watch(
        self, path: str, query: dict[str, Any], timeout_seconds: int
    ) -> AsyncGenerator[dict[str, Any], None]:
        resp = await self._open_watch(path, query, timeout_seconds)
        try:
            while True:
                line = await resp.content.readline()
                if not line:
                    return
                line = line.strip()
                if line:
                    yield json.loads(line)
        finally:
            resp.release()


def is_not_found(exc: BaseException) -> bool:
    return api_status(exc) == 404
