"""API parity as a class: every case of the generated corpus of pod rules and template
patches (tests/render/pod_parity_corpus.py) gets the same verdict offline (spec + render,
the schema and the API server's semantic checks: airflow_tfk/render/pod_semantics.py) as
from the real API server: a server-side-apply dry run (dryRun=All, strict field
validation) of the rendered Job, and of a pod of its template as the Job controller would
create it (the Priority and RuntimeClass admission plugins judge pods, not Jobs). The
namespace enforces no Pod Security level: this is the API's own validation, not a policy.

Kubernetes versions covered: the harness's one control plane (tests/k8s/README.md).
"""

from __future__ import annotations

import copy
import json
from unittest import mock

import pytest
from kubernetes import client

from airflow_tfk.render.manifests import render
from airflow_tfk.render.pods import role_templates
from airflow_tfk.spec.cluster import TFClusterSpec
from tests.render.pod_parity_corpus import STRICTER, cases
from tests.render.test_pod_semantics import offline_verdict

pytestmark = pytest.mark.k8s


def _dry_run(api: client.ApiClient, path: str, body: dict) -> str | None:
    """None when the API server admits ``body`` (server-side apply, dry run), else why not."""
    try:
        api.call_api(
            path,
            "PATCH",
            query_params=[("fieldManager", "airflow-tfk"), ("fieldValidation", "Strict"), ("dryRun", "All")],
            header_params={"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
        )
    except client.ApiException as exc:
        try:
            return f"{exc.status}: {json.loads(exc.body)['message']}"
        except (ValueError, KeyError, TypeError):
            return f"{exc.status}: {exc.body}"
    return None


def _unchecked(data: dict, namespace: str) -> list[dict]:
    """What the spec renders with the offline pod checks off: what the API server judges."""
    spec = TFClusterSpec.from_dict({**data, "namespace": namespace})
    with (
        mock.patch("airflow_tfk.render.manifests.check_pod_semantics"),
        mock.patch("airflow_tfk.render.pod_schema.check_pod_rules"),
    ):
        return render(spec)


def api_verdict(api: client.ApiClient, data: dict, namespace: str) -> str | None:
    for doc in _unchecked(data, namespace):
        if doc["kind"] != "Job":
            continue
        name = doc["metadata"]["name"]
        why = _dry_run(api, f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}", doc)
        if why:
            return f"Job {name}: {why}"
        for _role, holder in role_templates(doc):
            template = copy.deepcopy(holder["template"])
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {**template.get("metadata", {}), "name": f"{name}-0", "namespace": namespace},
                "spec": template["spec"],
            }
            why = _dry_run(api, f"/api/v1/namespaces/{namespace}/pods/{name}-0", pod)
            if why:
                return f"Pod {name}-0: {why}"
    return None


def test_offline_and_the_api_server_agree_on_every_case(k8s_api, k8s_namespace) -> None:
    version = client.VersionApi(k8s_api).get_code().git_version
    corpus = cases()
    disagree, stricter, refused, rows = [], [], 0, []
    for case in corpus:
        offline = offline_verdict(case.spec)
        api = api_verdict(k8s_api, case.spec, k8s_namespace)
        refused += api is not None
        rows.append((case.id, None if offline is None else offline.field, api))
        if (offline is None) == (api is None):
            continue
        if case.id.split("-", 1)[1] in STRICTER and offline is not None:
            stricter.append(case.id)
            continue
        disagree.append((case.id, str(offline) if offline else None, api))
    print(
        f"API parity on Kubernetes {version}: {len(corpus)} cases, {refused} refused by the API server, "
        f"{len(disagree)} disagreements, offline stricter by design: {stricter}"
    )
    assert disagree == [], "\n".join(map(str, disagree))
    # every refusal the API server gave was refused offline, on the field the case set
    for (case_id, field, api), case in zip(rows, corpus, strict=True):
        if api is not None:
            assert field is not None and case.refused is not None and field.startswith(case.refused), (
                case_id,
                field,
                api,
            )
    assert refused >= 40
