# Sourced by the Go build scripts of the test clusters (build.sh, node/build.sh and the
# add-ons' <addon>/build.sh): what they all do the same way.
#
# - Go: AIRFLOW_TFK_K8S_GO, else `go` on PATH, else /usr/local/go/bin/go.
# - The cache key: the toolchain version, a recipe string (flags) and the Go inputs, never
#   a script's text, so editing a script (or this file) costs no rebuild. tfk_key hashes
#   what the caller prints, so each script keeps the exact bytes its keys were made of.
# - One builder at a time per cache directory (flock on <dir>/.build.lock).
# - Build into a temporary directory beside the output and move it in place when done,
#   so an interrupted build leaves no half-written cache entry.
#
# Environment: AIRFLOW_TFK_K8S_CACHE (cache root, default
# ${XDG_CACHE_HOME:-~/.cache}/airflow-tfk/k8s), AIRFLOW_TFK_K8S_GO (go binary),
# AIRFLOW_TFK_K8S_BUILD_P (go build -p), AIRFLOW_TFK_K8S_NICE (niceness of the compile).

# tfk_init NAME: strict mode, a failure names NAME and the line; sets cache_root.
tfk_init() {
    tfk_name="$1"
    set -euo pipefail
    trap 'echo "$tfk_name: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
    cache_root="${AIRFLOW_TFK_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/airflow-tfk/k8s}"
}

# tfk_go: sets go_bin and go_version, or exits 3 saying why.
tfk_go() {
    go_bin="${AIRFLOW_TFK_K8S_GO:-}"
    if [[ -z "$go_bin" ]]; then
        if command -v go >/dev/null 2>&1; then go_bin="$(command -v go)"
        elif [[ -x /usr/local/go/bin/go ]]; then go_bin=/usr/local/go/bin/go
        else echo "$tfk_name: no Go toolchain found (set AIRFLOW_TFK_K8S_GO)" >&2; exit 3; fi
    fi
    go_version="$("$go_bin" env GOVERSION 2>/dev/null || true)"
    if [[ "$go_version" != go1.* ]]; then
        echo "$tfk_name: '$go_bin' is not a working Go toolchain (the pinned modules need Go >= 1.26)" >&2
        exit 3
    fi
}

# tfk_key: the cache key (16 hex digits) of what the caller pipes in.
tfk_key() { sha256sum | cut -c1-16; }

# tfk_files DIR FILE...: each file (relative to DIR) under a "== FILE" header, for tfk_key.
tfk_files() {
    local dir="$1" f
    shift
    for f in "$@"; do
        echo "== $f"; cat "$dir/$f"
    done
}

# tfk_go_key RECIPE FILE...: the cache key of a Go build: the toolchain, RECIPE (its flags)
# and each FILE (relative to the current directory, where the caller's globs expanded).
tfk_go_key() {
    { echo "$go_version"; echo "$1"; shift; tfk_files . "$@"; } | tfk_key
}

# tfk_go_build DIR LDFLAGS OUT [PACKAGE]: download DIR's modules and build PACKAGE (default:
# DIR's own) to OUT, at niceness $nice_n with -p $p (both set by the caller).
tfk_go_build() {
    (
        cd "$1"
        nice -n "$nice_n" "$go_bin" mod download >&2
        nice -n "$nice_n" "$go_bin" build -p "$p" -trimpath -ldflags "$2" -o "$3" "${4:-.}" >&2
    )
}

