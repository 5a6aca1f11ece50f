#!/usr/bin/env bash
# Build/fetch what several real nodes need on top of ONE node (../node/build.sh), into a
# cache outside the repository:
#   bin/kube-proxy   k8s.io/kubernetes/cmd/kube-proxy, built from kube-proxy/ whose go.mod is
#                    the kubelet's go.mod plus the proxy's own modules (same pins), so the
#                    Go build cache of the control plane and the kubelet is shared
#   bin/iptables*, bin/ipset, lib/, xtables/
#                    legacy iptables and ipset from the Debian packages pinned in debs.txt: `apt-get
#                    download` + `dpkg -x` into the cache, nothing installed system-wide
# Keyed like ../node/build.sh. Prints the directory on the last line.
#
# Environment: AIRFLOW_TFK_K8S_CACHE, AIRFLOW_TFK_K8S_GO, AIRFLOW_TFK_K8S_BUILD_P,
# AIRFLOW_TFK_K8S_NICE as for ../build.sh.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tfk_init nodes/build.sh
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tfk_go
for tool in apt-get dpkg; do
    command -v "$tool" >/dev/null 2>&1 || { echo "nodes/build.sh: needs $tool (Debian packages)" >&2; exit 3; }
done

k8s_version="$(tfk_mod_version "$here/kube-proxy/go.mod" k8s.io/kubernetes)"
proxy_ldflags="$(tfk_k8s_ldflags "$k8s_version")"
recipe="recipe=1 CGO_ENABLED=0 -trimpath proxy_ldflags=[$proxy_ldflags] dpkg-x iptables-legacy"
key="$(cd "$here" && tfk_go_key "$recipe" kube-proxy/go.mod kube-proxy/go.sum kube-proxy/*.go debs.txt)"
out="$cache_root/nodes-${k8s_version}-$key"

complete() { [[ -f "$out/.complete" && -x "$out/bin/kube-proxy" && -x "$out/bin/iptables" && -x "$out/bin/ipset" ]]; }
if complete; then echo "$out"; exit 0; fi
tfk_lock "$cache_root"
if complete; then echo "$out"; exit 0; fi

p="${AIRFLOW_TFK_K8S_BUILD_P:-$(nproc)}"
nice_n="${AIRFLOW_TFK_K8S_NICE:-10}"
tfk_tmpdir "$cache_root" .nodes-build
mkdir -p "$tmp/bin" "$tmp/lib" "$tmp/debs"
start=$(date +%s)
echo "nodes/build.sh: building kube-proxy ${k8s_version} + iptables debs into $out (go $go_version, -p $p)" >&2

# 1. Debian packages. /usr/sbin/iptables is an alternatives link made at install time, not
# part of the package: the links here name the legacy backend, which needs no nft tables.
tfk_debs "$here/debs.txt" "$tmp/debs"
cp "$root/usr/sbin/xtables-legacy-multi" "$root/usr/sbin/ipset" "$tmp/bin/"
for t in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
    ln -s xtables-legacy-multi "$tmp/bin/$t"
done
cp -a "$root"/usr/lib/x86_64-linux-gnu/*.so* "$tmp/lib/"
cp -a "$root/usr/lib/x86_64-linux-gnu/xtables" "$tmp/xtables"
rm -rf "$tmp/debs"
t1=$(date +%s)

# 2. kube-proxy.
tfk_go_build "$here/kube-proxy" "$proxy_ldflags" "$tmp/bin/kube-proxy"
t2=$(date +%s)
{
    echo "k8s.io/kubernetes $k8s_version"
    printf 'deb %s\n' "${debs[@]}"
    echo "go $go_version"
    echo "debs_seconds $((t1 - start))"
    echo "kube_proxy_build_seconds $((t2 - t1))"
} > "$tmp/BUILDINFO"
touch "$tmp/.complete"
tfk_publish "$out" 'nodes-*'
echo "nodes/build.sh: done in $((t2 - start)) s (debs $((t1 - start)) s, kube-proxy $((t2 - t1)) s)" >&2
echo "$out"
