"""docker-compose.yaml against the official Compose Specification schema.

No Docker engine runs here, so the file is checked, not run. The schema is the one the
compose-spec project ships in github.com/compose-spec/compose-go (fetched through the Go
module proxy, pinned below).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_GO = "github.com/compose-spec/compose-go/v2@v2.16.2"


@pytest.fixture(scope="module")
def schema() -> dict:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not os.path.exists(go):
        pytest.fail("Go is needed to fetch the Compose schema from the Go module proxy")
    out = subprocess.run(
        [go, "mod", "download", "-json", COMPOSE_GO],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        cwd="/",
    )
    directory = json.loads(out.stdout)["Dir"]
    return json.loads(Path(directory, "schema", "compose-spec.json").read_text())


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yaml").read_text())


def test_valid_against_compose_spec(schema: dict, compose: dict) -> None:
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(compose), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_schema_catches_a_broken_file(schema: dict, compose: dict) -> None:
    import copy

    import jsonschema

    broken = copy.deepcopy(compose)
    broken["services"]["postgres"]["restart"] = {"policy": "always"}
    broken["services"]["k3s"]["no_such_key"] = 1
    assert len(list(jsonschema.Draft202012Validator(schema).iter_errors(broken))) >= 2


def test_airflow_3_components_provider_and_k3s(compose: dict) -> None:
    services = compose["services"]
    commands = {name: svc.get("command") for name, svc in services.items()}
    for component in ("api-server", "scheduler", "dag-processor", "triggerer"):
        assert component in commands.values(), component
    assert {"postgres", "k3s", "airflow-init"} <= set(services)
    env = services["airflow-scheduler"]["environment"]
    conn = json.loads(env["AIRFLOW_CONN_KUBERNETES_DEFAULT"])
    assert conn["conn_type"] == "kubernetes" and conn["extra"]["kube_config_path"] == "/kube/config"
    assert env["TFK_BACKEND"] == "kubernetes"
    build = services["airflow-scheduler"]["build"]
    dockerfile = ROOT / build["context"] / build["dockerfile"]
    assert dockerfile.exists()
    for line in dockerfile.read_text().splitlines():
        if line.startswith("COPY "):
            for src in line.split()[1:-1]:
                if not src.startswith("--"):
                    assert (ROOT / src).exists(), src
