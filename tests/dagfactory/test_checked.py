"""Stamps of training files whose parse-time checks passed (airflow_tfk/dagfactory/checked.py).

A repeated parse of an unchanged file in an unchanged context skips the spec checks and
builds the same DAG; any change of the file, the deployment's defaults, the platform policy
or the code means a full check; a refused file is never stamped; a stamp folder that is not
the user's own private one is neither read nor written; ``validate`` never reads stamps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import airflow.configuration
import pytest

from airflow_tfk import dag_env
from airflow_tfk.dagfactory import checked
from airflow_tfk.dagfactory.loader import load_folder

ROOT = Path(__file__).resolve().parents[2]
GOOD = {
    "cluster": {
        "image": "registry.example/t:1",
        "mode": "parameter_server",
        "command": ["python", "t.py"],
        "chief": {"replicas": 1},
        "ps": {"replicas": 1},
        "worker": {"replicas": 2},
    },
    "publish": {"model_name": "t", "claim": "models"},
    "sweep": {
        "n_trials": 2,
        "search_space": {"tfk_learning_rate": {"type": "float", "low": 0.001, "high": 0.1, "log": True}},
    },
}
PRIVILEGED = {"name": "agent", "image": "registry.example/a:1", "securityContext": {"privileged": True}}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An Airflow home of this test's own: the stamps go under it."""
    home = tmp_path / "airflow-home"
    home.mkdir()
    monkeypatch.setattr(airflow.configuration, "AIRFLOW_HOME", str(home))
    return home


def _stamps(home: Path) -> list[str]:
    folder = home / checked.STAMPS
    return sorted(os.listdir(folder)) if folder.is_dir() else []


