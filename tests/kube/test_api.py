"""The raw-JSON API: each operation is one plan, run by the sync and the async client.

Driven through the REAL ``kubernetes`` / ``kubernetes_asyncio`` clients against
``tests/backends/k8s_double.py``, the HTTP TEST DOUBLE of the API server (it can inject
a 500 on demand, which the real control plane cannot).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_tfk.kube import api as kube_api
from airflow_tfk.kube import retry
from airflow_tfk.kube.api import AsyncApi, Call, SyncApi
from tests.backends.k8s_double import KubeApiDouble

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p0", "namespace": "default"},
    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
}
PODS = "/api/v1/namespaces/default/pods"


@pytest.fixture(scope="module")
def double() -> Iterator[KubeApiDouble]:
    api = KubeApiDouble().start()
    yield api
    api.stop()


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retry, "BASE_DELAY", 0.01)


def sync_api(double: KubeApiDouble) -> SyncApi:
    from kubernetes import client

    return SyncApi(client.ApiClient(client.Configuration(host=double.url)))


async def with_async_api(double: KubeApiDouble, use: Any) -> Any:
    from kubernetes_asyncio import client

    async with client.ApiClient(client.Configuration(host=double.url)) as api_client:
        return await use(AsyncApi(api_client))


def test_a_call_asks_for_raw_json_with_the_hooks_auth() -> None:
    call = Call("GET", "/p", {"watch": True, "limit": 5, "continue": None}, accept="*/*")
    args = call.call_api_args()
    assert args["query_params"] == [("watch", "true"), ("limit", "5")]
    assert args["header_params"] == {"Accept": "*/*", "Content-Type": "application/json"}
    assert args["auth_settings"] == ["BearerToken"]
    assert args["_preload_content"] is False
    assert args["_request_timeout"] == kube_api.REQUEST_TIMEOUT


def test_both_clients_have_each_operation_from_one_plan() -> None:
    for name in ("request", "apply", "text"):
        sync_method, async_method = getattr(SyncApi, name), getattr(AsyncApi, name)
        assert sync_method.__doc__ == async_method.__doc__ and sync_method.__doc__
        assert (sync_method.__qualname__, async_method.__qualname__) == (
            f"SyncApi.{name}",
            f"AsyncApi.{name}",
        )
        assert asyncio.iscoroutinefunction(async_method) and not asyncio.iscoroutinefunction(sync_method)


def test_sync_and_async_clients_give_the_same_answers(double: KubeApiDouble) -> None:
    sync = sync_api(double)

    def run_sync() -> list[Any]:
        created = sync.apply(f"{PODS}/p0", POD, "tfk-test")[0]
        again = sync.apply(f"{PODS}/p0", POD, "tfk-test")[0]
        double.set_log("p0", "one\ntwo\n")
        status, body = sync.request("GET", f"{PODS}/p0")
        text = sync.text(f"{PODS}/p0/log")
        sync.request("DELETE", f"{PODS}/p0")
        return [created, again, status, body["metadata"]["name"], text]

    async def run_async(api: AsyncApi) -> list[Any]:
        created = (await api.apply(f"{PODS}/p0", POD, "tfk-test"))[0]
        again = (await api.apply(f"{PODS}/p0", POD, "tfk-test"))[0]
        double.set_log("p0", "one\ntwo\n")
        status, body = await api.request("GET", f"{PODS}/p0")
        text = await api.text(f"{PODS}/p0/log")
        await api.request("DELETE", f"{PODS}/p0")
        return [created, again, status, body["metadata"]["name"], text]

    expected = [201, 200, 200, "p0", "one\ntwo\n"]
    assert run_sync() == expected
    assert asyncio.run(with_async_api(double, run_async)) == expected


def test_each_operation_keeps_its_retry_policy_on_both_clients(double: KubeApiDouble) -> None:
    sync = sync_api(double)
    sync.apply(f"{PODS}/p1", {**POD, "metadata": {"name": "p1"}}, "tfk-test")
    double.set_log("p1", "log\n")
    # A 500 on a log read is the kubelet out of reach: not retried. On a GET it is.
    double.inject("GET", r"/pods/p1/log$", 500, times=1)
    with pytest.raises(Exception) as failed:
        sync.text(f"{PODS}/p1/log")
    assert retry.api_status(failed.value) == 500
    double.inject("GET", r"/pods/p1$", 500, times=1)
    assert sync.request("GET", f"{PODS}/p1")[0] == 200

    async def run_async(api: AsyncApi) -> tuple[int | None, int]:
        double.inject("GET", r"/pods/p1/log$", 500, times=1)
        try:
            await api.text(f"{PODS}/p1/log")
            status = None
        except Exception as exc:
            status = retry.api_status(exc)
        double.inject("GET", r"/pods/p1$", 500, times=1)
        return status, (await api.request("GET", f"{PODS}/p1"))[0]

    assert asyncio.run(with_async_api(double, run_async)) == (500, 200)
    sync.request("DELETE", f"{PODS}/p1")


def test_both_watches_decode_the_same_events(double: KubeApiDouble) -> None:
    sync = sync_api(double)
    _, listed = sync.request("GET", PODS)
    version = listed["metadata"]["resourceVersion"]
    sync.apply(f"{PODS}/p2", {**POD, "metadata": {"name": "p2"}}, "tfk-test")
    sync.request("DELETE", f"{PODS}/p2")
    query = {"resourceVersion": version}
    seen = [(e["type"], e["object"]["metadata"]["name"]) for e in sync.watch(PODS, query, 1)]

    async def run_async(api: AsyncApi) -> list[tuple[str, str]]:
        return [(e["type"], e["object"]["metadata"]["name"]) async for e in api.watch(PODS, query, 1)]

    assert seen == [("ADDED", "p2"), ("DELETED", "p2")]
    assert asyncio.run(with_async_api(double, run_async)) == seen


def test_a_log_read_takes_at_most_the_bound_on_both_clients(double: KubeApiDouble) -> None:
    """A pod's log is written by whatever runs in it: one line can be any size, so
    ``tailLines`` is no bound. Every read asks the server for at most LOG_LIMIT_BYTES (a
    caller may ask for less, never more)."""
    sync = sync_api(double)
    sync.apply(f"{PODS}/p2", {**POD, "metadata": {"name": "p2"}}, "tfk-test")
    double.set_log("p2", "x" * (kube_api.LOG_LIMIT_BYTES + 4096))  # one line past the bound
    assert len(sync.text(f"{PODS}/p2/log")) == kube_api.LOG_LIMIT_BYTES
    assert len(sync.text(f"{PODS}/p2/log", {"tailLines": 1})) == kube_api.LOG_LIMIT_BYTES
    assert len(sync.text(f"{PODS}/p2/log", {"limitBytes": 10})) == 10
    assert len(sync.text(f"{PODS}/p2/log", {"limitBytes": 1 << 30})) == kube_api.LOG_LIMIT_BYTES

    async def run_async(api: AsyncApi) -> int:
        return len(await api.text(f"{PODS}/p2/log"))

    assert asyncio.run(with_async_api(double, run_async)) == kube_api.LOG_LIMIT_BYTES
