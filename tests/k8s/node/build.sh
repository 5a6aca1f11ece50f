#!/usr/bin/env bash
# Build/fetch the pieces of ONE real Kubernetes node for tests/k8s_node into a cache outside
# the repository (next to the control plane of ../build.sh):
#   bin/kubelet      k8s.io/kubernetes/cmd/kubelet, built from kubelet/ whose go.mod is the
#                    control plane's go.mod (same pins), so the Go build cache is shared
#   bin/coredns      github.com/coredns/coredns with a minimal plugin set (coredns/)
#   bin/pause        the pods' sandbox process (pause/), packed into a local image
#   bin/containerd, containerd-shim-runc-v2, ctr
#                    github.com/containerd/containerd/v2 (containerd/): kubelet >= 1.37
#                    needs containerd 2 (the RuntimeConfig RPC), which Debian does not ship
#   bin/runc, cni/{bridge,host-local,loopback}
#                    from the Debian packages pinned in debs.txt: `apt-get download` +
#                    `dpkg -x` into the cache, nothing installed system-wide
# The directory is keyed by a hash of the Go toolchain version, the recipe and every input
# file, so an unchanged tree does nothing. Prints the node directory on the last line.
#
# Environment: AIRFLOW_TFK_K8S_CACHE, AIRFLOW_TFK_K8S_GO, AIRFLOW_TFK_K8S_BUILD_P,
# AIRFLOW_TFK_K8S_NICE as for ../build.sh.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tfk_init node/build.sh
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tfk_go
for tool in apt-get dpkg; do
    command -v "$tool" >/dev/null 2>&1 || { echo "node/build.sh: needs $tool (Debian packages)" >&2; exit 3; }
done

k8s_version="$(tfk_mod_version "$here/kubelet/go.mod" k8s.io/kubernetes)"
coredns_version="$(tfk_mod_version "$here/coredns/go.mod" github.com/coredns/coredns)"
containerd_version="$(tfk_mod_version "$here/containerd/go.mod" github.com/containerd/containerd/v2)"

# The same flags as the control plane's build (../build.sh): identical compile actions hit
# the same Go build cache entries.
kubelet_ldflags="$(tfk_k8s_ldflags "$k8s_version")"
# containerd's version package is stamped as upstream's release builds do (ctr version and
# the CRI's RuntimeVersion report it).
containerd_ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=${containerd_version#v}"
recipe="recipe=1 CGO_ENABLED=0 -trimpath kubelet_ldflags=[$kubelet_ldflags] coredns_ldflags=[-s -w] containerd_ldflags=[$containerd_ldflags] dpkg-x"

key="$(cd "$here" && tfk_go_key "$recipe" kubelet/go.mod kubelet/go.sum kubelet/*.go coredns/go.mod \
    coredns/go.sum coredns/*.go containerd/go.mod containerd/go.sum pause/go.mod pause/*.go debs.txt)"
out="$cache_root/node-${k8s_version}-coredns${coredns_version}-containerd${containerd_version}-$key"

complete() { [[ -f "$out/.complete" && -x "$out/bin/kubelet" && -x "$out/bin/coredns" && -x "$out/bin/pause" && -x "$out/bin/containerd" ]]; }
if complete; then echo "$out"; exit 0; fi

# One builder at a time, shared with ../build.sh: the Go builds then run one after the
# other and the second finds the first's packages in the build cache.
tfk_lock "$cache_root"
if complete; then echo "$out"; exit 0; fi

p="${AIRFLOW_TFK_K8S_BUILD_P:-$(nproc)}"
nice_n="${AIRFLOW_TFK_K8S_NICE:-10}"
tfk_tmpdir "$cache_root" .node-build
mkdir -p "$tmp/bin" "$tmp/cni" "$tmp/debs"

start=$(date +%s)
echo "node/build.sh: building kubelet ${k8s_version} + coredns ${coredns_version} + containerd ${containerd_version} + debs into $out (go $go_version, -p $p)" >&2

# 1. Debian packages: download the pinned versions, unpack, keep only the binaries.
tfk_debs "$here/debs.txt" "$tmp/debs"
cp "$root/usr/sbin/runc" "$tmp/bin/"
cp "$root/usr/lib/cni/bridge" "$root/usr/lib/cni/host-local" "$root/usr/lib/cni/loopback" "$tmp/cni/"
rm -rf "$tmp/debs"
t1=$(date +%s)

# 2. Go binaries (tfk_tmpdir exported the Go settings).
tfk_go_build "$here/kubelet" "$kubelet_ldflags" "$tmp/bin/kubelet"
t2=$(date +%s)
tfk_go_build "$here/coredns" "-s -w" "$tmp/bin/coredns"
tfk_go_build "$here/pause" "-s -w" "$tmp/bin/pause"  # no dependencies: nothing to download
t3=$(date +%s)
for cmd in containerd containerd-shim-runc-v2 ctr; do
    tfk_go_build "$here/containerd" "$containerd_ldflags" "$tmp/bin/$cmd" "github.com/containerd/containerd/v2/cmd/$cmd"
done
t4=$(date +%s)
{
    echo "k8s.io/kubernetes $k8s_version"
    echo "github.com/coredns/coredns $coredns_version"
    echo "github.com/containerd/containerd/v2 $containerd_version"
    printf 'deb %s\n' "${debs[@]}"
    echo "go $go_version"
    echo "debs_seconds $((t1 - start))"
    echo "kubelet_build_seconds $((t2 - t1))"
    echo "coredns_build_seconds $((t3 - t2))"
    echo "containerd_build_seconds $((t4 - t3))"
} > "$tmp/BUILDINFO"
touch "$tmp/.complete"
tfk_publish "$out" 'node-*'
echo "node/build.sh: done in $((t4 - start)) s (debs $((t1 - start)) s, kubelet $((t2 - t1)) s, coredns $((t3 - t2)) s, containerd $((t4 - t3)) s)" >&2
echo "$out"
