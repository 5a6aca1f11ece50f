"""TensorBoard over a training's log directory: a local process or a Kubernetes
Deployment + Service. Its own package beside :mod:`airflow_tfk.serving`: it shares the
spec validation and rendering helpers of serving, not its publish pipeline.

Import-light: :func:`get_tensorboard` imports the implementation it picks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_tfk.core.constants import BackendKind
from airflow_tfk.core.registry import Registry

if TYPE_CHECKING:
    from airflow_tfk.serving.spec import TensorBoardSpec
    from airflow_tfk.tensorboard.kubernetes import KubernetesTensorBoard
    from airflow_tfk.tensorboard.local import LocalTensorBoard

__all__ = ["TENSORBOARDS", "get_tensorboard"]

#: the TensorBoard of each backend kind, imported only when asked for
TENSORBOARDS = Registry(
    "tensorboard",
    {
        BackendKind.KUBERNETES: "airflow_tfk.tensorboard.kubernetes:KubernetesTensorBoard",
        BackendKind.LOCAL: "airflow_tfk.tensorboard.local:LocalTensorBoard",
    },
)


def get_tensorboard(
    kind: str, spec: TensorBoardSpec, **config: Any
) -> LocalTensorBoard | KubernetesTensorBoard:
    """The TensorBoard of backend ``kind`` (``kubernetes`` or ``local``) for ``spec``."""
    board: LocalTensorBoard | KubernetesTensorBoard = TENSORBOARDS.load(kind)(spec, **config)
    return board
