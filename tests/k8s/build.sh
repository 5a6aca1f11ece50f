#!/usr/bin/env bash
# Build the integration-test control plane ONCE into a cache outside the repository:
#   controlplane  (etcd + kube-apiserver + kube-controller-manager + kube-scheduler, from
#                  k8s.io/kubernetes and go.etcd.io/etcd/server/v3; see controlplane/go.mod)
#   kwok          (sigs.k8s.io/kwok/cmd/kwok; see kwok/go.mod)
#
# The cache directory is keyed by a hash of the Go toolchain version and every input file
# (go.mod, go.sum, Go sources, build flags), so bumping a version produces a new key and
# an unchanged tree does nothing. Prints the bin directory on the last line of stdout.
#
# Environment:
#   AIRFLOW_TFK_K8S_CACHE  cache root (default ${XDG_CACHE_HOME:-~/.cache}/airflow-tfk/k8s)
#   AIRFLOW_TFK_K8S_GO     go binary (default: `go` on PATH, else /usr/local/go/bin/go)
#   AIRFLOW_TFK_K8S_BUILD_P  go build -p (default: number of CPUs)
#   AIRFLOW_TFK_K8S_NICE   niceness for the compile (default 10)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
tfk_init build.sh
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tfk_go

k8s_version="$(tfk_mod_version "$here/controlplane/go.mod" k8s.io/kubernetes)"
kwok_version="$(tfk_mod_version "$here/kwok/go.mod" sigs.k8s.io/kwok)"

# How the binaries are built: part of the cache key, so changing a flag rebuilds.
cp_ldflags="$(tfk_k8s_ldflags "$k8s_version")"
recipe="recipe=1 CGO_ENABLED=0 -trimpath cp_ldflags=[$cp_ldflags] kwok_ldflags=[-s -w]"

# The cache key: toolchain + recipe + every Go input (not this script's text, so editing a
# comment here does not cost a rebuild). Any version bump -> a new directory.
key="$(cd "$here" && tfk_go_key "$recipe" controlplane/go.mod controlplane/go.sum controlplane/*.go \
    kwok/go.mod kwok/go.sum)"
out="$cache_root/${k8s_version}-kwok${kwok_version}-$key"
bin="$out/bin"

if [[ -x "$bin/controlplane" && -x "$bin/kwok" && -f "$out/.complete" ]]; then
    echo "$bin"
    exit 0
fi

# One builder at a time (pytest-xdist workers, parallel sessions).
tfk_lock "$cache_root"
if [[ -x "$bin/controlplane" && -x "$bin/kwok" && -f "$out/.complete" ]]; then
    echo "$bin"
    exit 0
fi

p="${AIRFLOW_TFK_K8S_BUILD_P:-$(nproc)}"
nice_n="${AIRFLOW_TFK_K8S_NICE:-10}"
tfk_tmpdir "$cache_root" .build
mkdir -p "$tmp/bin"

start=$(date +%s)
echo "build.sh: building control plane ${k8s_version} + kwok ${kwok_version} into $out (go $go_version, -p $p)" >&2
tfk_go_build "$here/controlplane" "$cp_ldflags" "$tmp/bin/controlplane"
t1=$(date +%s)
tfk_go_build "$here/kwok" "-s -w" "$tmp/bin/kwok" sigs.k8s.io/kwok/cmd/kwok
t2=$(date +%s)
for c in etcd kube-apiserver kube-controller-manager kube-scheduler; do
    ln -s controlplane "$tmp/bin/$c"
done
{
    echo "k8s.io/kubernetes $k8s_version"
    echo "sigs.k8s.io/kwok $kwok_version"
    echo "go $go_version"
    echo "controlplane_build_seconds $((t1 - start))"
    echo "kwok_build_seconds $((t2 - t1))"
} > "$tmp/BUILDINFO"
touch "$tmp/.complete"
tfk_publish "$out" 'v*-kwok*-*'
echo "build.sh: done in $((t2 - start)) s (control plane $((t1 - start)) s, kwok $((t2 - t1)) s)" >&2
echo "$bin"
