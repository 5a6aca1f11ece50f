import json
import socket

import pytest

from airflow_tfk.runtime.cluster import (
    ClusterConfigError,
    ClusterWaitTimeout,
    ensure_tf_config,
    split_address,
    task_info,
    wait_for_cluster,
)

CLUSTER = {"chief": ["c0:2222"], "ps": ["p0:2222", "p1:2222"], "worker": ["w0:2222", "w1:2222"]}


def tfk_env(role="worker", index="1", **extra):
    env = {"TFK_CLUSTER": json.dumps(CLUSTER), "TFK_ROLE": role, "TFK_MODE": "parameter_server"}
    if index is not None:
        env["TFK_INDEX"] = index
    env.update(extra)
    return env


def test_from_tfk_variables():
    info = task_info(tfk_env())
    assert info.cluster == CLUSTER
    assert (info.role, info.index, info.mode) == ("worker", 1, "parameter_server")
    assert info.address == "w1:2222"
    assert info.tf_config() == {"cluster": CLUSTER, "task": {"type": "worker", "index": 1}}
    assert not info.is_chief


def test_job_completion_index_fallback():
    info = task_info(tfk_env(index=None, JOB_COMPLETION_INDEX="1"))
    assert info.index == 1
    # TFK_INDEX wins over JOB_COMPLETION_INDEX
    assert task_info(tfk_env(index="0", JOB_COMPLETION_INDEX="1")).index == 0


def test_tf_config_wins_and_is_used_verbatim():
    cfg = {"cluster": {"ps": ["a:1"], "worker": ["b:2"]}, "task": {"type": "ps", "index": 0}}
    info = task_info({**tfk_env(), "TF_CONFIG": json.dumps(cfg)})
    assert info.cluster == cfg["cluster"] and info.role == "ps" and info.index == 0


def test_ensure_tf_config_sets_it_once():
    env = tfk_env()
    info = ensure_tf_config(env)
    assert json.loads(env["TF_CONFIG"]) == info.tf_config()
    env["TF_CONFIG"] = json.dumps({"cluster": {"worker": ["x:1"]}, "task": {"type": "worker"}})
    assert ensure_tf_config(env).cluster == {"worker": ["x:1"]}


def test_chief_is_the_chief_or_worker_zero():
    assert task_info(tfk_env("chief", "0")).is_chief
    assert not task_info(tfk_env("worker", "0")).is_chief
    no_chief = {
        "TFK_CLUSTER": json.dumps({"ps": ["p:1"], "worker": ["w0:1", "w1:1"]}),
        "TFK_ROLE": "worker",
        "TFK_INDEX": "0",
    }
    assert task_info(no_chief).is_chief


def test_evaluator_is_not_in_the_map():
    info = task_info(tfk_env("evaluator", "0"))
    assert info.address is None and not info.is_chief


def test_tf1_flags():
    info = task_info(tfk_env("worker", "1"))
    assert info.tf1_flags() == [
        "--ps_hosts=p0:2222,p1:2222",
        "--worker_hosts=w0:2222,w1:2222",
        "--job_name=worker",
        "--task_index=1",
    ]


@pytest.mark.parametrize(
    "env, message",
    [
        ({}, "no cluster"),
        ({"TFK_CLUSTER": "{nope", "TFK_ROLE": "worker"}, "TFK_CLUSTER is not valid JSON"),
        ({"TFK_CLUSTER": "[]", "TFK_ROLE": "worker"}, "non-empty JSON object"),
        ({"TFK_CLUSTER": '{"worker": "a:1"}', "TFK_ROLE": "worker"}, "must be a list"),
        ({"TFK_CLUSTER": '{"worker": ["a"]}', "TFK_ROLE": "worker"}, "invalid address"),
        ({"TFK_CLUSTER": '{"worker": ["a:1"]}', "TFK_ROLE": "boss"}, "task type must be one of"),
        (
            {"TFK_CLUSTER": '{"worker": ["a:1"]}', "TFK_ROLE": "worker", "TFK_INDEX": "x"},
            "must be an integer",
        ),
        (
            {"TFK_CLUSTER": '{"worker": ["a:1"]}', "TFK_ROLE": "worker", "TFK_INDEX": "1"},
            "task worker:1 is not in the cluster",
        ),
        ({"TFK_CLUSTER": '{"worker": ["a:1"]}', "TFK_ROLE": "worker", "TFK_INDEX": "-1"}, "an integer >= 0"),
        ({"TF_CONFIG": "nope"}, "TF_CONFIG is not valid JSON"),
    ],
)
def test_bad_environment(env, message):
    with pytest.raises(ClusterConfigError, match=message):
        task_info(env)


