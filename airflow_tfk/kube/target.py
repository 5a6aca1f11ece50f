"""What the TF Serving and TensorBoard targets share on Kubernetes: the cluster they reach
(one :class:`~.connection.KubeConnection`), who applies their objects, the Airflow task
they are labelled with, and applying and deleting named objects in their namespace.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_tfk.core.constants import FIELD_MANAGER
from airflow_tfk.core.naming import RunIdentity
from airflow_tfk.kube.api import BY_KIND, SyncApi, is_not_found, kind_of
from airflow_tfk.kube.connection import KubeConnection

if TYPE_CHECKING:
    from airflow_tfk.spec.platform_policy import PlatformPolicy

BACKGROUND = {"propagationPolicy": "Background"}


class KubeTarget:
    """:param identity: the Airflow task instance, as labels and annotations.
    :param field_manager: server-side apply field manager.
    :param config: the connection's (:class:`~.connection.KubeConnection`: ``conn_id``,
        ``cluster_context``, ``config_file``, ``in_cluster``); other keys, such as the rest
        of a training's ``backend_config``, are ignored.
    """

    def __init__(
        self, identity: RunIdentity | None = None, field_manager: str = FIELD_MANAGER, **config: Any
    ) -> None:
        self.connection = KubeConnection.from_config(config)
        self.identity = identity
        self.field_manager = field_manager
        #: the platform policy every pod this target makes must meet; set by the operators
        #: from the deployment's configuration (``[tfk_policy]``). None: unchecked.
        self.policy: PlatformPolicy | None = None

    def checked(self, manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``manifests``, once their pods pass :attr:`policy`; else every violation raised,
        named, before anything is applied."""
        if self.policy is not None:
            from airflow_tfk.spec.platform_policy import check_manifests, raise_for

            raise_for(check_manifests(manifests, self.policy))
        return manifests

    def config(self) -> dict[str, Any]:
        """The keyword arguments that reach the same cluster the same way (serializable)."""
        return {**self.connection.config(), "field_manager": self.field_manager}

    @property
    def api(self) -> SyncApi:
        return self.connection.api

    def apply_object(self, namespace: str, manifest: dict[str, Any]) -> int:
        """Server-side apply; 201 when the object was created, 200 when it existed."""
        path = kind_of(manifest).item(namespace, manifest["metadata"]["name"])
        code, _ = self.api.apply(path, manifest, self.field_manager)
        return code

    def delete_object(self, namespace: str, kind: str, name: str) -> bool:
        """Delete one object (its dependents in the background); False when it was not there."""
        try:
            self.api.request("DELETE", BY_KIND[kind].item(namespace, name), BACKGROUND)
        except Exception as exc:
            if is_not_found(exc):
                return False
            raise
        return True
