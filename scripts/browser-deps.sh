#!/usr/bin/env bash
# Headless Chromium and its WebDriver from Debian's packages, for the browser test
# (tests/browser/). Idempotent: does nothing when /usr/bin/chromium is already there.
# Called by that test's fixture on a fresh machine (CI), so nothing is installed by hand.
set -euo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "browser-deps: need root to apt-get install chromium chromium-driver" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# apt's own lock serialises concurrent callers; wait for it rather than fail.
apt-get -o DPkg::Lock::Timeout=600 update -qq
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >/dev/null
/usr/bin/chromium --version