def test_split_address():
    assert split_address("host.ns.svc:2222") == ("host.ns.svc", 2222)
    assert split_address("[::1]:80") == ("::1", 80)
    with pytest.raises(ClusterConfigError):
        split_address("host:99999")


@pytest.mark.parametrize("port", ["²", "٣", "2222²", " 2222", "+2222", "2_222"])
def test_a_port_is_plain_ascii_digits(port):
    """``'²'.isdigit()`` is true and ``int('²')`` raises; ``int('٣')`` is 3: both are
    refused as a bad address, not a crash or a port of 3."""
    with pytest.raises(ClusterConfigError, match="invalid address"):
        split_address(f"host:{port}")
    env = {"TFK_CLUSTER": json.dumps({"worker": [f"w0:{port}"]}), "TFK_ROLE": "worker", "TFK_INDEX": "0"}
    with pytest.raises(ClusterConfigError, match="invalid address"):
        task_info(env)


@pytest.mark.parametrize("index", ["²", "٣", "1_0", " 1", "+1"])
def test_a_task_index_is_plain_ascii_digits(index):
    env = {"TFK_CLUSTER": json.dumps({"worker": ["w0:2222", "w1:2222"]}), "TFK_ROLE": "worker"}
    with pytest.raises(ClusterConfigError, match="the task index must be an integer"):
        task_info({**env, "TFK_INDEX": index})
    assert task_info({**env, "TFK_INDEX": "1"}).index == 1


@pytest.fixture
def listener():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    yield f"127.0.0.1:{s.getsockname()[1]}"
    s.close()


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"127.0.0.1:{port}"


def info_for(cluster, role="worker", index=0):
    return task_info({"TFK_CLUSTER": json.dumps(cluster), "TFK_ROLE": role, "TFK_INDEX": str(index)})


def test_wait_returns_when_all_up_and_skips_itself(listener):
    # this task's own address is not listening (its server starts later): skipped
    info = info_for({"ps": [listener], "worker": [closed_port()]}, "worker", 0)
    logs = []
    wait_for_cluster(info, timeout=5, log=logs.append)
    assert logs == []


def test_wait_logs_and_times_out_naming_the_missing_task(listener):
    missing = closed_port()
    info = info_for({"ps": [listener, missing], "worker": ["127.0.0.1:1"]}, "worker", 0)
    logs = []
    with pytest.raises(ClusterWaitTimeout, match=rf"ps:1 at {missing} \(TCP connect failed"):
        wait_for_cluster(info, timeout=0.5, interval=0.1, log=logs.append)
    assert any(f"waiting for ps:1 at {missing}" in line for line in logs)
    assert len(logs) == 1  # logged once, not every poll


def test_wait_for_dns(listener):
    info = info_for({"ps": ["no-such-host.invalid:2222"], "worker": [listener]}, "worker", 0)
    with pytest.raises(ClusterWaitTimeout, match="DNS lookup failed"):
        wait_for_cluster(info, timeout=0.2, interval=0.1, log=lambda m: None)


def test_wait_dns_only_and_selected_roles(listener):
    info = info_for({"ps": [closed_port()], "worker": [listener, closed_port()]}, "worker", 0)
    wait_for_cluster(info, tcp=False, timeout=1, log=lambda m: None)  # names resolve
    wait_for_cluster(info, roles=[], timeout=1, log=lambda m: None)
    with pytest.raises(ClusterWaitTimeout, match="worker:1"):
        wait_for_cluster(info, roles=["worker"], timeout=0.2, interval=0.1, log=lambda m: None)


