"""What the user asks for, pure: the cluster spec and its declaration, checks, roles,
resources, pod rules, network, admission, capacity, the pod patch, the launch plan of each
role, the spec files' YAML reader and the operators' options. No Kubernetes client, no
TensorFlow, no template rendering, no Airflow.

``from airflow_tfk.spec import TFClusterSpec`` is the public path; the names load lazily
(PEP 562), so importing a leaf module of the package loads no more than that module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_tfk.core.lazy import lazy_exports

if TYPE_CHECKING:
    from airflow_tfk.spec.cluster import (
        MAX_REPLICAS as MAX_REPLICAS,
    )
    from airflow_tfk.spec.cluster import (
        MAX_TOLERATIONS as MAX_TOLERATIONS,
    )
    from airflow_tfk.spec.cluster import (
        ROLES as ROLES,
    )
    from airflow_tfk.spec.cluster import (
        AccessMode as AccessMode,
    )
    from airflow_tfk.spec.cluster import (
        Mode as Mode,
    )
    from airflow_tfk.spec.cluster import (
        Resources as Resources,
    )
    from airflow_tfk.spec.cluster import (
        RoleSpec as RoleSpec,
    )
    from airflow_tfk.spec.cluster import (
        StorageSpec as StorageSpec,
    )
    from airflow_tfk.spec.cluster import (
        TFClusterSpec as TFClusterSpec,
    )
    from airflow_tfk.spec.cluster import (
        Toleration as Toleration,
    )
    from airflow_tfk.spec.cluster import (
        VolumeSpec as VolumeSpec,
    )

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "airflow_tfk.spec.cluster": (
            "MAX_REPLICAS",
            "MAX_TOLERATIONS",
            "ROLES",
            "AccessMode",
            "Mode",
            "Resources",
            "RoleSpec",
            "StorageSpec",
            "TFClusterSpec",
            "Toleration",
            "VolumeSpec",
        ),
    },
)
