"""The platform policy where a training file meets Airflow: its own pod settings at DAG parse
(no template rendered), its rendered pods in ``airflow-tfk validate``; the policy read from
``[tfk_policy]`` (here ``AIRFLOW__TFK_POLICY__*``), never from the file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from airflow_tfk.dagfactory.loader import load_folder

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = {"image": "registry.example/t:1", "mode": "all_reduce", "command": ["python", "t.py"]}
PRIVILEGED_SIDECAR = {
    "name": "agent",
    "image": "registry.example/a:1",
    "securityContext": {"privileged": True},
}


def _write(folder: Path, name: str, cluster: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps({"cluster": {**CLUSTER, **cluster}}))
    return path


@pytest.mark.parametrize(
    ("cluster", "field", "rule"),
    [
        (
            {"worker": {"replicas": 2, "pod": {"sidecars": [PRIVILEGED_SIDECAR]}}},
            "cluster.worker.pod.sidecars[0].securityContext.privileged",
            "pod-security/privileged",
        ),
        (
            {"worker": {"replicas": 1}, "pod": {"init_containers": [{**PRIVILEGED_SIDECAR, "name": "i"}]}},
            "cluster.pod.init_containers[0].securityContext.privileged",
            "pod-security/privileged",
        ),
        (
            {"worker": {"replicas": 1}, "pod": {"volumes": [{"name": "r", "hostPath": {"path": "/"}}]}},
            "cluster.pod.volumes[0].hostPath",
            "pod-security/restrictedVolumes",
        ),
        (
            {"worker": {"replicas": 1, "pod": {"template_patch": {"spec": {"hostIPC": True}}}}},
            "cluster.worker.pod.template_patch.spec.hostIPC",
            "platform/template-patch-security",
        ),
    ],
)
def test_a_training_file_the_policy_refuses_is_an_import_error_naming_the_field(
    tmp_path: Path, cluster: dict, field: str, rule: str
) -> None:
    _write(tmp_path, "t.yaml", cluster)
    result = load_folder(tmp_path)
    assert not result.dags
    messages = [e.describe() for error in result.errors for e in error.all()]
    assert any(f": {field}: " in m and f"[platform policy: {rule}]" in m for m in messages), messages


def test_the_platform_teams_configuration_decides_not_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path, "t.yaml", {"worker": {"replicas": 2, "pod": {"sidecars": [PRIVILEGED_SIDECAR]}}})
    monkeypatch.setenv("AIRFLOW__TFK_POLICY__POD_SECURITY_LEVEL", "privileged")
    result = load_folder(tmp_path)
    assert result.errors == [] and list(result.dags) == ["t"]
    # A policy key in the training file is an unknown key, not a setting.
    monkeypatch.delenv("AIRFLOW__TFK_POLICY__POD_SECURITY_LEVEL")
    _write(tmp_path, "t.yaml", {"worker": {"replicas": 1}, "pod_security_level": "privileged"})
    assert load_folder(tmp_path).errors


def test_validate_checks_the_rendered_pods_a_template_dir_changes(tmp_path: Path) -> None:
    """What only the templates add (here an override that puts the pods on the node's
    network) is refused by ``validate``, which renders; the DAG file itself loads."""
    from airflow_tfk.dagfactory.validate import run

    templates = tmp_path / "trainings" / "templates"  # beside the file, as the loader requires
    templates.mkdir(parents=True)
    macros = (ROOT / "templates" / "_macros.yaml.j2").read_text()
    hardened = "  automountServiceAccountToken: false\n"
    assert hardened in macros
    (templates / "_macros.yaml.j2").write_text(macros.replace(hardened, hardened + "  hostNetwork: true\n"))
    path = _write(tmp_path / "trainings", "t.yaml", {"worker": {"replicas": 1}, "template_dir": "templates"})
    assert load_folder(path.parent).errors == []

    import io

    out, err = io.StringIO(), io.StringIO()
    assert run([str(path)], out, err) == 1
    lines = err.getvalue().splitlines()
    assert any(
        "cluster.worker.template.spec.hostNetwork: " in line
        and "[platform policy: pod-security/hostNamespaces]" in line
        for line in lines
    ), lines


def test_validate_passes_the_shipped_trainings(tmp_path: Path) -> None:
    import io

    from airflow_tfk.dagfactory.validate import run

    shutil.copytree(ROOT / "trainings", tmp_path / "trainings")
    out, err = io.StringIO(), io.StringIO()
    assert run([str(tmp_path / "trainings")], out, err) == 0, err.getvalue()
