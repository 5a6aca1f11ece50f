#!/usr/bin/env bash
# Refresh the committed lock of the development and test environment:
#   requirements/lock.txt        every package scripts/bootstrap.sh installs, exact versions
#   requirements/build-lock.txt  the build backend (hatchling) for the editable install
# The published package keeps the ranges of pyproject.toml; only this environment is pinned.
# A refresh is an ordinary commit that CI tests like any other:
#   bash scripts/lock.sh && git diff requirements/ && bash scripts/test.sh
# Options go to `uv pip compile` (e.g. --upgrade-package pyyaml). Without --upgrade or
# --upgrade-package, versions already in the lock are kept where the ranges still allow them.
#
# Environment: TFK_LOCK_OUT  write the lock here instead (scripts/newest.sh uses it)
set -euo pipefail
cd "$(dirname "$0")/.."
uv="${TFK_VENV:-.venv}/bin/uv"
if [ ! -x "$uv" ]; then
  uv="$(command -v uv || true)"
fi
[ -n "$uv" ] || { echo "lock.sh: needs uv (run scripts/bootstrap.sh once, or put uv on PATH)" >&2; exit 2; }
out="${TFK_LOCK_OUT:-requirements/lock.txt}"
build_out="${out%lock.txt}build-lock.txt"
[ "$build_out" != "$out" ] || build_out="$out.build"
common=(--python-version 3.11 --python-platform x86_64-unknown-linux-gnu --quiet --no-progress)
"$uv" pip compile "${common[@]}" pyproject.toml requirements/tools.in \
  --extra test --extra local --extra validate \
  --excludes requirements/excludes.txt \
  --generate-hashes --custom-compile-command "bash scripts/lock.sh" -o "$out" "$@"
"$uv" pip compile "${common[@]}" requirements/build.in \
  --custom-compile-command "bash scripts/lock.sh" -o "$build_out" "$@"
echo "lock.sh: wrote $out and $build_out" >&2
