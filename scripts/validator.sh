#!/usr/bin/env bash
# Builds a real Solana validator, `solana-test-validator` from crates.io's agave-validator (pinned
# below), once into a cache, and prints the binary's path. A second run only prints the path.
#
# Why agave's solana-test-validator and not Surfpool: Surfpool runs the programs in LiteSVM, the
# same engine the project's own local SVM (`psyche-local-svm`) already wraps, so it would not test
# what the real cluster adds (the validator's banking stage, blockhash expiry, RocksDB-backed
# ledger, the real RPC and PubSub services). agave's binary is what devnet and mainnet run.
#
# Not part of `.ci/run`: the cold build does not fit beside CI's 52 minutes in its 60 (measured in
# one piece into an empty cache: 61 CPU-minutes, 3,276 s user + 375 s system, bundled RocksDB C++
# included; about 30-40 minutes on 2 idle cores). It is resumable: cargo keeps what it finished in
# the target folder, so an interrupted build picks up where it stopped.
#
# usage: scripts/validator.sh            build if needed, print the path of solana-test-validator
# env:   VALIDATOR_WORK  cache   (default: $PSYCHE_CACHE_DIR/validator, i.e. ~/.cache/psyche/validator)
#        VALIDATOR_JOBS  cargo -j (default: 2)
set -euo pipefail

AGAVE_VERSION=4.2.2 # builds with rustc 1.95; the series devnet ran when this was pinned
WORK="${VALIDATOR_WORK:-${PSYCHE_CACHE_DIR:-$HOME/.cache/psyche}/validator}"
JOBS="${VALIDATOR_JOBS:-2}"
ROOT_DIR="$WORK/agave-$AGAVE_VERSION"
BIN="$ROOT_DIR/bin/solana-test-validator"
# bindgen (RocksDB's bindings) needs libclang; the ledger's protobufs need protoc; hidapi (the
# remote wallet, linked by default) needs libudev.
APT_PKGS=(clang libclang-dev protobuf-compiler libudev-dev pkg-config libssl-dev build-essential)

say() { printf '[validator] %s\n' "$*" >&2; }
die() {
  printf '[validator] error: %s\n' "$*" >&2
  exit 1
}

if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi

mkdir -p "$WORK"
exec 9>"$WORK/.lock"
flock 9 # a second build waits for the first instead of sharing a half-built target folder
if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi

missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=()
  [ "$(id -u)" = 0 ] || SUDO=(sudo -n)
  command -v apt-get >/dev/null || die "missing Debian packages: ${missing[*]} (and no apt-get)"
  say "apt-get install ${missing[*]}"
  "${SUDO[@]}" apt-get update -qq >/dev/null 2>&1 || true
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" \
    >/dev/null || die "could not install ${missing[*]}"
fi

command -v cargo >/dev/null || die "cargo not found (the validator builds with rustc >= 1.95)"
say "building agave-validator $AGAVE_VERSION (solana-test-validator) with -j$JOBS into $ROOT_DIR"
say "cold: about an hour of CPU (30-40 min on 2 idle cores); resumable: an interrupted build continues from $WORK/target"
T0=$SECONDS
# Flags meant for other builds (the SBF build's) must not leak into this one.
unset RUSTFLAGS CARGO_ENCODED_RUSTFLAGS CARGO_BUILD_TARGET RUSTC_WRAPPER
CARGO_TARGET_DIR="$WORK/target" cargo install --locked --quiet \
  agave-validator --version "$AGAVE_VERSION" --bin solana-test-validator \
  --root "$ROOT_DIR" -j "$JOBS" >&2 || die "cargo install agave-validator $AGAVE_VERSION failed"
[ -x "$BIN" ] || die "the build finished but $BIN is missing"
say "built in $((SECONDS - T0)) s"
echo "$BIN"
