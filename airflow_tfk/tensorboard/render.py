"""Render a TensorBoard's objects (NetworkPolicy, Service, Deployment) from
``templates/tensorboard/``, with the shared parts of a served pod that TF Serving's objects
use too (:mod:`airflow_tfk.serving.render`). A leaf module: Jinja2 and YAML load on first
use."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow_tfk.core import naming
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.serving.render import render_object, server_context, server_network_policy
from airflow_tfk.serving.spec import LOGS_MOUNT, TensorBoardSpec

LABEL_TENSORBOARD = f"{naming.LABEL_PREFIX}/tensorboard"


def render_tensorboard(
    spec: TensorBoardSpec,
    identity: RunIdentity | None = None,
    template_dir: str | Path | None = None,
    api_server_cidrs: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """NetworkPolicy (unless switched off), Service and Deployment of a TensorBoard over
    the logs claim."""
    if spec.claim is None:
        from airflow_tfk.core.errors import SpecError

        raise SpecError("claim", "is required on Kubernetes (base_path is local-only)")
    if spec.port == 0:
        from airflow_tfk.core.errors import SpecError

        raise SpecError(
            "port", "must be between 1 and 65535 on Kubernetes (0 picks a free port locally only)", 0
        )
    c = server_context(spec, "tensorboard", "tensorboard", LABEL_TENSORBOARD, identity)
    # The launcher imports TensorBoard itself at module level: only its command is needed.
    from airflow_tfk.tensorboard.launcher import command

    c.update(
        {
            "command": command(),
            "port": spec.port,
            "logs_mount": LOGS_MOUNT,
            "args": [
                f"--logdir={spec.pod_logdir}",
                "--bind_all",
                f"--port={spec.port}",
                f"--reload_interval={spec.reload_seconds}",
                # No --path_prefix: the API server's service proxy strips its own prefix, so
                # TensorBoard sees "/data/..." (with the prefix it answers only under it and
                # 404s here), and its pages use relative links, which resolve under the proxy.
            ],
        }
    )
    return [
        *server_network_policy(spec, c, [spec.port], spec.port, api_server_cidrs, template_dir),
        render_object("tensorboard/service.yaml.j2", "Service", spec.name, spec.namespace, c, template_dir),
        render_object(
            "tensorboard/deployment.yaml.j2", "Deployment", spec.name, spec.namespace, c, template_dir
        ),
    ]
