#!/usr/bin/env bash
# Build kube-router (github.com/cloudnativelabs/kube-router/v2/cmd/kube-router, the `tool` in
# go.mod here) ONCE into a cache outside the repository, keyed by the Go version and
# go.mod/go.sum (../../lib.sh). The multi-node tier runs only its network-policy controller
# (--run-firewall), which enforces NetworkPolicies with iptables and ipset; Debian's
# iptables and ipset come from ../build.sh. Prints the binary's path on the last line.
#
# Environment: AIRFLOW_TFK_K8S_CACHE (cache root), AIRFLOW_TFK_K8S_GO (go binary),
# AIRFLOW_TFK_K8S_BUILD_P (go build -p, default 1), AIRFLOW_TFK_K8S_NICE (default 19).
source "$(dirname "${BASH_SOURCE[0]}")/../../lib.sh"
tfk_init nodes/kube-router/build.sh
tfk_addon_build kube-router github.com/cloudnativelabs/kube-router/v2 github.com/cloudnativelabs/kube-router/v2/cmd/kube-router
