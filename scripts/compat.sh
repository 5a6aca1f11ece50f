#!/usr/bin/env bash
# The compatibility matrix (scripts/compat.py): builds the wheel, installs it with the
# lowest and with the newest versions it allows into fresh venvs outside the checkout,
# runs the same checks on each (import, providers, render, DAG parse, --version, the
# quickstart DAG, one KWOK test), prints the table and writes it into README.md between
# <!-- compat:begin --> and <!-- compat:end -->. The local checks of both rows took 12 min
# on 2 cores under a load average of ~20 (warm uv cache); the KWOK test waits for the
# control plane build (tests/k8s/build.sh), which takes long when it is cold.
#   bash scripts/compat.sh [--row lowest|newest] [--no-readme] [--no-kwok]
# TFK_COMPAT_KEEP=1 keeps the venvs (their paths are printed); TFK_COMPAT_K8S_BUILD_WAIT
# (seconds, default 1800) bounds the wait for the control plane build, after which the KWOK
# column says "not run" with the reason under the table.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec "${TFK_VENV:-.venv}/bin/python" scripts/compat.py "$@"