def _write(folder: Path, data: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "t.yaml"
    path.write_text(json.dumps(data))
    return path


def _fingerprint(result) -> dict:
    dag = result.dags["t"]
    return {task.task_id: sorted(vars(task).get("cluster_spec", {}) or {}) for task in dag.tasks}


def test_a_passing_file_is_stamped_once_and_then_built_the_same_without_the_checks(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "trainings"
    _write(folder, GOOD)
    first = load_folder(folder, stamps=True)
    assert first.errors == [] and list(first.dags) == ["t"]
    assert len(_stamps(home)) == 1
    calls: list[str] = []

    from airflow_tfk.spec import cluster

    original = cluster.TFClusterSpec.from_dict.__func__  # type: ignore[attr-defined]

    def counted(cls, data, *args, **kwargs):
        calls.append("from_dict")
        return original(cls, data, *args, **kwargs)

    monkeypatch.setattr(cluster.TFClusterSpec, "from_dict", classmethod(counted))
    again = load_folder(folder, stamps=True)
    assert again.errors == [] and calls == []  # the stamp: no spec check ran
    assert _fingerprint(again) == _fingerprint(first)
    assert again.dags["t"].get_task("sweep").cluster_spec == first.dags["t"].get_task("sweep").cluster_spec
    load_folder(folder)  # without stamps (validate): the checks run
    assert calls


def test_a_stamped_parse_in_a_new_process_never_imports_the_spec_checks(home: Path, tmp_path: Path) -> None:
    folder = tmp_path / "trainings"
    _write(folder, {key: value for key, value in GOOD.items() if key != "sweep"})  # (its operator checks)
    script = (
        "import sys, airflow.configuration\n"
        f"airflow.configuration.AIRFLOW_HOME = {str(home)!r}\n"
        "from pathlib import Path\n"
        "from airflow_tfk.dagfactory.loader import load_folder\n"
        f"r = load_folder(Path({str(folder)!r}), stamps=True)\n"
        "assert not r.errors and list(r.dags) == ['t'], r.errors\n"
        "heavy = ('airflow_tfk.spec.cluster', 'airflow_tfk.spec.pod_security', 'airflow_tfk.serving.spec',"
        " 'airflow_tfk.sweep.config')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )

    def run() -> str:
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-3000:]
        return out.stdout.strip().splitlines()[-1]

    assert run() != "[]"  # the first parse checks: the spec modules are loaded
    assert run() == "[]"  # stamped: none of them


@pytest.mark.parametrize("change", ["file", "namespace", "policy", "code", "path"])
def test_any_change_of_what_the_checks_read_is_another_stamp(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    path = _write(tmp_path / "trainings", GOOD)
    raw = path.read_bytes()
    before = checked.stamp_name(raw, str(path), str(path.parent))
    assert checked.stamp_name(raw, str(path), str(path.parent)) == before  # stable
    if change == "file":
        raw = raw.replace(b'"replicas": 2', b'"replicas": 3')
    elif change == "namespace":
        monkeypatch.setattr(dag_env, "NAMESPACE", "team-b")
    elif change == "policy":
        monkeypatch.setenv("AIRFLOW__TFK_POLICY__POD_SECURITY_LEVEL", "baseline")
    elif change == "code":
        monkeypatch.setattr(checked, "_code", None)
        module = ROOT / "airflow_tfk" / "spec" / "placement.py"
        info = module.stat()
        try:
            os.utime(module, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000_000))
            assert checked.stamp_name(raw, str(path), str(path.parent)) != before
        finally:
            os.utime(module, ns=(info.st_atime_ns, info.st_mtime_ns))
            monkeypatch.setattr(checked, "_code", None)
        assert checked.stamp_name(raw, str(path), str(path.parent)) == before
        return
    else:
        path = path.with_name("u.yaml")
    assert checked.stamp_name(raw, str(path), str(path.parent)) != before


def test_a_policy_change_refuses_a_file_stamped_under_the_old_policy(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "trainings"
    data = json.loads(json.dumps(GOOD))
    data["cluster"]["worker"]["pod"] = {"sidecars": [PRIVILEGED]}
    _write(folder, data)
    monkeypatch.setenv("AIRFLOW__TFK_POLICY__POD_SECURITY_LEVEL", "privileged")
    assert load_folder(folder, stamps=True).errors == [] and len(_stamps(home)) == 1
    monkeypatch.delenv("AIRFLOW__TFK_POLICY__POD_SECURITY_LEVEL")  # back to restricted
    result = load_folder(folder, stamps=True)
    assert not result.dags
    messages = [e.describe() for error in result.errors for e in error.all()]
    assert any("cluster.worker.pod.sidecars[0].securityContext.privileged" in m for m in messages), messages
    assert len(_stamps(home)) == 1  # the refusal is not stamped


def test_a_refused_file_is_never_stamped_and_is_refused_on_every_parse(home: Path, tmp_path: Path) -> None:
    folder = tmp_path / "trainings"
    data = json.loads(json.dumps(GOOD))
    data["publish"]["serving"] = {"replicas": -1}
    _write(folder, data)
    for _ in range(2):
        result = load_folder(folder, stamps=True)
        assert not result.dags and any("publish.serving.replicas" in str(e) for e in result.errors)
    assert _stamps(home) == []


def test_a_stamp_folder_others_can_write_is_neither_read_nor_written(home: Path, tmp_path: Path) -> None:
    folder = tmp_path / "trainings"
    data = json.loads(json.dumps(GOOD))
    data["cluster"]["worker"]["replicas"] = -1
    path = _write(folder, data)
    stamps = home / checked.STAMPS
    stamps.mkdir(parents=True)
    stamps.chmod(0o777)  # anyone could plant a stamp for a file they wrote
    planted = checked.stamp_name(path.read_bytes(), str(path), str(folder))
    (stamps / planted).touch()
    result = load_folder(folder, stamps=True)
    assert not result.dags and any("cluster.worker.replicas" in str(e) for e in result.errors)
    stamps.chmod(0o700)  # the user's own again: a stamp there is believed (the design's trust)
    assert list(load_folder(folder, stamps=True).dags) == ["t"]
    assert load_folder(folder).errors  # validate's path reads no stamp


def test_an_unwritable_home_parses_in_full_every_time(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a-file").write_text("")
    monkeypatch.setattr(airflow.configuration, "AIRFLOW_HOME", str(tmp_path / "a-file" / "home"))
    folder = tmp_path / "trainings"
    _write(folder, GOOD)
    assert list(load_folder(folder, stamps=True).dags) == ["t"]
    assert list(load_folder(folder, stamps=True).dags) == ["t"]


def test_the_dag_file_uses_stamps(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_tfk.dagfactory.loader import load_into

    (tmp_path / "dags").mkdir()
    _write(tmp_path / "trainings", GOOD)
    monkeypatch.delenv("TFK_TRAININGS_DIR", raising=False)
    namespace: dict = {}
    load_into(namespace, str(tmp_path / "dags" / "tfk_trainings.py"))
    assert "dag__t" in namespace and len(_stamps(home)) == 1