def test_wait_reports_when_a_task_comes_up():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    addr = f"127.0.0.1:{s.getsockname()[1]}"
    info = info_for({"ps": [addr], "worker": ["127.0.0.1:1"]}, "worker", 0)
    logs = []

    def sleep(_):  # the ps starts listening during the first back-off
        s.listen()

    try:
        wait_for_cluster(info, timeout=5, interval=0.1, log=logs.append, sleep=sleep)
    finally:
        s.close()
    assert logs[0].startswith(f"waiting for ps:0 at {addr}") and logs[-1].endswith("is up")


def test_the_wait_stops_on_the_notice_naming_who_it_waited_for():
    import pytest

    from airflow_tfk.runtime.cluster import ClusterWaitStopped, TaskInfo, wait_for_cluster

    info = TaskInfo({"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:9"]}, "chief", 0)
    asked = []

    def stop():
        asked.append(1)
        return len(asked) > 1  # the notice comes after the first round

    with pytest.raises(ClusterWaitStopped, match=r"ps:0 at 127.0.0.1:9"):
        wait_for_cluster(info, roles=["ps"], timeout=60, sleep=lambda s: None, stop=stop, log=lambda m: None)


def test_unreachable_names_the_closed_peers_only():
    import socket

    from airflow_tfk.runtime.cluster import unreachable

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        up = f"127.0.0.1:{listening.getsockname()[1]}"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            closed = f"127.0.0.1:{s.getsockname()[1]}"  # bound, not listening: refused
            gone = unreachable([("ps", 0, up), ("worker", 1, closed)], connect_timeout=1)
    assert [(r, i, a) for r, i, a, _ in gone] == [("worker", 1, closed)]
    assert "refused" in gone[0][3]


def test_the_peer_watch_counts_a_ps_gone_at_the_second_look_only():
    import socket

    from airflow_tfk.runtime.cluster import PeerWatch, TaskInfo

    with socket.socket() as listening, socket.socket() as closed:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        closed.bind(("127.0.0.1", 0))  # bound, not listening: refused
        up = f"127.0.0.1:{listening.getsockname()[1]}"
        down = f"127.0.0.1:{closed.getsockname()[1]}"
        cluster = {"chief": ["127.0.0.1:1"], "ps": [up, down], "worker": [up, up]}
        watch = PeerWatch(TaskInfo(cluster, "chief", 0), workers=True)
        assert watch.gone() is None  # a first miss may be transient
        assert (
            watch.gone() == f"the ps the variables live on are gone (ps:1 at {down}: "
            "TCP connect failed (Connection refused))"
        )
        workers_gone = PeerWatch(
            TaskInfo({**cluster, "ps": [up], "worker": [down, down]}, "chief", 0), workers=True
        )
        workers_gone.gone()
        assert (workers_gone.gone() or "").startswith("every worker is gone (worker:0 at")
        # a between_graph worker waits on the ps only, not on the other workers
        assert not PeerWatch(TaskInfo({"worker": [down, up]}, "worker", 1), workers=False)


def test_a_peer_whose_name_does_not_resolve_in_time_counts_as_gone(monkeypatch, listener):
    """A deleted peer's name may take the resolver its whole bound (48 s on the real node,
    whose DNS has no upstream); a look gives it :attr:`PeerWatch.DNS_TIMEOUT`. A stand-in
    resolver that never answers for the ps's name, the real one for the rest."""
    import threading
    import time

    from airflow_tfk.runtime import cluster as cl

    real = socket.getaddrinfo
    release = threading.Event()

    def resolver(host, *args, **kwargs):
        if host == "ps-0.gone.svc":
            release.wait(60)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(cl.socket, "getaddrinfo", resolver)
    cluster = {"chief": ["127.0.0.1:1"], "ps": ["ps-0.gone.svc:2222"], "worker": [listener]}
    watch = cl.PeerWatch(cl.TaskInfo(cluster, "chief", 0), workers=True)
    try:
        started = time.monotonic()
        assert watch.gone() is None  # a first miss may be transient
        why = watch.gone()
        took = time.monotonic() - started
    finally:
        release.set()
    assert why == (
        "the ps the variables live on are gone "
        f"(ps:0 at ps-0.gone.svc:2222: DNS lookup did not answer within {cl.PeerWatch.DNS_TIMEOUT:g}s)"
    )
    assert took < 2 * cl.PeerWatch.DNS_TIMEOUT + 2, took
