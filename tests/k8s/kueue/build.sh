#!/usr/bin/env bash
# Build the Kueue controller (sigs.k8s.io/kueue/cmd/kueue, the `tool` in go.mod here) ONCE
# into a cache outside the repository, keyed by the Go version and go.mod/go.sum
# (../lib.sh). go.mod pins the dependencies Kueue shares with the JobSet module, other
# than k8s.io/* and sigs.k8s.io/* (Kueue v0.14 needs k8s.io v0.34, JobSet's build has
# v0.35), to the JobSet module's versions (replace block), so a JobSet build beforehand
# leaves their compile actions (x/net, grpc, protobuf, prometheus, otel...) in the Go
# build cache.
# One builder at a time (the same flock as JobSet's). Prints the binary's path on the last line.
#
# Environment: AIRFLOW_TFK_K8S_CACHE (cache root), AIRFLOW_TFK_K8S_GO (go binary),
# AIRFLOW_TFK_K8S_BUILD_P (go build -p, default 1), AIRFLOW_TFK_K8S_NICE (default 19).
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tfk_init kueue/build.sh
tfk_addon_build kueue sigs.k8s.io/kueue sigs.k8s.io/kueue/cmd/kueue
