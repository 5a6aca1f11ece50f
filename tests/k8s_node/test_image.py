"""The real training image on the real node: images/training/Dockerfile, built unmodified
by images/training/build.sh (no registry: its base is a local Debian stand-in for
python:3.11-slim, see images/training/base/Dockerfile), imported into the node's
containerd, trains real TensorFlow through TFTrainingOperator.

The tier's other pods run a skeleton image whose /usr, Python and checkout come from the
host (containerd's base spec, node.py). These pods run with RuntimeClass ``tfk-image``,
whose containerd handler has no such mounts, so everything they execute comes from the
image. The spec has no runtime-class field (nothing else needs one), so a
MutatingAdmissionPolicy of the real API server (GA in 1.36) sets ``runtimeClassName`` on
every pod created in the test's namespace.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from . import _tfk
from . import node as nodemod
from .training_image import TrainingImage

pytestmark = [pytest.mark.k8s_node, pytest.mark.training_image]
RUNTIME_CLASS = "tfk-image"
ORIGIN_MARK = "TFK_TEST_ORIGIN"
#: where pip installs as root with the base's Python (the official image: /usr/local too)
SITE = "/usr/local/lib/python3.11/dist-packages/"
_SET_CLASS = f'Object{{spec: Object.spec{{runtimeClassName: "{RUNTIME_CLASS}"}}}}'  # CEL


@pytest.fixture(scope="module")
def node_image(node_api, node_training_image: TrainingImage) -> Iterator[TrainingImage]:
    """The imported image (conftest) and the RuntimeClass whose handler runs it alone."""
    node = client.NodeV1Api(node_api)
    node.create_runtime_class(
        client.V1RuntimeClass(
            metadata=client.V1ObjectMeta(name=RUNTIME_CLASS), handler=nodemod.IMAGE_RUNTIME_HANDLER
        )
    )
    try:
        yield node_training_image
    finally:
        node.delete_runtime_class(RUNTIME_CLASS)


@pytest.fixture
def image_runtime(node_api, node_ns: str, node_image: TrainingImage) -> Iterator[None]:
    """Every pod created in ``node_ns`` gets ``runtimeClassName: tfk-image``."""
    reg = client.AdmissionregistrationV1Api(node_api)
    name = f"tfk-image-runtime-{node_ns}"
    group = "admissionregistration.k8s.io/v1"
    reg.create_mutating_admission_policy(
        {
            "apiVersion": group,
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods"],
                        }
                    ]
                },
                "failurePolicy": "Fail",
                "reinvocationPolicy": "Never",
                "mutations": [
                    {
                        "patchType": "ApplyConfiguration",
                        "applyConfiguration": {"expression": _SET_CLASS},
                    }
                ],
            },
        }
    )
    reg.create_mutating_admission_policy_binding(
        {
            "apiVersion": group,
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "matchResources": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": node_ns}}
                },
            },
        }
    )
    try:
        # The API server loads policies asynchronously: wait until a dry-run pod gets it.
        _tfk.wait_for("the runtime-class policy in force", lambda: _dry_run_class(node_api, node_ns), 60)
        yield
    finally:
        reg.delete_mutating_admission_policy_binding(name)
        reg.delete_mutating_admission_policy(name)


def _dry_run_class(api, namespace: str) -> bool:
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name=f"probe-{uuid.uuid4().hex[:6]}"),
        spec=client.V1PodSpec(
            containers=[
                client.V1Container(
                    name="c",
                    image="tfk.local/none:0",
                    security_context=client.V1SecurityContext(
                        allow_privilege_escalation=False,
                        run_as_non_root=True,
                        run_as_user=1000,
                        capabilities=client.V1Capabilities(drop=["ALL"]),
                        seccomp_profile=client.V1SeccompProfile(type="RuntimeDefault"),
                    ),
                )
            ]
        ),
    )
    made = client.CoreV1Api(api).create_namespaced_pod(namespace, pod, dry_run="All")
    return made.spec.runtime_class_name == RUNTIME_CLASS


def _scalar_tags(files: list[Path]) -> set[str]:
    """The summary tags in TensorBoard event files, read with TensorBoard's own loader."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    return {v.tag for f in files for event in EventFileLoader(str(f)).Load() for v in event.summary.value}


def test_the_real_training_image_trains_all_reduce(
    k8s_node, node_api, node_ns, node_conn, local_volumes, node_image, image_runtime, capfd
) -> None:
    """2 workers, MultiWorkerMirroredStrategy, digits: the run succeeds, the SavedModel is
    on the models claim, the chief's TensorBoard event file (its loss scalars) is on the
    logs claim, and the pods ran the built image (its ID), with the package and
    TensorFlow the image's pip installed."""
    ctx = _tfk.task_context(f"manual__{uuid.uuid4().hex[:8]}")
    name = _tfk.cluster_name(ctx)
    models = local_volumes.provide(node_ns, f"{name}-models")
    logs = local_volumes.provide(node_ns, f"{name}-logs")
    origin = (
        f"python -c \"import importlib.util as u; print('{ORIGIN_MARK}', "
        "u.find_spec('airflow_tfk').origin, u.find_spec('tensorflow').origin)\""
    )
    spec_data = _tfk.spec(
        node_ns,
        "all_reduce",
        workers=2,
        image=node_image.ref,
        command=[
            "sh",
            "-c",
            f'{origin}; exec "$@"',
            "sh",
            "python",
            "-m",
            "airflow_tfk.runtime.examples.digits_app",
        ],
        args=["--tfk_steps", "30", "--tfk_checkpoint_every", "0"],
        storage={
            "models": {"size": "1Gi", "storage_class": "tfk-local"},
            "logs": {"size": "1Gi", "storage_class": "tfk-local"},
        },
    )
    t0 = time.monotonic()
    result = _tfk.make_op(spec_data).execute(ctx)
    took = time.monotonic() - t0
    assert result["outcome"] == "succeeded", result
    assert list(models.rglob("saved_model.pb")), "no SavedModel exported"
    # TensorFlow >= 2.21 does not install TensorBoard: without it in the image the chief
    # writes no summaries.
    events = sorted(logs.rglob("events.out.tfevents.*"))
    assert events, f"no TensorBoard event file on the logs claim: {sorted(logs.rglob('*'))}"
    assert "loss" in _scalar_tags(events), events
    workers = _tfk.pods(node_api, node_ns, name, "worker")
    assert len(workers) == 2
    for p in workers:
        assert p.status.phase == "Succeeded", (p.metadata.name, p.status.phase)
        assert p.spec.runtime_class_name == RUNTIME_CLASS
        (status,) = p.status.container_statuses
        # The container ran the image this build made: its ID (the config's digest).
        assert p.spec.containers[0].image == node_image.ref
        assert status.image_id.rsplit("@", 1)[-1] == node_image.config_digest, status.image_id
        seen = [ln.split() for ln in _tfk.pod_log(node_api, node_ns, p.metadata.name).splitlines()]
        origins = [ln[1:] for ln in seen if ln and ln[0] == ORIGIN_MARK]
        assert origins and all(o.startswith(SITE) for o in origins[0]), origins
    out = capfd.readouterr().out
    assert _tfk.progress_lines(out), out[-3000:]
    print(f"the real training image, all_reduce 2 workers, 30 steps: {took:.1f}s")
