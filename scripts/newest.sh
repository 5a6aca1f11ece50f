#!/usr/bin/env bash
# The "newest" check: resolve the newest versions pyproject.toml allows, install them into a
# throw-away venv, run the fast lane on them, and print what differs from the committed lock.
# Not part of every CI run (the lock is what CI installs); run it before refreshing the lock
# (scripts/lock.sh) and at any commit that changes the ranges. Arguments replace the fast
# lane's pytest arguments.
#   bash scripts/newest.sh
#   TFK_NEWEST_KEEP=1 bash scripts/newest.sh   # keep the venv and the resolved lock
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh  # for uv itself
work=$(mktemp -d /tmp/tfk-newest.XXXXXX)
cleanup() { [ -n "${TFK_NEWEST_KEEP:-}" ] && echo "newest.sh: kept $work" >&2 || rm -rf "$work"; }
trap cleanup EXIT
TFK_LOCK_OUT="$work/lock.txt" bash scripts/lock.sh --upgrade
echo "==================== newest allowed versions against requirements/lock.txt ===================="
"${TFK_VENV:-.venv}/bin/python" scripts/lock_diff.py requirements/lock.txt "$work/lock.txt"
args=("$@")
if [ ${#args[@]} -eq 0 ]; then
  args=(-n 2 --dist loadfile -m "not e2e and not slow and not k8s and not k8s_node")
fi
status=0
TFK_VENV="$work/venv" TFK_LOCK="$work/lock.txt" bash scripts/test.sh "${args[@]}" || status=$?
echo "newest.sh: the fast lane on the newest versions exited $status" >&2
exit "$status"
