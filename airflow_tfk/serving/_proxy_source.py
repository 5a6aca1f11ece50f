"""Where the API server's service proxy connects from, for the serving and TensorBoard
NetworkPolicies.

The proxy (``/api/v1/namespaces/<ns>/services/<svc>:<port>/proxy``) is how the provider
checks a model is AVAILABLE, sends the smoke predict and links TensorBoard. The API
server dials the pod itself, usually from the address it advertises, which is what the
``kubernetes`` Service's EndpointSlice in ``default`` lists. Where that is not the source
(konnectivity, managed control planes), the spec names the blocks instead.
"""

from __future__ import annotations

from typing import Any

from airflow_tfk.core.errors import SpecError
from airflow_tfk.spec.network import ServiceNetworkPolicy, host_cidr

WHERE = "network_policy.api_server_cidrs"


def api_server_cidrs(api: Any, policy: ServiceNetworkPolicy) -> tuple[str, ...] | None:
    """The blocks to admit as the proxy's source: the spec's, else discovered (one
    ``/32``/``/128`` per API server address). None when the policy is off.

    :raises SpecError: nothing could be discovered; the message says what to set.
    """
    if not policy.enabled:
        return None
    if policy.api_server_cidrs is not None:
        return policy.api_server_cidrs
    from airflow_tfk.kube.api import BY_KIND, error_message
    from airflow_tfk.kube.retry import api_status

    try:
        _, body = api.request("GET", BY_KIND["EndpointSlice"].item("default", "kubernetes"))
    except Exception as exc:
        status = api_status(exc) or getattr(exc, "status", None)
        code = f"HTTP {status}: " if status else ""
        raise SpecError(
            WHERE,
            "could not be discovered from the EndpointSlice default/kubernetes "
            f"({code}{error_message(exc)}); grant its read (deploy/rbac/apiserver-address.yaml) or "
            "list the API server's source addresses, e.g. [10.0.0.10/32]",
        ) from None
    addresses = sorted(
        {address for ep in (body or {}).get("endpoints") or [] for address in ep.get("addresses") or []}
    )
    if not addresses:
        raise SpecError(WHERE, "could not be discovered: default/kubernetes lists no address; set them")
    return tuple(host_cidr(a) for a in addresses)
