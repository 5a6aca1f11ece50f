#!/usr/bin/env bash
# Build images/training/Dockerfile for real, without a registry, into a cache outside the
# repository; prints the path of a `docker save`-style archive of the image on the last line
# of stdout (for `ctr images import`, `docker load`, `podman load`).
#
#   bash images/training/build.sh          # ~8 min cold, < 1 s when nothing changed
#
# How (each piece cached by a hash of its inputs, so CI pays only when they change):
# 1. tools-<key>/: buildah (1.28, Debian bookworm), runc, debootstrap and the libgpgme
#    buildah needs, pinned in debs.txt: `apt-get download` + `dpkg -x`, never installed.
# 2. The base, a STAND-IN for python:3.11-slim (the Dockerfile's FROM; no registry is
#    reachable here): a Debian bookworm minbase root made by debootstrap with
#    base/packages.txt (Debian's own Python 3.11 and pip), committed by base/Dockerfile
#    under the name docker.io/library/python:3.11-slim in buildah's storage, so the
#    Dockerfile builds unmodified. base/Dockerfile says how it differs from the official
#    image. Key: suite, variant, mirror, packages.txt, base/Dockerfile, the tools.
# 3. The image: `buildah bud --layers` with persistent storage (overlay driver) under the
#    cache. The TensorFlow layer stays cached, so a change to airflow_tfk/ rebuilds only
#    the wheel and the layers after it (~30 s). Key of the archive: the base, the
#    Dockerfile, its .dockerignore and every file of the build context it lets through.
#    Unchanged key: the archive is there and nothing runs.
#
# Everything that mounts or runs containers (debootstrap, buildah, runc) runs in a private
# mount + PID namespace that dies with this script: no mount or process outlives it, and
# buildah's working containers are removed (`buildah rm --all`) at its end. Heavy work runs
# at nice 19. One builder at a time (flock).
#
# The RUN steps reach PyPI over the host network (--network host) and trust the host's CA
# bundle, bind-mounted read-only for the build only (this machine's network intercepts TLS
# with a CA the host trusts); nothing of it is in the image.
#
# Needs root (rootful buildah: overlay storage, runc), unshare, flock, apt-get, dpkg, wget
# and gpgv (debootstrap), the Debian archive keyring. Exit 3 names what is missing.
#
# Environment:
#   AIRFLOW_TFK_IMAGE_CACHE   cache root (default ${XDG_CACHE_HOME:-~/.cache}/airflow-tfk/images)
#   AIRFLOW_TFK_IMAGE_NICE    niceness of the build (default 19)
#   AIRFLOW_TFK_DEBIAN_MIRROR debootstrap's mirror (default http://deb.debian.org/debian)
set -euo pipefail
trap 'echo "images/training/build.sh: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache_root="${AIRFLOW_TFK_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/airflow-tfk/images}"
nice_n="${AIRFLOW_TFK_IMAGE_NICE:-19}"
mirror="${AIRFLOW_TFK_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
suite=bookworm
variant=minbase
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
# What `FROM python:${PYTHON_VERSION}-slim` (PYTHON_VERSION=3.11) resolves to.
base_ref=docker.io/library/python:3.11-slim
image_name=tfk.local/airflow-tfk-training
host_ca=/etc/ssl/certs/ca-certificates.crt

log() { echo "images/training/build.sh: $*" >&2; }

# --------------------------------------------------------------------------------------
# Inside the private mount + PID namespace (the script re-runs itself with --inside).
buildah_() {
    LD_LIBRARY_PATH="$tools/lib" "$tools/bin/buildah" \
        --root "$cache_root/storage" --runroot "$cache_root/run" --storage-driver overlay \
        --registries-conf "$tools/conf/registries.conf" "$@"
}

