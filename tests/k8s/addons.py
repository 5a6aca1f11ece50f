"""The JobSet and Kueue APIs (their CustomResourceDefinitions) for the integration tests.

The CRDs come from the projects' own Go modules at pinned versions, fetched through the
Go module proxy into the Go module cache (``go mod download``: a few MB, once). Installing
them into the test control plane makes the real API server validate the provider's JobSets
against JobSet's published schema (strict server-side dry run), and store and serve
Kueue's Workloads. The controllers themselves are not run here (see docs/kueue.md): what
needs them (un-suspending, admission, JobSet's success policy) is not claimed by these
tests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

#: module, version, CRD files inside the module
JOBSET = ("sigs.k8s.io/jobset", "v0.11.0", ("config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml",))
KUEUE = (
    "sigs.k8s.io/kueue",
    "v0.14.0",
    tuple(
        f"config/components/crd/bases/kueue.x-k8s.io_{plural}.yaml"
        for plural in ("workloads", "localqueues", "clusterqueues", "resourceflavors")
    ),
)


class AddonError(RuntimeError):
    pass


def _go() -> str:
    for candidate in (os.environ.get("AIRFLOW_TFK_K8S_GO"), shutil.which("go"), "/usr/local/go/bin/go"):
        if candidate and Path(candidate).exists():
            return candidate
    raise AddonError("no Go toolchain to fetch the CRDs with (set AIRFLOW_TFK_K8S_GO)")


def module_dir(module: str, version: str) -> Path:
    """The module's source in the Go module cache (downloaded on first use)."""
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GO111MODULE": "on"}
    proc = subprocess.run(
        [_go(), "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        env=env,
        cwd=os.path.expanduser("~"),
        timeout=600,
    )
    if proc.returncode != 0:
        raise AddonError(
            f"go mod download {module}@{version} failed: {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
        )
    return Path(json.loads(proc.stdout)["Dir"])


def crds(addon: tuple[str, str, tuple[str, ...]]) -> list[dict[str, Any]]:
    import yaml

    module, version, files = addon
    root = module_dir(module, version)
    return [yaml.safe_load((root / f).read_text()) for f in files]


def install(api: Any, addon: tuple[str, str, tuple[str, ...]], timeout: float = 60) -> list[str]:
    """Create the add-on's CRDs (those not there yet) and wait until they are served.
    Returns their names. CRDs live as long as the (throw-away) control plane."""
    from kubernetes import client

    ext = client.ApiextensionsV1Api(api)
    names = []
    for crd in crds(addon):
        name = crd["metadata"]["name"]
        names.append(name)
        try:
            ext.create_custom_resource_definition(crd)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
    deadline = time.monotonic() + timeout
    for name in names:
        while True:
            conds = ext.read_custom_resource_definition(name).status.conditions or []
            if any(c.type == "Established" and c.status == "True" for c in conds):
                break
            if time.monotonic() > deadline:
                raise AddonError(f"CRD {name} not established after {timeout}s")
            time.sleep(0.2)
    return names
