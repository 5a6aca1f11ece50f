#!/usr/bin/env bash
# Where the test run's CPU goes, by kind of process (scripts/cpu_profile.py): runs the
# README's test command (arguments go to it) with BSD process accounting on and a hook in
# the venv that logs each venv Python's command line, then prints the table. Root only
# (accounting is system-wide: run it on a machine doing nothing else). Installs Debian's
# `acct` if missing. The hook and accounting are removed and switched off on exit;
# the records stay in the printed folder.
#
#   bash scripts/cpu_profile.sh -q            # the whole suite, both lanes
#   bash scripts/cpu_profile.sh tests/runtime # one tier
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "cpu_profile: process accounting needs root" >&2
  exit 1
fi
if ! command -v accton >/dev/null || ! command -v dump-acct >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends acct >/dev/null
fi
bash scripts/bootstrap.sh
out=$(mktemp -d /tmp/tfk-cpu-profile-XXXXXX)
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
hook="$site/_tfk_cpu_profile_hook.py"
pth="$site/zz_tfk_cpu_profile_hook.pth"
cat >"$hook" <<EOF
import os, sys, time
try:
    _fd = os.open("$out/argv.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(_fd, f"{os.getpid()}\t{os.getppid()}\t{time.time():.2f}\t{' '.join(sys.orig_argv)[:400]}\n".encode())
    os.close(_fd)
except OSError:
    pass
EOF
echo "import _tfk_cpu_profile_hook" >"$pth"
touch "$out/acct"
cleanup() {
  accton off >/dev/null 2>&1 || true
  rm -f "$hook" "$pth"
}
trap cleanup EXIT
accton "$out/acct" >/dev/null
status=0
bash scripts/test.sh "$@" >"$out/test.log" 2>&1 || status=$?
cleanup
echo "cpu_profile: the test run exited $status; its output, the records and the table are in $out"
.venv/bin/python scripts/cpu_profile.py "$out/acct" "$out/argv.log" | tee "$out/table.txt"
