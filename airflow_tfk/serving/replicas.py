"""The rules between a serving spec's replicas, its disruption budget, its autoscaler and
its exposure (Ingress, HTTPRoute): checked by :class:`~airflow_tfk.serving.spec.ServingSpec`
and read by the renderers.

Apart from the typed sections (:mod:`airflow_tfk.serving.scaling`), which are imported only
for a spec that sets one: a training file's publish block is validated at DAG parse time,
and most of them set none.
"""

from __future__ import annotations

from typing import Any

from airflow_tfk.core.errors import SpecError
from airflow_tfk.spec.checks import _int

__all__ = ["check_scaling", "disruption_budget"]


def check_scaling(spec: Any) -> None:
    """The rules between the serving spec's scaling fields and the rest of it; sets the
    typed values on ``spec``."""
    if any(v is not None for v in (spec.autoscaling, spec.ingress, spec.http_route)):
        from airflow_tfk.serving.scaling import Autoscaling, HTTPRouteSpec, IngressSpec

        object.__setattr__(spec, "autoscaling", Autoscaling.from_value(spec.autoscaling))
        object.__setattr__(spec, "ingress", IngressSpec.from_value(spec.ingress))
        object.__setattr__(spec, "http_route", HTTPRouteSpec.from_value(spec.http_route))
    auto = spec.autoscaling
    _int(spec.max_unavailable, "max_unavailable", 1, 1000)
    if auto is not None:
        if spec.replicas != 1:
            raise SpecError(
                "replicas",
                "and 'autoscaling' are exclusive: the autoscaler sets the replicas "
                "(give autoscaling.min_replicas instead)",
                spec.replicas,
            )
        if not spec.resources.cpu:
            raise SpecError(
                "resources.cpu",
                "is required with autoscaling: its CPU target is a share of the CPU request",
            )
    top, what = (auto.max_replicas, "autoscaling.max_replicas") if auto else (spec.replicas, "replicas")
    if top > 1 and spec.max_unavailable >= top:
        raise SpecError(
            "max_unavailable",
            f"must be below {what} ({top}): a budget that lets every pod go protects none",
            spec.max_unavailable,
        )
    policy = spec.network_policy
    exposed = [n for n in ("ingress", "http_route") if getattr(spec, n) is not None]
    if exposed and policy.enabled and not policy.allow_from:
        raise SpecError(
            "network_policy.allow_from",
            f"is empty while '{exposed[0]}' is set: the serving NetworkPolicy would refuse the "
            "ingress controller's or gateway's connections; admit its pods there "
            "(or switch the policy off)",
        )


def disruption_budget(spec: Any) -> int | None:
    """``maxUnavailable`` of the PodDisruptionBudget, None when the deployment never has
    more than one pod: a lone pod has no sibling to keep serving during a drain. (A
    ``maxUnavailable`` budget never blocks the drain of a lone pod, so an autoscaled
    deployment keeps its budget while it runs one.)"""
    auto = spec.autoscaling
    top = auto.max_replicas if auto is not None else spec.replicas
    return int(spec.max_unavailable) if top > 1 else None