build_base() {
    local t0 rootfs="$tmp/rootfs"
    t0=$(date +%s)
    mapfile -t pkgs < <(grep -vE '^\s*(#|$)' "$here/base/packages.txt")
    log "base: debootstrap --variant=$variant $suite ($mirror) + ${pkgs[*]}"
    DEBOOTSTRAP_DIR="$tools/debootstrap" "$tools/debootstrap/debootstrap" \
        --variant="$variant" --keyring="$keyring" --include="$(IFS=,; echo "${pkgs[*]}")" \
        "$suite" "$rootfs" "$mirror" >"$tmp/debootstrap.log" 2>&1 \
        || { tail -n 30 "$tmp/debootstrap.log" >&2; return 1; }
    # The official image has no PEP 668 marker: pip installs system-wide (base/Dockerfile).
    rm -f "$rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    mkdir -p "$tmp/base"
    tar --numeric-owner -C "$rootfs" -cf "$tmp/base/rootfs.tar" .
    cp "$here/base/Dockerfile" "$tmp/base/Dockerfile"
    buildah_ bud --quiet --pull=never --signature-policy "$tools/conf/policy.json" \
        --isolation oci --runtime "$tools/bin/runc" --network none \
        -t "$base_ref" -t "localhost/tfk-base:$base_key" -f "$tmp/base/Dockerfile" "$tmp/base" >&2
    echo "base_seconds $(($(date +%s) - t0))" >>"$tmp/BUILDINFO"
}

inside() {
    # buildah's run root (locks, mount state) lives and dies with this namespace.
    mkdir -p "$cache_root/run" "$cache_root/storage"
    mount -t tmpfs -o mode=0700 tfk-buildah-run "$cache_root/run"
    # Working containers of a killed build, if any, then ours whatever happens.
    buildah_ rm --all >/dev/null 2>&1 || true
    trap 'buildah_ rm --all >/dev/null 2>&1 || true' EXIT
    if [[ -z "$(buildah_ images -q "localhost/tfk-base:$base_key" 2>/dev/null || true)" ]]; then
        build_base
    else
        # The name the Dockerfile asks for always points at the base of this key.
        buildah_ tag "localhost/tfk-base:$base_key" "$base_ref"
    fi
    local t0 ca=()
    t0=$(date +%s)
    [[ -f "$host_ca" ]] && ca=(--volume "$host_ca:$host_ca:ro")
    log "bud images/training/Dockerfile -> $image_name:$key"
    buildah_ bud --layers --pull=never --signature-policy "$tools/conf/policy.json" \
        --isolation oci --runtime "$tools/bin/runc" --network host "${ca[@]}" \
        --ignorefile "$here/Dockerfile.dockerignore" -f "$here/Dockerfile" \
        -t "$image_name:$key" "$repo" >"$tmp/bud.log" 2>&1 \
        || { tail -n 40 "$tmp/bud.log" >&2; return 1; }
    grep -E '^(\[[0-9]/[0-9]\] )?STEP|Using cache' "$tmp/bud.log" | sed 's/^/  /' >&2 || true
    local t1
    t1=$(date +%s)
    buildah_ push --quiet --signature-policy "$tools/conf/policy.json" \
        "$image_name:$key" "docker-archive:$tmp/training.tar:$image_name:$key" >&2
    local t2
    t2=$(date +%s)
    {
        echo "image $image_name:$key"
        echo "image_id $(buildah_ images -q --no-trunc "$image_name:$key")"
        echo "bud_seconds $((t1 - t0))"
        echo "archive_seconds $((t2 - t1))"
    } >>"$tmp/BUILDINFO"
    # Older builds: their tags go, then every image no tagged one builds on (the wheel
    # stage, superseded layers). The TensorFlow layer under the new tag stays.
    local old
    for old in $(buildah_ images --format '{{.Name}}:{{.Tag}}' | grep -E "^($image_name|localhost/tfk-base):" \
        | grep -vxF -e "$image_name:$key" -e "localhost/tfk-base:$base_key"); do
        buildah_ rmi "$old" >/dev/null
    done
    buildah_ rmi --prune >/dev/null 2>&1 || true
    buildah_ rm --all >/dev/null
}

if [[ "${1:-}" == "--inside" ]]; then
    inside
    exit 0
fi

