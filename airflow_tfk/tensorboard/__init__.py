"""TensorBoard over a training's log directory: a local process or a Kubernetes
Deployment + Service. Its own package beside :mod:`airflow_tfk.serving`: it shares the
spec validation and rendering helpers of serving, not its publish pipeline.

Import-light: :func:`get_tensorboard` imports the implementation it picks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_tfk.serving.spec import TensorBoardSpec
    from airflow_tfk.tensorboard.kubernetes import KubernetesTensorBoard
    from airflow_tfk.tensorboard.local import LocalTensorBoard

__all__ = ["get_tensorboard"]


def get_tensorboard(
    kind: str, spec: TensorBoardSpec, **config: Any
) -> LocalTensorBoard | KubernetesTensorBoard:
    """The TensorBoard of backend ``kind`` (``kubernetes`` or ``local``) for ``spec``."""
    if kind == "kubernetes":
        from airflow_tfk.tensorboard.kubernetes import KubernetesTensorBoard

        return KubernetesTensorBoard(spec, **config)
    if kind == "local":
        from airflow_tfk.tensorboard.local import LocalTensorBoard

        return LocalTensorBoard(spec, **config)
    raise ValueError(f"backend: unknown kind {kind!r} (expected 'kubernetes' or 'local')")
