"""The accepted half of the hostile-input corpus (tests/hostile/corpus.py): every object
it renders is admitted by the real API server - a server-side apply dry run with strict
field validation, in a namespace enforcing the restricted Pod Security Standard - so
"accepted by the spec" never means "refused at create time".
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.render.manifests import render
from airflow_tfk.spec.cluster import TFClusterSpec
from airflow_tfk.spec.yaml_reader import load_yaml_mapping
from k8s_integration import _tfk

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hostile.corpus import cases
from hostile.test_hostile_spec import accepted_specs

pytestmark = pytest.mark.k8s
tfk_ns = _tfk.tfk_ns  # fixture

ACCEPTED = [c for c in cases() if c.field is None]


def test_every_accepted_case_is_admitted_by_the_api_server(k8s_api, tfk_ns) -> None:
    assert len(ACCEPTED) >= 20
    refused = []
    for case in ACCEPTED:
        data = case.python if case.python is not None else load_yaml_mapping(case.text)
        spec = TFClusterSpec.from_dict(data)
        per_training = spec.namespace_per_training
        # The objects go to the test's namespace (a per-training one would not exist in a
        # dry run); the Namespace object itself is dry-run on its own.
        spec = dataclasses.replace(spec, namespace=tfk_ns, namespace_per_training=False)
        identity = None
        if "--dag-id" in case.cli_args:
            a = list(case.cli_args)
            identity = RunIdentity(
                a[a.index("--dag-id") + 1],
                a[a.index("--task-id") + 1],
                a[a.index("--run-id") + 1],
                int(a[a.index("--map-index") + 1]) if "--map-index" in a else -1,
            )
        manifests = render(spec, identity)
        if per_training:
            manifests = render(dataclasses.replace(spec, namespace_per_training=True), identity)[:1]
        for m in manifests:
            try:
                status, warning = _tfk.apply_dry_run(k8s_api, m, tfk_ns)
            except Exception as exc:  # collected, reported together
                refused.append((case.id, m["kind"], str(getattr(exc, "body", exc))[:300]))
                continue
            if status not in (200, 201) or warning:  # a dry-run create answers 201
                refused.append((case.id, m["kind"], f"{status} {warning}"))
    assert refused == [], refused


def test_accepted_cases_of_the_spec_classes_are_admitted(k8s_api, tfk_ns) -> None:
    """Issue 22's classes (NetworkPolicy blocks, dns_to, env names, label domains, long
    lists): what the spec accepts, the API server admits."""
    refused = []
    specs = accepted_specs()
    assert len(specs) >= 10
    for case_id, data in specs:
        spec = dataclasses.replace(TFClusterSpec.from_dict(data), namespace=tfk_ns)
        for m in render(spec):
            try:
                status, warning = _tfk.apply_dry_run(k8s_api, m, tfk_ns)
            except Exception as exc:  # collected, reported together
                refused.append((case_id, m["kind"], str(getattr(exc, "body", exc))[:300]))
                continue
            if status not in (200, 201) or warning:
                refused.append((case_id, m["kind"], f"{status} {warning}"))
    assert refused == [], refused


# What the spec refuses in a NetworkPolicy, put into a rendered policy by hand: the API
# server refuses it too, so the spec's rule is the server's and no stricter by accident.
SERVER_REFUSES_BLOCKS = [
    {"cidr": "10.0.0.0/8", "except": ["10.0.0.0/8"]},
    {"cidr": "fd00::/8", "except": ["fd00::/8"]},
    {"cidr": "10.0.0.0/16", "except": ["10.0.0.0/8"]},
    {"cidr": "fe80::%eth0/64"},
    {"cidr": "::ffff:10.0.0.0/104"},
    {"cidr": "::/0", "except": ["::ffff:10.0.0.0/104"]},
]


def test_the_api_server_refuses_the_blocks_the_spec_refuses(k8s_api, tfk_ns) -> None:
    from kubernetes.client.exceptions import ApiException

    spec = TFClusterSpec.from_dict(
        {
            "name": "blocks",
            "image": "tf:1",
            "command": ["python", "t.py"],
            "mode": "all_reduce",
            "worker": {"replicas": 1},
            "namespace": tfk_ns,
            "network_policy": {"egress": "restricted", "egress_to": [{"cidr": "10.0.0.0/8"}]},
        }
    )
    (policy,) = [m for m in render(spec) if m["kind"] == "NetworkPolicy"]
    status, warning = _tfk.apply_dry_run(k8s_api, policy, tfk_ns)
    assert status in (200, 201) and not warning
    admitted = []
    for block in SERVER_REFUSES_BLOCKS:
        bad = json.loads(json.dumps(policy))
        bad["spec"]["egress"][-1]["to"] = [{"ipBlock": block}]
        try:
            status, _ = _tfk.apply_dry_run(k8s_api, bad, tfk_ns)
        except ApiException as exc:
            assert exc.status == 422, exc
            continue
        admitted.append((block, status))
    assert admitted == []
