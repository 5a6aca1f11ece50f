#!/usr/bin/env bash
# What the browser test (tests/browser/) needs from Debian: headless Chromium, its
# WebDriver, and PostgreSQL (Airflow's database there, as in docker-compose.yaml).
# Idempotent: installs only what is missing. Called by that test's fixture on a fresh
# machine (CI), so nothing is installed by hand.
set -euo pipefail
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "browser-deps: need root to apt-get install ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# apt's own lock serialises concurrent callers; wait for it rather than fail.
apt-get -o DPkg::Lock::Timeout=600 update -qq
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" fonts-dejavu-core >/dev/null
echo "browser-deps: installed ${missing[*]}" >&2
