"""`airflow-tfk render` checks the final pod templates, every patch applied, against the
platform's policy (Airflow's ``[tfk_policy]``; Pod Security ``restricted`` by default): a
spec cannot switch the hardening off, and only the deployment's configuration can relax it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BASE = """\
name: imagenet
image: tensorflow/tensorflow:2.21.0
command: ["python", "/opt/imagenet.py"]
ps: {replicas: 1}
worker: {replicas: 2}
"""

HOSTILE = {
    "privileged-sidecar": (
        "pod: {sidecars: [{name: s, image: busybox:1, securityContext: {privileged: true}}]}\n",
        "privileged",
    ),
    "host-pid-patch": ("pod: {template_patch: {spec: {hostPID: true}}}\n", "hostPID"),
    "root-patch": (
        "worker: {replicas: 2, pod: {template_patch: {spec: {securityContext: {runAsUser: 0}}}}}\n",
        "runAsUser",
    ),
    "host-path-root": (
        "pod: {volumes: [{name: root, hostPath: {path: /}}],"
        " volume_mounts: [{name: root, mountPath: /host}]}\n",
        "hostPath",
    ),
    "node-name": ("pod: {template_patch: {spec: {nodeName: node-1}}}\n", "nodeName"),
}


def _render(spec: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "spec.yaml"
    path.write_text(spec)
    return subprocess.run(
        [sys.executable, "-m", "airflow_tfk.cli.main", "render", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


def test_the_default_spec_meets_restricted(tmp_path: Path) -> None:
    out = _render(BASE, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "kind: Job" in out.stdout


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_spec_that_breaks_the_policy_is_refused_naming_the_field(tmp_path: Path, case: str) -> None:
    extra, word = HOSTILE[case]
    spec = BASE.replace("worker: {replicas: 2}\n", "") if extra.startswith("worker:") else BASE
    out = _render(spec + extra, tmp_path)
    assert out.returncode != 0, out.stdout[:500]
    assert out.stdout == ""
    assert word in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_only_the_deployments_configuration_relaxes_it(tmp_path: Path) -> None:
    volume = (
        "pod: {volumes: [{name: shared, hostPath: {path: /srv/data}}],"
        " volume_mounts: [{name: shared, mountPath: /shared}]}\n"
    )
    refused = _render(BASE + volume, tmp_path)
    assert refused.returncode != 0 and "hostPath" in refused.stderr, refused.stderr
    relaxed = {
        "AIRFLOW__TFK_POLICY__POD_SECURITY_LEVEL": "privileged",
        "AIRFLOW__TFK_POLICY__ALLOWED_HOST_PATHS": "/srv",
    }
    out = _render(BASE + volume, tmp_path, **relaxed)
    assert out.returncode == 0, out.stderr
    assert "path: /srv/data" in out.stdout


def test_an_unknown_policy_option_is_an_error_naming_it(tmp_path: Path) -> None:
    out = _render(BASE, tmp_path, AIRFLOW__TFK_POLICY__POD_SECURITY_LEVL="baseline")
    assert out.returncode != 0
    assert "pod_security_levl" in out.stderr.lower()
