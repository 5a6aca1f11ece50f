"""The platform policy's Pod Security checks agree with the API server's own PodSecurity
admission, case by case, on the hostile-pod corpus (tests/hostile/pod_security_corpus.py).

Every pod template of every case is created as a Pod, dry run, in namespaces enforcing
each level (``pod-security.kubernetes.io/enforce``): privileged, baseline and restricted
at ``latest``, and baseline and restricted pinned to v1.29 (the oldest Kubernetes the
provider supports; ``enforce-version``). The privileged namespace is the control: the API
server must admit every pod there, so each refusal elsewhere is the admission's, and the
corpus holds only pods that are otherwise valid. For each pod and level the offline
verdict must be the server's (admitted, or refused), and a refusal's text must be the one
:func:`~airflow_tfk.spec.platform_policy.pod_security_detail` predicts, word for word.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from airflow_tfk.spec.platform_policy import pod_security_detail
from k8s_integration import _tfk
from tests.hostile.pod_security_corpus import cases, pod_templates

pytestmark = pytest.mark.k8s

#: (level, version) of each namespace; privileged first: it checks that every pod is valid
LEVELS = [
    ("privileged", "latest"),
    ("baseline", "latest"),
    ("restricted", "latest"),
    ("baseline", "v1.29"),
    ("restricted", "v1.29"),
]
_REFUSED = re.compile(r'violates PodSecurity "([^"]+)": (.*)\Z', re.S)


@pytest.fixture(scope="module")
def pss_namespaces(k8s_api) -> Iterator[dict[tuple[str, str], str]]:
    core = client.CoreV1Api(k8s_api)
    run = uuid.uuid4().hex[:6]
    made = {}
    try:
        for level, version in LEVELS:
            name = f"pss-{level}-{version.replace('.', '')}-{run}"
            labels = {
                "pod-security.kubernetes.io/enforce": level,
                "pod-security.kubernetes.io/enforce-version": version,
            }
            core.create_namespace({"metadata": {"name": name, "labels": labels}})
            made[(level, version)] = name
        for name in made.values():  # the ServiceAccount admission needs the namespace's default
            _tfk.wait_for(
                f"the default service account of {name}",
                lambda n=name: (
                    core.list_namespaced_service_account(n, field_selector="metadata.name=default").items
                ),
                60,
            )
        yield made
    finally:
        for name in made.values():
            core.delete_namespace(name)


def _pod(name: str, template: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in (template.get("metadata") or {}).items() if k in ("labels", "annotations")}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {**meta, "name": name}, "spec": template["spec"]}


def _create(api: client.ApiClient, namespace: str, pod: dict[str, Any]) -> tuple[str, str]:
    """``("admitted", "")``, ``("refused", <label>: <detail>)`` (PodSecurity), or
    ``("invalid", <status> <message>)`` (anything else refused it)."""
    try:
        api.call_api(
            f"/api/v1/namespaces/{namespace}/pods",
            "POST",
            query_params=[("dryRun", "All"), ("fieldValidation", "Strict")],
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            body=pod,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
        )
    except ApiException as exc:
        message = str(json.loads(exc.body or "{}").get("message", exc.body))
        m = _REFUSED.search(message)
        if exc.status == 403 and m is not None:
            return "refused", f"{m.group(1)}: {m.group(2)}"
        return "invalid", f"{exc.status} {message}"[:600]
    return "admitted", ""


def test_the_api_server_judges_every_case_as_the_policy_does(k8s_api, pss_namespaces) -> None:
    pods = []
    for i, case in enumerate(cases()):
        for role, _, template in pod_templates(case):
            pods.append((case.id, role, _pod(f"pss-{i}-{role}", template), template))
    assert len({case_id for case_id, *_ in pods}) >= 300

    started = time.monotonic()
    invalid, disagreements = [], []
    verdicts = {"admitted": 0, "refused": 0}
    with ThreadPoolExecutor(max_workers=4) as pool:
        for level, version in LEVELS:
            namespace = pss_namespaces[(level, version)]
            answers = pool.map(lambda p, ns=namespace: _create(k8s_api, ns, p[2]), pods)
            for (case_id, role, _, template), (verdict, text) in zip(pods, answers, strict=True):
                if verdict == "invalid":
                    invalid.append((case_id, role, level, version, text))
                    continue
                verdicts[verdict] += 1
                detail = pod_security_detail(template, level, version)
                offline = ("admitted", "") if detail is None else ("refused", f"{level}:{version}: {detail}")
                if offline != (verdict, text):
                    disagreements.append((case_id, role, f"{level}:{version}", offline, (verdict, text)))
    took = time.monotonic() - started
    print(
        f"\n{len(pods)} pods of {len({p[0] for p in pods})} cases x {len(LEVELS)} levels in {took:.1f} s: "
        f"{verdicts['admitted']} admitted, {verdicts['refused']} refused by PodSecurity, "
        f"{len(invalid)} invalid, {len(disagreements)} disagreements"
    )
    assert invalid == [], "\n".join(map(repr, invalid))
    assert disagreements == [], "\n".join(map(repr, disagreements))
    # both verdicts are exercised at every level that checks anything
    assert verdicts["refused"] >= 3 * 300 and verdicts["admitted"] >= len(pods)
