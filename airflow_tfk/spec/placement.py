"""``placement:``: the whole cluster in one topology domain (a rack, a zone, a block).

A parameter-server cluster talks to its PS on every step; workers in another rack or zone
pay that distance on each of them. ``placement: {level: <node label>, mode: required}``
puts every pod of the cluster in the domain of one value of that node label:

- ``required``: each pod carries a required pod affinity to the cluster's own pods with
  ``topologyKey: <level>``, so the scheduler puts the first pod where it fits and every
  other pod beside it. Before anything is created, the backend checks that one domain has
  room for the whole cluster (:func:`airflow_tfk.spec.capacity.domains`): a cluster that
  fits in none fails at once, naming the level, instead of binding part of its pods and
  waiting forever for the rest.
- ``preferred``: the same affinity as a preference (weight 100): one domain when it fits,
  spread otherwise; no check.

Kueue's Topology Aware Scheduling, where the cluster goes through a queue, is asked by the
``kueue.x-k8s.io/podset-required-topology`` (or ``-preferred-topology``) annotation on
every pod template, so Kueue admits the cluster only into one domain with room for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_tfk.core import naming
from airflow_tfk.core.errors import SpecError
from airflow_tfk.spec.decl import choice_field, spec_field

PLACEMENT_MODES = ("required", "preferred")
#: Kueue's Topology Aware Scheduling annotations on a pod template, by mode
KUEUE_TOPOLOGY = {
    "required": "kueue.x-k8s.io/podset-required-topology",
    "preferred": "kueue.x-k8s.io/podset-preferred-topology",
}


def _label_key(value: Any, path: str) -> Any:
    if not naming.is_label_key(value):
        raise SpecError(path, "must be a node label key (e.g. topology.kubernetes.io/zone)", value)
    return value


@dataclass(frozen=True)
class PlacementSpec:
    """One topology domain for the whole cluster."""

    level: str = spec_field(
        kind="str",
        hi=317,
        check=_label_key,
        help="the node label whose value names a domain (e.g. `topology.kubernetes.io/zone`, a "
        "rack or block label)",
    )
    mode: str = choice_field(
        "required",
        PLACEMENT_MODES,
        help_tail=": every pod in one domain, checked before anything is created; or one domain when it fits",
    )


def affinity_with_placement(
    affinity: Mapping[str, Any] | None, placement: PlacementSpec | None, selector: Mapping[str, str]
) -> Mapping[str, Any] | None:
    """The pod's ``affinity`` with the placement's pod-affinity term added (to the user's
    own terms, if any). ``selector``: the labels every pod of the cluster carries."""
    if placement is None:
        return affinity
    term = {"labelSelector": {"matchLabels": dict(selector)}, "topologyKey": placement.level}
    out = dict(affinity or {})
    pod_affinity = dict(out.get("podAffinity") or {})
    if placement.mode == "required":
        key = "requiredDuringSchedulingIgnoredDuringExecution"
        pod_affinity[key] = [*(pod_affinity.get(key) or []), term]
    else:
        key = "preferredDuringSchedulingIgnoredDuringExecution"
        pod_affinity[key] = [*(pod_affinity.get(key) or []), {"weight": 100, "podAffinityTerm": term}]
    out["podAffinity"] = pod_affinity
    return out
