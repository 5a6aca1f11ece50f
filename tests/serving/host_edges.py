"""Host names at the edges of what the API server admits, shared by the serving spec's unit
test and its check against the real API server (tests/k8s_integration/test_serving_scale.py),
so the two judge the same list.

Each row: (what, host, an Ingress rule's host is admitted (empty: the rule has none), an
HTTPRoute hostname is admitted). The verdicts are the API server's (kube-apiserver's Ingress validation; the
Gateway API v1.6.0 CRD's ``Hostname`` schema), which the KWOK test confirms against the
real server on every run.
"""

from __future__ import annotations

LABEL_63 = "a" * 63
LABEL_64 = "a" * 64
# 253 and 254 characters: labels of 63 joined by dots, then the rest
AT_253 = ".".join([LABEL_63] * 3) + "." + "b" * 61
OVER_253 = AT_253 + "b"
assert (len(AT_253), len(OVER_253)) == (253, 254)

HOSTS: list[tuple[str, str, bool, bool]] = [
    ("empty", "", True, False),
    ("plain", "ml.example.com", True, True),
    ("one label", "localhost", True, True),
    ("wildcard", "*.example.com", True, True),
    ("wildcard alone", "*", False, False),
    ("wildcard inside", "a.*.example.com", False, False),
    ("two wildcards", "*.*.example.com", False, False),
    ("partial wildcard", "a*.example.com", False, False),
    ("IPv4", "10.0.0.1", False, True),
    ("IPv4 leading zeros", "010.000.000.001", False, True),
    ("IPv4, wildcard", "*.10.0.0.1", True, True),
    ("five numbers", "10.0.0.0.1", True, True),
    ("IPv4 over 255", "10.0.0.256", True, True),
    ("IPv6", "fd00::1", False, False),
    ("IPv6 in brackets", "[fd00::1]", False, False),
    ("host and port", "ml.example.com:443", False, False),
    ("trailing dot", "ml.example.com.", False, False),
    ("leading dot", ".example.com", False, False),
    ("empty label", "ml..example.com", False, False),
    ("uppercase", "ML.example.com", False, False),
    ("underscore", "ml_1.example.com", False, False),
    ("leading hyphen", "-ml.example.com", False, False),
    ("trailing hyphen", "ml-.example.com", False, False),
    ("inner hyphens", "m--l.example.com", True, True),
    ("label of 63", LABEL_63 + ".example.com", True, True),
    ("label of 64", LABEL_64 + ".example.com", True, True),
    ("253 characters", AT_253, True, True),
    ("254 characters", OVER_253, False, False),
    ("wildcard, 253 characters", "*." + AT_253[2:], True, True),
    ("space", "ml example.com", False, False),
    ("newline at the end", "ml.example.com\n", False, False),
    ("non-ASCII", "m\u00e9l.example.com", False, False),
    ("punycode", "xn--ml-cja.example.com", True, True),
]
