"""A failed run's exports on Kubernetes: found in the exporting task's log, set aside on
their claim by a one-shot Job.

The provider cannot see a PersistentVolumeClaim, so the rename runs in the cluster: a
Job in the run's namespace mounts each claim where the training pods had it, and renames
``<model>/<version>`` to ``<model>/.failed-<version>-<uid>``, which neither TF Serving nor
``publish`` (integer names only) will ever load, and which the next run's
``next_version`` does not count. Paths reach the script as arguments, never spliced into
it, and only paths inside a claim's mount path are passed at all.

Only claims that outlive the cluster matter: a PVC the cluster created carries its label
and is deleted with it, exports included.
"""

from __future__ import annotations

import hashlib
import logging
import posixpath
import time
from collections.abc import Callable
from typing import Any

from airflow_tfk.backends.base import ClusterRef, RunExport
from airflow_tfk.core import naming
from airflow_tfk.kube.api import BY_KIND, SyncApi
from airflow_tfk.protocol.digits import is_plain_int
from airflow_tfk.protocol.progress import parse_event

log = logging.getLogger(__name__)

LABEL_SET_ASIDE_OF = f"{naming.LABEL_PREFIX}/set-aside-of"
MOVED = "tfk-moved: "
# The Job is left to finish on its own past this wait (it has a deadline and a TTL).
WAIT_SECONDS = 120.0
DEADLINE_SECONDS = 600

SCRIPT = r"""set -u
uid="$1"; shift
for p in "$@"; do
  d="${p%/*}"; v="${p##*/}"
  case "$v" in ""|*[!0-9]*) echo "tfk-skipped: $p"; continue;; esac
  if [ -d "$p" ] && mv -- "$p" "$d/.failed-$v-$uid"; then echo "tfk-moved: $p"; else echo "tfk-absent: $p"; fi
done
"""