# tfk_debs LIST DIR: download the Debian packages pinned in LIST (one per line; '#' starts
# a comment) into DIR and unpack them into DIR/root with `dpkg -x`: nothing is installed on
# the system. Sets debs (the pins, for the build's manifest) and root (DIR/root).
tfk_debs() {
    local deb
    mapfile -t debs < <(grep -vE '^\s*(#|$)' "$1")
    mkdir -p "$2"
    apt-get update -qq >&2
    (cd "$2" && apt-get download -qq "${debs[@]}" >&2)
    for deb in "$2"/*.deb; do dpkg -x "$deb" "$2/root"; done
    root="$2/root"
}

# tfk_lock DIR: wait until no other build holds DIR's lock (released when the script exits).
tfk_lock() {
    mkdir -p "$1"
    exec 9>"$1/.build.lock"
    flock 9
}

# tfk_tmpdir DIR PREFIX: sets tmp to a fresh directory in DIR, removed if the script fails;
# exports the Go settings every build uses (-mod=readonly: the committed go.sum is the pin,
# a mismatch fails instead of re-resolving).
tfk_tmpdir() {
    tmp="$(mktemp -d "$1/$2.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    export GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 GOTOOLCHAIN=local
}

# tfk_publish OUT [PATTERN]: move the finished tmp directory to OUT; with PATTERN (a glob
# in OUT's directory), keep only the two newest directories matching it (a running test
# session may still use the previous build).
tfk_publish() {
    local parent
    parent="$(dirname "$1")"
    rm -rf "$1"
    mv "$tmp" "$1"
    trap - EXIT
    if [[ $# -gt 1 ]]; then
        # shellcheck disable=SC2086  # PATTERN is a glob
        ls -1dt "$parent"/$2/ 2>/dev/null | tail -n +3 | xargs -r rm -rf || true
    fi
}

# tfk_mod_version GO_MOD MODULE: the version GO_MOD requires of MODULE (a `require` line
# of its own or a line of a require block).
tfk_mod_version() {
    awk -v m="$2" '$1 == "require" && $2 == m {print $3; exit}
                   $1 == m {print $2; exit}' "$1"
}

# tfk_k8s_ldflags VERSION: the ldflags that stamp a Kubernetes binary with VERSION (what
# `kubectl version` and the API server's /version report). The control plane and the
# kubelet use the same string, so identical compile actions share the Go build cache; it is
# part of each build's cache key, so changing it rebuilds both.
tfk_k8s_ldflags() {
    local pkg=k8s.io/component-base/version minor="${1#v1.}"
    minor="${minor%%.*}"
    echo "-s -w -X ${pkg}.gitVersion=$1 -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor}" \
        "-X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=1970-01-01T00:00:00Z"
}

# tfk_addon_build NAME MODULE PACKAGE: build an add-on controller (the `tool` PACKAGE of
# MODULE in the go.mod beside the calling script) once into
# <cache>/addons/NAME-<version>-<key>/NAME, keyed by the Go version and go.mod/go.sum; at
# nice 19 and -p 1 by default (it competes with the tests, not with the user). Prints the
# binary's path on the last line.
tfk_addon_build() {
    local name="$1" module="$2" package="$3" here version key out start
    here="$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)"
    cache_root="$cache_root/addons"
    tfk_go
    version="$(tfk_mod_version "$here/go.mod" "$module")"
    key="$( { echo "$go_version recipe=1 -trimpath -s -w"; cat "$here/go.mod" "$here/go.sum"; } | tfk_key)"
    out="$cache_root/$name-$version-$key"
    if [[ -x "$out/$name" ]]; then echo "$out/$name"; return 0; fi
    tfk_lock "$cache_root"
    if [[ -x "$out/$name" ]]; then echo "$out/$name"; return 0; fi
    tfk_tmpdir "$cache_root" .build
    start=$(date +%s)
    cd "$here"
    nice -n "${AIRFLOW_TFK_K8S_NICE:-19}" "$go_bin" mod download >&2
    nice -n "${AIRFLOW_TFK_K8S_NICE:-19}" "$go_bin" build -p "${AIRFLOW_TFK_K8S_BUILD_P:-1}" -trimpath \
        -ldflags "-s -w" -o "$tmp/$name" "$package" >&2
    echo "${name//-/_}_build_seconds $(( $(date +%s) - start ))" > "$tmp/BUILDINFO"
    tfk_publish "$out"
    echo "build.sh: $name $version built in $(( $(date +%s) - start )) s" >&2
    echo "$out/$name"
}
