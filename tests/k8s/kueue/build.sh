#!/usr/bin/env bash
# Build the Kueue controller (sigs.k8s.io/kueue/cmd/kueue, the `tool` in go.mod here) ONCE
# into a cache outside the repository, keyed like tests/k8s/jobset/build.sh by the Go version
# and go.mod/go.sum. go.mod pins the dependencies Kueue shares with the JobSet module, other
# than k8s.io/* and sigs.k8s.io/* (Kueue v0.14 needs k8s.io v0.34, JobSet's build has
# v0.35), to the JobSet module's versions (replace block), so a JobSet build beforehand
# leaves their compile actions (x/net, grpc, protobuf, prometheus, otel...) in the Go
# build cache.
# One builder at a time (the same flock as JobSet's). Prints the binary's path on the last line.
#
# Environment: AIRFLOW_TFK_K8S_CACHE (cache root), AIRFLOW_TFK_K8S_GO (go binary),
# AIRFLOW_TFK_K8S_BUILD_P (go build -p, default 1), AIRFLOW_TFK_K8S_NICE (default 19).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${AIRFLOW_TFK_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/airflow-tfk/k8s}/addons"
go_bin="${AIRFLOW_TFK_K8S_GO:-$(command -v go || echo /usr/local/go/bin/go)}"
go_version="$("$go_bin" env GOVERSION)"
version="$(awk '$1 == "require" && $2 == "sigs.k8s.io/kueue" {print $3; exit}
                $1 == "sigs.k8s.io/kueue" {print $2; exit}' "$here/go.mod")"
key="$( { echo "$go_version recipe=1 -trimpath -s -w"; cat "$here/go.mod" "$here/go.sum"; } | sha256sum | cut -c1-16)"
out="$cache_root/kueue-$version-$key"
if [[ -x "$out/kueue" ]]; then echo "$out/kueue"; exit 0; fi
mkdir -p "$cache_root"
exec 9>"$cache_root/.build.lock"
flock 9
if [[ -x "$out/kueue" ]]; then echo "$out/kueue"; exit 0; fi
export GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 GOTOOLCHAIN=local
tmp="$(mktemp -d "$cache_root/.build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
cd "$here"
nice -n "${AIRFLOW_TFK_K8S_NICE:-19}" "$go_bin" mod download >&2
nice -n "${AIRFLOW_TFK_K8S_NICE:-19}" "$go_bin" build -p "${AIRFLOW_TFK_K8S_BUILD_P:-1}" -trimpath \
    -ldflags "-s -w" -o "$tmp/kueue" sigs.k8s.io/kueue/cmd/kueue >&2
echo "kueue_build_seconds $(( $(date +%s) - start ))" > "$tmp/BUILDINFO"
rm -rf "$out"; mv "$tmp" "$out"; trap - EXIT
echo "build.sh: kueue $version built in $(( $(date +%s) - start )) s" >&2
echo "$out/kueue"
