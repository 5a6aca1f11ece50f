#!/usr/bin/env bash
# The whole test suite: sets up its own environment, checks the design gates
# (scripts/gates.sh: ruff, formatter, mypy, import-linter), then runs pytest.
# Arguments go to pytest. A failed gate still runs the tests, then fails the script.
#
# Without a test path among the arguments, the real-node tier (tests/k8s_node) runs in a
# second pytest process beside the rest: it mostly waits on its kubelet and pods, so on
# two cores the two overlap instead of adding up. The local end-to-end tier (tests/e2e,
# about 15 min with the real-deployment approval test) runs after it in that process, so the two lanes take about as long as each
# other. Its output follows the main run's. TFK_TEST_LANES=1 runs everything in one
# process. A -m expression that no node test can match (the fast lane's "... and not
# k8s_node") starts no second lane (scripts/node_lane_selects.py); the main lane then runs
# tests/e2e itself.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
gates=0
bash scripts/gates.sh || gates=$?
py="${TFK_VENV:-.venv}/bin/python"

explicit=0
for arg in "$@"; do
  [ -e "${arg%%::*}" ] && explicit=1
done

status=0
if [ "$explicit" -eq 1 ] || [ "${TFK_TEST_LANES:-2}" = "1" ]; then
  "$py" -m pytest "$@" || status=$?
elif ! "$py" scripts/node_lane_selects.py "$@"; then
  "$py" -m pytest "$@" --ignore=tests/k8s_node || status=$?
else
  node_log=$(mktemp)
  # Two local runtime files of restarts and lost tasks (~4 min) run in that lane too: it
  # mostly waits on its kubelet, and the main lane is the longer one.
  beside=(tests/runtime/test_preemption.py tests/runtime/test_lost_workers.py)
  "$py" -m pytest "$@" tests/k8s_node tests/e2e "${beside[@]}" >"$node_log" 2>&1 &
  node_pid=$!
  # Ctrl-C reaches both lanes from the terminal: the node lane, started in the
  # background, begins with SIGINT ignored, and tests/conftest.py gives it back its
  # KeyboardInterrupt. Once the main lane has ended (bash runs a trap only after the
  # foreground command), INT or TERM to this script is passed on to the node lane as TERM,
  # which it also turns into KeyboardInterrupt; it acts on the first INT or TERM only, so
  # its tear-down is never cut short (tests/k8s_node/conftest.py).
  trap 'kill "$node_pid" 2>/dev/null || true' INT TERM
  "$py" -m pytest "$@" --ignore=tests/k8s_node --ignore=tests/e2e "${beside[@]/#/--ignore=}" || status=$?
  node_status=0
  wait "$node_pid" || node_status=$?
  trap - INT TERM
  echo "==================== the real-node and end-to-end tiers (tests/k8s_node, tests/e2e, ${beside[*]}; run beside the above) ===================="
  cat "$node_log"
  rm -f "$node_log"
  # 5: that lane selected nothing (e.g. the fast lane's -m "not k8s_node" leaves the node
  # lane empty, -m k8s_node the main one); only both empty is pytest's "no tests ran"
  if [ "$status" -eq 5 ] && [ "$node_status" -ne 5 ]; then
    status=$node_status
  elif [ "$node_status" -ne 0 ] && [ "$node_status" -ne 5 ] && [ "$status" -eq 0 ]; then
    status=$node_status
  fi
fi
if [ "$status" -eq 0 ] && [ "$gates" -ne 0 ]; then
  status=$gates
fi
exit "$status"
