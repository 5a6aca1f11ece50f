"""render --validate checks what the API server of the stated version checks beyond its
OpenAPI schema: env var names by that version's rule, and NetworkPolicy IP blocks."""

from __future__ import annotations

import copy

import pytest

from airflow_tfk.render.manifests import render
from airflow_tfk.render.schema_check import api_server_rules, validate_manifests
from airflow_tfk.spec.cluster import TFClusterSpec
from tests.helpers import IMAGENET


def _job():
    spec = TFClusterSpec.from_dict(
        {**IMAGENET, "network_policy": {"egress": "restricted", "egress_to": [{"cidr": "10.0.0.0/8"}]}}
    )
    manifests = render(spec)
    job = next(m for m in manifests if m["kind"] == "Job")
    policy = next(m for m in manifests if m["kind"] == "NetworkPolicy")
    return job, policy


def _with_env(job, name):
    job = copy.deepcopy(job)
    job["spec"]["template"]["spec"]["containers"][0]["env"].append({"name": name, "value": "v"})
    return job


@pytest.mark.parametrize("name", [".", "..", "..x", "A B", "1X"])
def test_strict_env_names_before_1_32(name):
    job, _ = _job()
    assert api_server_rules(job, "1.29") == []
    for version in ("1.29", "1.30", "1.31"):
        (message,) = api_server_rules(_with_env(job, name), version)
        assert ".env[" in message and repr(name) in message
    # RelaxedEnvironmentVariableValidation, on by default from 1.32: printable ASCII but '='
    assert api_server_rules(_with_env(job, name), "1.32") == []
    assert api_server_rules(_with_env(job, name), "1.36") == []


@pytest.mark.parametrize("name", ["A=B", "", "é", "A\tB"])
def test_names_no_version_takes(name):
    job, _ = _job()
    for version in ("1.29", "1.36"):
        assert len(api_server_rules(_with_env(job, name), version)) == 1


@pytest.mark.parametrize(
    ("block", "words"),
    [
        ({"cidr": "10.0.0.0/8", "except": ["10.0.0.0/8"]}, "strict subset"),
        ({"cidr": "fe80::%eth0/64"}, "zone"),
        ({"cidr": "::ffff:10.0.0.0/104"}, "IPv4-mapped"),
        ({"cidr": "10.0.0.0/8", "except": ["11.0.0.0/16"]}, "strict subset"),
    ],
)
def test_network_policy_ip_blocks_as_the_api_server_checks_them(block, words):
    _, policy = _job()
    assert api_server_rules(policy, "1.36") == []
    policy = copy.deepcopy(policy)
    policy["spec"]["egress"][-1]["to"] = [{"ipBlock": block}]
    (message,) = api_server_rules(policy, "1.36")
    assert words in message and "ipBlock" in message
    findings = validate_manifests([policy], "1.36")
    assert any(words in f.message for f in findings)
