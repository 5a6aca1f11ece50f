#!/usr/bin/env bash
# Build Kubeflow training-operator v1.9 (github.com/kubeflow/training-operator,
# cmd/training-operator.v1, the `tool` in go.mod here) ONCE into a cache outside the
# repository, keyed by the Go version and go.mod/go.sum (../lib.sh). go.mod keeps the
# module's own pins (k8s.io v0.31, controller-runtime v0.19: what v1.9 was released
# with), so it shares no compile actions with the other builds; only
# github.com/modern-go/reflect2 is raised to the version the JobSet and Kueue modules use
# (a 2025 commit; v1.0.2 is from 2021).
# For bench/bench_vs_tfjob.py only: no test and nothing in CI builds or needs it.
# One builder at a time (the add-ons' flock). Prints the binary's path on the last line.
#
# Environment: AIRFLOW_TFK_K8S_CACHE (cache root), AIRFLOW_TFK_K8S_GO (go binary),
# AIRFLOW_TFK_K8S_BUILD_P (go build -p, default 1), AIRFLOW_TFK_K8S_NICE (default 19).
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tfk_init tfjob/build.sh
tfk_addon_build training-operator github.com/kubeflow/training-operator \
    github.com/kubeflow/training-operator/cmd/training-operator.v1
