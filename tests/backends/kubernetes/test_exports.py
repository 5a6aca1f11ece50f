"""The pure half of setting a failed run's exports aside on Kubernetes: which logged
exports lie on a claim, and the Job that renames them (its real run is in
tests/k8s_node/test_exports.py)."""

from __future__ import annotations

import json
import subprocess

from airflow_tfk.backends.base import ClusterRef, RunExport
from airflow_tfk.backends.kubernetes.exports import SCRIPT, claim_mounts, exports_in, job_manifest, placement


def _job(role: str, image: str = "train:1") -> dict:
    return {
        "metadata": {"labels": {"tfk.airflow.apache.org/role": role}},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "image": image,
                            "volumeMounts": [
                                {"name": "tfk-scratch", "mountPath": "/tfk/scratch"},
                                {"name": "models", "mountPath": "/tfk/models/"},
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "tfk-scratch", "emptyDir": {}},
                        {"name": "models", "persistentVolumeClaim": {"claimName": "store"}},
                    ],
                }
            }
        },
    }


def _line(path: object) -> str:
    return json.dumps({"tfk": "export", "path": path, "model_name": "m", "version": 1})


def test_only_versions_on_a_claim_are_found() -> None:
    mounts = claim_mounts([_job("worker")])
    assert mounts == {"/tfk/models": ("store", "train:1")}
    log = "\n".join(
        [
            "step 1/10",
            _line("/tfk/models/m/3"),
            _line("/tfk/models/m/3"),  # reported twice: one export
            _line("/tfk/models/../etc/9"),  # normalised: not on the claim
            _line("/tfk/scratch/m/4"),  # an emptyDir, gone with the pod
            _line("/tfk/models/m/latest"),  # not a version
            _line("relative/5"),
            _line(7),
            '{"tfk": "metrics", "path": "/tfk/models/m/6"}',
        ]
    )
    assert exports_in(log, mounts) == [RunExport("/tfk/models/m/3", "store", "/tfk/models", "train:1")]


def test_the_job_mounts_the_claim_where_the_pods_had_it_and_escapes_the_paths() -> None:
    job = job_manifest(ClusterRef("c", "ns"), "store", "/tfk/models", "train:1", ["/tfk/models/$(X)/2"], "ab")
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == ["ab", "/tfk/models/$$(X)/2"]
    assert container["volumeMounts"] == [{"name": "models", "mountPath": "/tfk/models"}]
    assert pod["volumes"] == [{"name": "models", "persistentVolumeClaim": {"claimName": "store"}}]
    assert pod["securityContext"]["runAsUser"] == 1000 and pod["automountServiceAccountToken"] is False
    assert "tfk.airflow.apache.org/cluster" not in job["metadata"]["labels"]  # not part of the cluster
    assert len(job["metadata"]["name"]) <= 63


def test_the_job_runs_where_and_as_whom_the_pods_that_wrote_the_exports_ran() -> None:
    """A private registry, a tainted node pool, a required priority class or account: the
    set-aside Job pulls the training image and is scheduled as the training's pods were."""
    rules = {
        "imagePullSecrets": [{"name": "regcred"}],
        "nodeSelector": {"pool": "ml"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
        "priorityClassName": "ml-batch",
        "serviceAccountName": "trainer",
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}},
            "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
        },
    }
    other = _job("ps")
    other["spec"]["template"]["spec"]["volumes"] = []  # mounts no claim
    other["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "cpu"}
    worker = _job("worker")
    worker["spec"]["template"]["spec"].update(rules)
    where = placement([other, worker], "store")
    assert placement([other, worker], "elsewhere") == {}
    job = job_manifest(
        ClusterRef("c", "ns"), "store", "/tfk/models", "train:1", ["/tfk/models/m/2"], "ab", where
    )
    pod = job["spec"]["template"]["spec"]
    for key in ("imagePullSecrets", "nodeSelector", "tolerations", "priorityClassName", "serviceAccountName"):
        assert pod[key] == rules[key], key
    assert pod["affinity"] == {"nodeAffinity": rules["affinity"]["nodeAffinity"]}  # not the pods' spread
    assert pod["automountServiceAccountToken"] is False and pod["restartPolicy"] == "Never"


def test_the_script_renames_versions_only(tmp_path) -> None:
    model = tmp_path / "m"
    for name in ("1", "2", "x"):
        (model / name).mkdir(parents=True)
    out = subprocess.run(
        [
            "/bin/sh",
            "-c",
            SCRIPT,
            "tfk-set-aside",
            "ab",
            str(model / "1"),
            str(model / "x"),
            str(model / "5"),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert sorted(p.name for p in model.iterdir()) == [".failed-1-ab", "2", "x"]
    assert f"tfk-moved: {model / '1'}" in out.splitlines()
    assert f"tfk-skipped: {model / 'x'}" in out and f"tfk-absent: {model / '5'}" in out
