#!/usr/bin/env bash
# Issue 26's regression proof: each finding's test run against the code before its fix and
# after it (docs/rewards.md, "Issue 26: before and after"). Old trees are `git worktree`s under
# $TMPDIR (removed at the end); the main checkout is not touched. Rust runs natively (the SBF
# builds of the old programs are not made: a full SBF build per old tree); the proof tests use
# only names that existed before the fixes, so an assertion is what fails on old code.
#
#   scripts/issue26/before_after.sh [AFTER]   # AFTER: the commit or tree to compare (default HEAD)
#
# Prints one line per (finding, tree): PASS or FAIL with the test's own first failure line.
set -uo pipefail
root=$(git rev-parse --show-toplevel)
after=${1:-HEAD}
here="$root/scripts/issue26"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
py=${PYTHON:-$root/.venv/bin/python}
tmp=$(mktemp -d)
trees=()
cleanup() {
    for t in "${trees[@]}"; do git -C "$root" worktree remove --force "$t" >/dev/null 2>&1; done
    rm -rf "$tmp"
}
trap cleanup EXIT

tree() { # tree NAME COMMIT -> path of a fresh worktree
    local path="$tmp/$1"
    git -C "$root" worktree add --detach "$path" "$2" >/dev/null 2>&1 || exit 1
    trees+=("$path")
    echo "$path"
}

report() { # report FINDING LABEL LOG RC
    local first
    first=$(grep -v '^\[' "$3" | grep -m1 -E "panicked at|assert|Error|error|FAILED|failed" | cut -c1-160)
    if [ "$4" = 0 ]; then echo "finding $1 $2: PASS"; else echo "finding $1 $2: FAIL ($first)"; fi
}

rust() { # rust LABEL TREE: the coordinator and treasurer proofs in TREE
    local label=$1 t=$2 finding name
    local claim="$t/programs/psyche-treasurer/tests/p26_claim.rs"
    cp "$here/p26_before_after.rs" "$t/programs/psyche-coordinator/tests/"
    # program_claim.rs of the AFTER tree, the escrow test asserting a refusal only.
    sed 's/assert_err(f.env.send(ix, &\[&a\]).await, E::RunCollateralAsDestination);/assert!(f.env.send(ix, \&[\&a]).await.is_err());/' \
        "$aft/programs/psyche-treasurer/tests/program_claim.rs" >"$claim"
    cat "$here/f2_wind_down.rs" >>"$claim"
    while read -r finding name; do
        (cd "$t" && cargo test -q -p psyche-coordinator --test p26_before_after -- "$name") >"$tmp/log" 2>&1
        report "$finding" "$label" "$tmp/log" $?
    done <<'CASES'
1 f1_
5 f5_link_local
5-on-chain f5_loopback
7 f7_
CASES
    while read -r finding name; do
        (cd "$t" && cargo test -q -p psyche-treasurer --test p26_claim -- "$name") >"$tmp/log" 2>&1
        report "$finding" "$label" "$tmp/log" $?
    done <<'CASES'
1 a_strangers_join_never_erases_unpaid_points
2 f2_
4 a_claim_paid_into_the_escrow_itself_is_refused
CASES
}

pyproof() { # pyproof FINDING LABEL TREE TEST_FILE: TEST_FILE of the AFTER tree against TREE's client
    local t=$3
    mkdir -p "$t/$(dirname "$4")" "$t/target"
    [ "$t" = "$aft" ] || cp "$aft/$4" "$t/$4"
    [ -e "$t/target/deploy" ] || ln -s "$root/target/deploy" "$t/target/deploy"
    (cd "$t" && PYTHONPATH="$t/client" "$py" -m pytest -q -x -p no:cacheprovider "$4") >"$tmp/log" 2>&1
    report "$1" "$2" "$tmp/log" $?
}

aft=$(tree after "$after")
# Findings 1, 2, 4, 5 (unroutable targets), 7: commit 3870298; 5 on chain: the local_run flag.
rust "before (3870298^)" "$(tree before-3870298 3870298^)"
onchain=$(git -C "$root" log --format=%H -1 --grep="local_run" "$after" -- programs/psyche-coordinator/src/core/peer_addrs.rs)
if [ -n "$onchain" ]; then
    rust "before ($(git -C "$root" rev-parse --short "$onchain^"))" "$(tree before-local-run "$onchain^")"
fi
rust "after ($(git -C "$aft" rev-parse --short HEAD))" "$aft"
# Finding 3: relay shares (364141f); finding 6: the local SVM front (306aac1).
pyproof 3 "before (364141f^)" "$(tree before-364141f 364141f^)" tests/integration/p2p/test_relay_shares.py
pyproof 3 "after" "$aft" tests/integration/p2p/test_relay_shares.py
pyproof 6 "before (306aac1^)" "$(tree before-306aac1 306aac1^)" tests/integration/solana/test_localsvm_limits.py
pyproof 6 "after" "$aft" tests/integration/solana/test_localsvm_limits.py
