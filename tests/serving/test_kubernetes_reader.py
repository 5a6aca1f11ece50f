"""The store-reader Job's clean-up on Kubernetes: a failed delete is logged, not raised
(the Job's ttlSecondsAfterFinished removes it anyway). Regression: the reader path bound
the log text to ``log``, shadowing the module logger exactly where this warning is
written, so the warning itself crashed with AttributeError.

The API is a stand-in object (a unit test of one error path; the HTTP paths are proven
against the API double in test_kubernetes_publish.py)."""

from __future__ import annotations

import logging

import pytest

from airflow_tfk.serving.kubernetes import KubernetesServing
from airflow_tfk.serving.spec import ServingSpec


class ApiException(Exception):  # matched by name, like both clients' ApiException
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.body = '{"message": "etcd timeout"}'


class FailingDeletes:
    def request(self, method: str, path: str, *args: object) -> tuple[int, object]:
        assert method == "DELETE" and "/jobs/" in path
        raise ApiException(500)


def test_a_failed_reader_job_delete_is_logged(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    target = KubernetesServing(ServingSpec(model_name="linear", claim="models"))
    monkeypatch.setattr(KubernetesServing, "api", property(lambda self: FailingDeletes()))
    monkeypatch.setattr(target, "_apply", lambda manifest: 201)
    monkeypatch.setattr(target, "_job_log", lambda job: "tfk-versions: 1 2\ntfk-version: 2\n")
    with caplog.at_level(logging.WARNING, logger="airflow_tfk.serving.kubernetes"):
        assert target.exported_versions() == [1, 2]
    assert any(
        "could not delete the store reader Job" in r.message and "etcd timeout" in r.message
        for r in caplog.records
    )
