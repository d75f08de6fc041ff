#!/usr/bin/env bash
# The Rust side of the test suite: formatting, clippy (warnings are errors), every cargo test of
# the workspace natively (pure core, programs through solana-program-test, vectors), the program
# tests again against the SBF builds in target/deploy (scripts/build-sbf.sh; PSYCHE_SBF=1 makes
# the harnesses load the .so files into the runtime's VM), and the IDL freshness check. Builds go
# to a target directory outside the clone, shared between runs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${PSYCHE_CACHE_DIR:-$HOME/.cache/psyche}/cargo-target}"
# solana-program-test logs every instruction at debug level unless told otherwise.
export RUST_LOG="${RUST_LOG:-error}"
sbf_dir="${SBF_OUT:-$root/target/deploy}"
# A fresh clone's sources are newer than any build; unchanged ones get their old mtimes back.
python3 "$root/scripts/cargo_mtimes.py" "${PSYCHE_CACHE_DIR:-$HOME/.cache/psyche}/cargo-mtimes.json"
echo "== cargo fmt";    cargo fmt --all --check
echo "== cargo clippy"; cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo test (native)"; cargo test --workspace "$@"
for so in psyche_coordinator psyche_authorizer psyche_treasurer psyche_mining_pool; do
  [ -f "$sbf_dir/$so.so" ] || { echo "no $sbf_dir/$so.so: run scripts/build-sbf.sh" >&2; exit 1; }
done
echo "== cargo test (SBF: $sbf_dir)"
PSYCHE_SBF=1 SBF_OUT_DIR="$sbf_dir" BPF_OUT_DIR="$sbf_dir" \
  cargo test -p psyche-coordinator -p psyche-authorizer -p psyche-treasurer -p psyche-mining-pool "$@"
echo "== idl";          bash scripts/idl.sh --check