def claim_mounts(jobs: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """mount path -> (claim, image), over the pod templates of the run's Jobs."""
    out: dict[str, tuple[str, str]] = {}
    for job in jobs:
        pod = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
        claims = {
            v.get("name"): (v.get("persistentVolumeClaim") or {}).get("claimName")
            for v in pod.get("volumes") or []
        }
        for container in pod.get("containers") or []:
            for mount in container.get("volumeMounts") or []:
                claim = claims.get(mount.get("name"))
                if claim and mount.get("mountPath"):
                    out.setdefault(
                        posixpath.normpath(mount["mountPath"]), (claim, container.get("image", ""))
                    )
    return out


#: What the set-aside Job takes from the pod that wrote the exports: where it may run and
#: as whom, and what it needs to pull the training image (a private registry, a tainted or
#: labelled node pool, a required priority class or ServiceAccount). Not its pod
#: (anti-)affinity or spread: those place the training's pods among each other.
PLACEMENT = ("imagePullSecrets", "nodeSelector", "tolerations", "priorityClassName", "serviceAccountName")


def placement(jobs: list[dict[str, Any]], claim: str) -> dict[str, Any]:
    """The pod-spec fields of :data:`PLACEMENT` (and node affinity) of the first Job whose
    pods mount ``claim``."""
    for job in jobs:
        pod = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
        claims = {(v.get("persistentVolumeClaim") or {}).get("claimName") for v in pod.get("volumes") or []}
        if claim not in claims:
            continue
        out = {k: pod[k] for k in PLACEMENT if pod.get(k)}
        node_affinity = (pod.get("affinity") or {}).get("nodeAffinity")
        if node_affinity:
            out["affinity"] = {"nodeAffinity": node_affinity}
        return out
    return {}


def exports_in(text: str, mounts: dict[str, tuple[str, str]]) -> list[RunExport]:
    """The export events of a task's log whose version directory lies on a claim."""
    found: dict[str, RunExport] = {}
    for line in text.splitlines():
        event = parse_event(line, "export") if '"export"' in line else None
        path = event.get("path") if event else None
        if not isinstance(path, str) or not path.startswith("/"):
            continue
        path = posixpath.normpath(path)
        name = posixpath.basename(path)
        if not is_plain_int(name):
            continue
        for mount, (claim, image) in mounts.items():
            if path.startswith(mount.rstrip("/") + "/"):
                found.setdefault(path, RunExport(path, claim, mount, image))
                break
    return list(found.values())


def job_manifest(
    ref: ClusterRef,
    claim: str,
    mount_path: str,
    image: str,
    paths: list[str],
    uid: str,
    where: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The set-aside Job: the training pods' user (so it may rename what they wrote),
    hardened like them, one claim mounted where they had it, placed and pulled as they
    were (``where``: see :func:`placement`)."""
    digest = hashlib.sha256(f"{ref.namespace}/{ref.name}/{claim}/{time.time_ns()}".encode()).hexdigest()
    labels = {
        "app.kubernetes.io/managed-by": "airflow-tfk",
        "app.kubernetes.io/component": "set-aside",
        LABEL_SET_ASIDE_OF: ref.name,
    }
    # Kubernetes expands $(VAR) in command and args: escape what is not ours.
    args = [a.replace("$", "$$") for a in (uid, *paths)]
    security = {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"tfk-set-aside-{digest[:12]}", "namespace": ref.namespace, "labels": labels},
        "spec": {
            "backoffLimit": 2,
            "activeDeadlineSeconds": DEADLINE_SECONDS,
            "ttlSecondsAfterFinished": 600,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    **(where or {}),
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 1000,
                        "runAsGroup": 1000,
                        "fsGroup": 1000,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "set-aside",
                            "image": image,
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["/bin/sh", "-c", SCRIPT.replace("$", "$$"), "tfk-set-aside"],
                            "args": args,
                            "volumeMounts": [{"name": "models", "mountPath": mount_path}],
                            "securityContext": security,
                            "terminationMessagePolicy": "FallbackToLogsOnError",
                        }
                    ],
                    "volumes": [{"name": "models", "persistentVolumeClaim": {"claimName": claim}}],
                },
            },
        },
    }


def set_aside(
    api: SyncApi,
    ref: ClusterRef,
    exports: list[RunExport],
    uid: str,
    *,
    wait_seconds: float = WAIT_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
) -> list[str]:
    """Run one set-aside Job per claim; returns the paths it set aside (or that went with
    their claim). A Job still unfinished after ``wait_seconds`` is left to finish."""
    by_claim: dict[tuple[str, str, str], list[str]] = {}
    for e in exports:
        if e.claim and e.mount_path and e.image:
            by_claim.setdefault((e.claim, e.mount_path, e.image), []).append(e.path)
    done: list[str] = []
    jobs = list_jobs(api, ref) if by_claim else []
    for (claim, mount_path, image), paths in by_claim.items():
        if not _claim_outlives_cluster(api, ref, claim):
            log.info("kubernetes: %s went with claim %s, deleted with the cluster", ", ".join(paths), claim)
            done.extend(paths)
            continue
        manifest = job_manifest(ref, claim, mount_path, image, paths, uid, placement(jobs, claim))
        done.extend(_run_job(api, ref, manifest, wait_seconds, sleep))
    return done


def list_jobs(api: SyncApi, ref: ClusterRef) -> list[dict[str, Any]]:
    _, body = api.request(
        "GET", BY_KIND["Job"].collection(ref.namespace), {"labelSelector": ref.label_selector}
    )
    return list((body or {}).get("items") or [])


def _named(api: SyncApi, kind: str, ref: ClusterRef, name: str) -> dict[str, Any] | None:
    """One object by a list with a field selector: deploy/rbac grants list, not get."""
    _, body = api.request(
        "GET", BY_KIND[kind].collection(ref.namespace), {"fieldSelector": f"metadata.name={name}"}
    )
    items = (body or {}).get("items") or []
    return items[0] if items else None


def _claim_outlives_cluster(api: SyncApi, ref: ClusterRef, claim: str) -> bool:
    meta = (_named(api, "PersistentVolumeClaim", ref, claim) or {}).get("metadata")
    if meta is None:
        return False
    owned = (meta.get("labels") or {}).get(naming.LABEL_CLUSTER) == ref.name
    return not owned and not meta.get("deletionTimestamp")


def _run_job(
    api: SyncApi,
    ref: ClusterRef,
    manifest: dict[str, Any],
    wait_seconds: float,
    sleep: Callable[[float], None],
) -> list[str]:
    name = manifest["metadata"]["name"]
    job_path = BY_KIND["Job"].item(ref.namespace, name)
    api.request("POST", BY_KIND["Job"].collection(ref.namespace), None, manifest)
    deadline = time.monotonic() + wait_seconds
    while True:
        job = _named(api, "Job", ref, name)
        status = (job or {}).get("status") or {}
        if status.get("succeeded") or status.get("failed", 0) > manifest["spec"]["backoffLimit"]:
            break
        if time.monotonic() >= deadline:
            log.warning(
                "kubernetes: set-aside Job %s not finished after %.0f s; left to finish", name, wait_seconds
            )
            return []
        sleep(1.0)
    moved = [line[len(MOVED) :] for line in _job_log(api, ref, name).splitlines() if line.startswith(MOVED)]
    if status.get("succeeded"):
        api.request("DELETE", job_path, {"propagationPolicy": "Background"})
    return moved


def _job_log(api: SyncApi, ref: ClusterRef, job: str) -> str:
    _, pods = api.request(
        "GET", BY_KIND["Pod"].collection(ref.namespace), {"labelSelector": f"job-name={job}"}
    )
    text = []
    for pod in (pods or {}).get("items") or []:
        path = BY_KIND["Pod"].item(ref.namespace, pod["metadata"]["name"]) + "/log"
        try:
            text.append(api.text(path, {"container": "set-aside"}))
        except Exception as exc:
            log.warning("kubernetes: cannot read the log of %s: %s", pod["metadata"]["name"], exc)
    return "\n".join(text)
