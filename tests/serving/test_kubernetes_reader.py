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


class ReaderPod:
    """One finished reader pod whose log the API server cut at the read's bound (the
    bound itself: tests/kube/test_api.py)."""

    def __init__(self, log: str) -> None:
        self.log = log

    def request(self, method: str, path: str, *args: object) -> tuple[int, object]:
        if method == "DELETE":
            return 200, {}
        return 200, {"items": [{"metadata": {"name": "reader-x"}, "status": {"phase": "Succeeded"}}]}

    def text(self, path: str, query: dict | None = None) -> str:
        from airflow_tfk.kube.api import LOG_LIMIT_BYTES

        return self.log.encode()[:LOG_LIMIT_BYTES].decode("utf-8", "ignore")


def test_a_reader_log_cut_off_at_the_read_bound_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A store that makes the reader print more than a log read takes (thousands of version
    directories with long names, say) gives a partial answer: the publish says so instead
    of trusting it."""
    from airflow_tfk.kube.api import LOG_LIMIT_BYTES
    from airflow_tfk.serving.base import ServingError

    versions = " ".join(f"{'0' * 200}{i}" for i in range(LOG_LIMIT_BYTES // 200 + 10))
    pod = ReaderPod(f"tfk-versions: {versions}\ntfk-version: 1\n")
    monkeypatch.setattr(KubernetesServing, "api", property(lambda self: pod))
    target = KubernetesServing(ServingSpec(model_name="linear", claim="models"))
    monkeypatch.setattr(target, "_apply", lambda manifest: 201)
    with pytest.raises(ServingError, match=f"printed {LOG_LIMIT_BYTES} bytes or more.*linear"):
        target.exported_versions()
    pod.log = "tfk-versions: 1 2\ntfk-version: 2\ntfk-end\n"
    small = KubernetesServing(ServingSpec(model_name="linear", claim="models"))
    monkeypatch.setattr(small, "_apply", lambda manifest: 201)
    assert small.exported_versions() == [1, 2]


class SettlingLog(ReaderPod):
    """A finished reader whose log the runtime has not written to its end at first."""

    def __init__(self, logs: list[str]) -> None:
        super().__init__(logs[-1])
        self.logs, self.reads = logs, 0

    def text(self, path: str, query: dict | None = None) -> str:
        self.reads += 1
        return self.logs[min(self.reads, len(self.logs)) - 1]


def test_a_reader_log_read_before_its_last_line_is_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kubelet can serve a finished container's log before the runtime wrote its last
    lines: the metrics line missing from such a read would read as "no metrics". The reader
    ends with ``tfk-end``; a log without it is read again, and one that never gets it fails
    the publish saying so, after READER_LOG_SETTLE_SECONDS."""
    import airflow_tfk.serving.kubernetes as kubernetes
    from airflow_tfk.serving.base import ServingError

    monkeypatch.setattr(kubernetes.time, "sleep", lambda s: None)
    whole = (
        'tfk-versions: 2\ntfk-version: 2\ntfk-metrics: {"accuracy": 0.9}\n'
        'tfk-sample:\n{"instances": [[1]]}\ntfk-end\n'
    )
    pod = SettlingLog(["tfk-versions: 2\ntfk-version: 2\n", whole])
    monkeypatch.setattr(KubernetesServing, "api", property(lambda self: pod))
    target = KubernetesServing(ServingSpec(model_name="linear", claim="models"))
    monkeypatch.setattr(target, "_apply", lambda manifest: 201)
    assert target.version_metrics(2) == {"accuracy": 0.9} and pod.reads == 2
    assert target.sample_request(2) == {"instances": [[1]]}

    never = SettlingLog(["tfk-versions: 2\ntfk-version: 2\n"])
    monkeypatch.setattr(KubernetesServing, "api", property(lambda self: never))
    clock = iter(range(0, 10_000, 5))
    monkeypatch.setattr(kubernetes.time, "monotonic", lambda: float(next(clock)))
    target = KubernetesServing(ServingSpec(model_name="linear", claim="models"))
    monkeypatch.setattr(target, "_apply", lambda manifest: 201)
    with pytest.raises(ServingError, match="its log has no last line .'tfk-end'. after 30 s"):
        target.version_metrics(2)
    assert 2 <= never.reads <= 10  # read again until the settle time, not the reader's 300 s
