#!/usr/bin/env bash
# Build the JobSet controller (sigs.k8s.io/jobset, the `tool` in go.mod here) ONCE into a
# cache outside the repository, keyed by the Go version and go.mod/go.sum (../lib.sh).
# One builder at a time (flock). Prints the binary's path on the last line.
#
# Environment: AIRFLOW_TFK_K8S_CACHE (cache root), AIRFLOW_TFK_K8S_GO (go binary),
# AIRFLOW_TFK_K8S_BUILD_P (go build -p, default 1), AIRFLOW_TFK_K8S_NICE (default 19).
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tfk_init jobset/build.sh
tfk_addon_build jobset sigs.k8s.io/jobset sigs.k8s.io/jobset