# --------------------------------------------------------------------------------------
# Outside: prerequisites, keys, the cached answer, the tools, then the namespace.
missing=()
[[ "$(id -u)" == 0 ]] || missing+=("root (rootful buildah: overlay storage, runc)")
for tool in unshare flock apt-get dpkg wget gpgv sha256sum tar; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("the '$tool' command")
done
[[ -f "$keyring" ]] || missing+=("the Debian archive keyring $keyring (debian-archive-keyring)")
if ((${#missing[@]})); then
    log "this machine lacks: $(IFS=';'; echo "${missing[*]}")"
    exit 3
fi

hash16() { sha256sum | cut -c1-16; }
tools_key="$({ echo "tools recipe=1"; cat "$here/debs.txt"; } | hash16)"
base_key="$(
    {
        echo "base recipe=1 suite=$suite variant=$variant mirror=$mirror tools=$tools_key"
        echo "strip: EXTERNALLY-MANAGED apt-archives apt-lists"
        cat "$here/base/packages.txt" "$here/base/Dockerfile"
    } | hash16
)"
# The build context exactly as Dockerfile.dockerignore lets it through (keep in step).
key="$(
    {
        echo "image recipe=1 base=$base_key"
        cat "$here/Dockerfile" "$here/Dockerfile.dockerignore"
        cd "$repo"
        find pyproject.toml README.md airflow_tfk templates -type f \
            ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
    } | hash16
)"
out="$cache_root/training-$key.tar"
if [[ -f "$out" ]]; then
    echo "$out"
    exit 0
fi

mkdir -p "$cache_root"
exec 9>"$cache_root/.build.lock"
flock 9
if [[ -f "$out" ]]; then
    echo "$out"
    exit 0
fi

start=$(date +%s)
# Under the lock, a build directory left behind is from a build that was killed.
find "$cache_root" -maxdepth 1 -type d -name '.build.*' -exec rm -rf {} +
tmp="$(mktemp -d "$cache_root/.build.XXXXXX")"
# After the namespace is gone (no mount can be left under $tmp by then).
trap 'rm -rf "$tmp"' EXIT
trap 'exit 143' TERM INT

tools="$cache_root/tools-$tools_key"
if [[ ! -f "$tools/.complete" ]]; then
    log "tools: $(grep -vcE '^\s*(#|$)' "$here/debs.txt") Debian packages (debs.txt) -> $tools"
    mapfile -t debs < <(grep -vE '^\s*(#|$)' "$here/debs.txt")
    t="$tmp/tools"
    mkdir -p "$t/debs" "$t/bin" "$t/lib" "$t/conf"
    apt-get update -qq >&2
    (cd "$t/debs" && apt-get download -qq "${debs[@]}" 2>&1 | grep -v 'unsandboxed as root' >&2 || true)
    for deb in "$t"/debs/*.deb; do dpkg -x "$deb" "$t/root"; done
    [[ $(find "$t/debs" -name '*.deb' | wc -l) == "${#debs[@]}" ]] || { log "apt-get download failed"; exit 1; }
    cp "$t/root/usr/bin/buildah" "$t/root/usr/sbin/runc" "$t/bin/"
    cp -a "$t/root/usr/lib/x86_64-linux-gnu/"libgpgme* "$t/lib/"
    cp -a "$t/root/usr/share/debootstrap" "$t/debootstrap"
    cp "$t/root/usr/sbin/debootstrap" "$t/debootstrap/debootstrap"
    cp "$t/root/etc/containers/policy.json" "$t/conf/"
    # Short names (FROM python:3.11-slim) resolve to docker.io, found in local storage
    # (--pull=never: nothing is ever pulled).
    printf 'unqualified-search-registries = ["docker.io"]\nshort-name-mode = "permissive"\n' \
        >"$t/conf/registries.conf"
    rm -rf "$t/debs" "$t/root"
    touch "$t/.complete"
    rm -rf "$tools"
    mv "$t" "$tools"
    # Earlier tool sets are not needed by anything.
    find "$cache_root" -maxdepth 1 -name 'tools-*' ! -name "tools-$tools_key" -exec rm -rf {} +
fi

export tools tmp key base_key cache_root
unshare --mount --pid --fork --kill-child --mount-proc --propagation private -- \
    nice -n "$nice_n" bash "$here/build.sh" --inside
mv "$tmp/training.tar" "$out.tmp"
mv "$out.tmp" "$out"
cp "$tmp/BUILDINFO" "${out%.tar}.info"
echo "total_seconds $(($(date +%s) - start))" >>"${out%.tar}.info"
# The two newest archives are kept (each ~2 GB): another checkout (a branch, a second
# session on this machine) may be about to import the one before.
ls -1t "$cache_root"/training-*.tar | tail -n +3 | while read -r old; do rm -f "$old" "${old%.tar}.info"; done
log "done in $(($(date +%s) - start)) s: $(tr '\n' ' ' <"${out%.tar}.info")"
echo "$out"
