#!/usr/bin/env bash
# Run one pytest node N times in a row with L busy-loop processes on top, to show that a test
# holds on a loaded machine (issue 12, finding 12). Stops at the first failure.
#   bash scripts/repeat-under-load.sh 5 1 "tests/e2e/test_local_testnet.py::test_random_kills_over_three_epochs_rejoin_by_p2p_with_identical_weights"
set -euo pipefail
runs="${1:?runs}" load="${2:?busy processes}" node="${3:?pytest node id}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
busy=()
for _ in $(seq 1 "$load"); do
  python3 -c "while True: pass" &
  busy+=("$!")
done
trap 'kill "${busy[@]}" 2>/dev/null || true' EXIT
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  .venv/bin/pytest -q -x -p no:cacheprovider "$node" >"/tmp/repeat-under-load-$i.log" 2>&1 || {
    echo "run $i failed after $(( $(date +%s) - start )) s; log: /tmp/repeat-under-load-$i.log"
    exit 1
  }
  echo "run $i passed in $(( $(date +%s) - start )) s; load $(cut -d' ' -f1-3 /proc/loadavg)"
done
