#!/usr/bin/env bash
# Builds the two Anchor programs as sBPF v0 ELFs for the test VMs (solders.litesvm, the local
# SVM, solana-program-test): target/deploy/psyche_coordinator.so and psyche_authorizer.so.
#
# THIS IS A TEST BUILD. It uses only registry packages (Debian's rustc-web 1.96 with a patched
# std, a static LLVM 23 from PyPI wheels, sbpf-linker from crates.io), because Solana's
# platform-tools cannot be downloaded here. A cluster deployment is `anchor build` on a machine
# with the Solana tools (see docs/sbf-build.md for why each piece below exists).
#
# usage: scripts/build-sbf.sh
# env:   SBF_WORK  caches and tools   (default: $PSYCHE_CACHE_DIR/sbf, i.e. ~/.cache/psyche/sbf)
#        SBF_OUT   where the .so go   (default: <repo>/target/deploy)
#        SBF_JOBS  cargo -j           (default: 2)
# Idempotent: every step is skipped when its result is present; a warm run only re-links.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KIT="$ROOT/scripts/sbf"
SBF_WORK="${SBF_WORK:-${PSYCHE_CACHE_DIR:-$HOME/.cache/psyche}/sbf}"
SBF_OUT="${SBF_OUT:-$ROOT/target/deploy}"
JOBS="${SBF_JOBS:-2}"

RUST_SERIES=1.96         # std-solana.patch is written against Debian's rust-web-src 1.96
LINKER_VERSION=0.2.6     # sbpf-linker 0.2.x: the first series that links Anchor; needs LLVM 23
LLVM_TAG=23.1.1.post0    # the wheels pinned with hashes in scripts/sbf/llvm-wheels.txt
PROGRAMS=(psyche-authorizer psyche-coordinator psyche-treasurer psyche-mining-pool)
APT_PKGS=(rustc-web cargo-web rust-web-src llvm-22 libzstd-dev zlib1g-dev build-essential
  python3 python3-pip patch)
# Debian's toolchain, never rustup's: only Debian ships the library source -Zbuild-std needs.
RUSTC=/usr/bin/rustc CARGO=/usr/bin/cargo PY=/usr/bin/python3

# Flags meant for host builds would leak into the SBF build.
unset RUSTFLAGS CARGO_ENCODED_RUSTFLAGS CARGO_BUILD_RUSTFLAGS CARGO_BUILD_TARGET RUSTC_WRAPPER \
  RUSTC_WORKSPACE_WRAPPER CARGO_BUILD_RUSTC_WRAPPER CARGO_BUILD_TARGET_DIR CARGO_TARGET_DIR

say() { printf '[build-sbf] %s\n' "$*" >&2; }
die() {
  printf '[build-sbf] error: %s\n' "$*" >&2
  exit 1
}
stamp_ok() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }

mkdir -p "$SBF_WORK" "$SBF_OUT"
SBF_WORK="$(cd "$SBF_WORK" && pwd)"
SBF_OUT="$(cd "$SBF_OUT" && pwd)"
exec 9>"$SBF_WORK/.lock"
flock 9 # a second build waits for the first instead of sharing half-written caches
T0=$SECONDS

# 0. The .so files of these sources, built before (here or in another clone): the build is
#    reproducible (no machine paths: see --remap-path-prefix below), so the same sources give the
#    same bytes, and a fresh clone need not rebuild what another clone built (~2.5 min on 2 cores).
#    The key covers every input of the build: the programs, the shim, the workspace, this script
#    and its kit, and the rustc found.
sources_key() {
  (
    cd "$ROOT"
    find programs shims scripts/sbf Cargo.toml Cargo.lock scripts/build-sbf.sh -type f \
      -not -path '*/target/*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
    "$RUSTC" --version 2>/dev/null || echo "no rustc"
  ) | sha256sum | cut -d' ' -f1
}
KEY="$(sources_key)"
CACHED="$SBF_WORK/deploy-cache/$KEY"
have_all() {
  local pkg
  for pkg in "${PROGRAMS[@]}"; do [ -s "$1/${pkg//-/_}.so" ] || return 1; done
}
if have_all "$CACHED"; then
  for pkg in "${PROGRAMS[@]}"; do
    lib="${pkg//-/_}"
    cp "$CACHED/$lib.so" "$SBF_OUT/$lib.so.tmp" && mv -f "$SBF_OUT/$lib.so.tmp" "$SBF_OUT/$lib.so"
  done
  say "the programs of these sources were built before: copied from $CACHED"
  say "done in $((SECONDS - T0)) s (sBPF v0 test build, not for deployment)"
  exit 0
fi

# 1. Debian packages.
missing=()
for p in "${APT_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  say "1/5 apt-get install ${missing[*]}"
  SUDO=()
  [ "$(id -u)" = 0 ] || SUDO=(sudo)
  "${SUDO[@]}" apt-get update -qq
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
RUSTC_VERSION="$("$RUSTC" --version)"
[[ "$RUSTC_VERSION" == "rustc $RUST_SERIES."* ]] ||
  die "need Debian's rustc-web $RUST_SERIES.x at $RUSTC (bookworm-security), found: $RUSTC_VERSION"

# 2. sbpf-linker, linked statically against LLVM 23 (Debian has 22, which links 0.1.x only, and
#    0.1.x fails on Anchor's code: "too many arguments", "stack arguments are not supported").
export CARGO_HOME="$SBF_WORK/cargo"
LINKER="$SBF_WORK/tools/bin/sbpf-linker"
# The version is read whole before matching: `--version | grep -q` closes the pipe after the
# first of its two lines, and sbpf-linker panics on the broken pipe (a CI run failed so).
linker_ok() {
  local v
  v="$("$LINKER" --version 2>/dev/null || true)"
  [[ "${v%%$'\n'*}" == "sbpf-linker $LINKER_VERSION" ]]
}
if ! linker_ok; then
  say "2/5 sbpf-linker $LINKER_VERSION on LLVM $LLVM_TAG (pip download + cargo install, ~2 min)"
  "$PY" -m pip download -q --no-deps --no-cache-dir --only-binary=:all: --require-hashes \
    -r "$KIT/llvm-wheels.txt" -d "$SBF_WORK/wheels"
  LLVM_DIR="$SBF_WORK/llvm-$LLVM_TAG"
  rm -rf "$LLVM_DIR"
  for w in "$SBF_WORK"/wheels/mlc_llvm_static*-"$LLVM_TAG"-*.whl; do
    "$PY" -m zipfile -e "$w" "$LLVM_DIR"
  done
  LLVM_PREFIX="$LLVM_DIR/mlc_llvm_static/static"
  chmod +x "$LLVM_PREFIX/bin/llvm-config"
  LLVM_PREFIX="$LLVM_PREFIX" LLVM_SYS_231_PREFIX="$LLVM_PREFIX" RUSTC="$RUSTC" \
    nice "$CARGO" install "sbpf-linker@$LINKER_VERSION" --locked --force -q -j "$JOBS" \
    --root "$SBF_WORK/tools" --target-dir "$SBF_WORK/build-linker" \
    --no-default-features --features bpf-linker/llvm-23,bpf-linker/llvm-link-static
  linker_ok || die "sbpf-linker did not install"
  rm -rf "$LLVM_DIR" "$SBF_WORK/build-linker" # static binary: the SDK is no longer needed
fi

# 3. std for target_os = "solana": Debian's library source with std-solana.patch (std has no
#    Solana port; the patch maps it to std's "unsupported" platform, logs panics with sol_log_).
STD_SRC="$("$RUSTC" --print sysroot)/lib/rustlib/src/rust/library"
[ -f "$STD_SRC/std/src/lib.rs" ] || die "no Rust library source in $STD_SRC (rust-web-src)"
RS="$SBF_WORK/rust-src"
want="$RUSTC_VERSION $(sha256sum <"$KIT/std-solana.patch" | cut -d' ' -f1)"
if ! stamp_ok "$RS/.stamp" "$want"; then
  say "3/5 patched std source"
  rm -rf "$RS" && mkdir -p "$RS"
  cp -a "$STD_SRC" "$RS/library"
  patch -d "$RS" -p1 -s --no-backup-if-mismatch <"$KIT/std-solana.patch"
  printf '%s' "$want" >"$RS/.stamp"
fi

# 4. i128 libcalls returning in r0/r2 as LLVM 23 expects (rustc 1.96 returns i128 through a
#    hidden pointer on BPF, which made __multi3 write through garbage), and the cargo config.
TARGET_JSON="$KIT/sbf-solana-solana.json"
LAYOUT="$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["data-layout"])' "$TARGET_JSON")"
I128="$SBF_WORK/i128/i128_libcalls.bc"
want="$LAYOUT $(sha256sum <"$KIT/i128_libcalls.py" | cut -d' ' -f1)"
if ! stamp_ok "$SBF_WORK/i128/.stamp" "$want" || [ ! -s "$I128" ]; then
  say "4/5 i128 libcalls"
  mkdir -p "$SBF_WORK/i128"
  "$PY" "$KIT/i128_libcalls.py" "" bpfel "$LAYOUT" >"$SBF_WORK/i128/i128_libcalls.ll"
  llvm-as-22 "$SBF_WORK/i128/i128_libcalls.ll" -o "$I128"
  printf '%s' "$want" >"$SBF_WORK/i128/.stamp"
fi
# Float libcalls the coordinator uses beyond solana-compiler-builtins, taken from std's
# compiler_builtins (without them: "Symbol __unordsf2 is missing").
FLOAT_CALLS="__eqdf2,__nedf2,__ltdf2,__ledf2,__unorddf2,__eqsf2,__nesf2,__ltsf2,__lesf2,__gesf2"
FLOAT_CALLS+=",__gtsf2,__unordsf2,__addsf3,__subsf3,__mulsf3,__divsf3,__extendsfdf2,__truncdfsf2"
FLOAT_CALLS+=",__floatsidf,__floatunsidf,__floatdidf,__fixdfsi,__fixdfdi,__fixunsdfsi,__floatsisf"
FLOAT_CALLS+=",__floatunsisf,__floatdisf,__floatundisf,__fixsfsi,__fixsfdi,__fixunssfsi"
FLOAT_CALLS+=",__fixunssfdi,__powidf2,__powisf2,floor"
CFG="$SBF_WORK/cargo-config.toml"
cat >"$CFG.tmp" <<EOF
# written by scripts/build-sbf.sh; applies to the sbf-solana-solana target only
[target.sbf-solana-solana]
rustflags = [
  "-C", "linker=$LINKER",
  # sbpf-linker would also write every cdylib it links (the authorizer's no-entrypoint cpi
  # build included) to ./target/deploy
  "-C", "link-arg=--deploy=false",
  "-C", "panic=abort",
  "-C", "relocation-model=static",
  # sBPF has no atomic instructions and runs one thread
  "-C", "passes=lower-atomic",
  # SBF frames are 4 KB (LLVM's BPF default is 512 B); a function over it fails the link
  "-C", "link-arg=--llvm-args=-bpf-stack-size=4096",
  # sBPF v0: what solders.litesvm 0.26 and solana-program-test 2.3 load
  "-C", "link-arg=--arch=v0",
  "-C", "link-arg=--export=$FLOAT_CALLS",
  "-C", "link-arg=$I128",
  # no machine paths in panic messages: the same bytes wherever SBF_WORK is
  "--remap-path-prefix", "$SBF_WORK=/sbf-work",
  "--remap-path-prefix", "$ROOT=/psyche",
]
EOF
if cmp -s "$CFG.tmp" "$CFG"; then rm "$CFG.tmp"; else mv "$CFG.tmp" "$CFG"; fi

# 5. One cargo run per program: built together, feature unification would hand the authorizer
#    the coordinator's `cpi`/`no-entrypoint` features and its .so would have no entrypoint.
export CARGO_TARGET_DIR="$SBF_WORK/target"
export __CARGO_TESTS_ONLY_SRC_ROOT="$RS/library" # where -Zbuild-std takes std from
# RUSTC_BOOTSTRAP: -Z flags on a stable rustc. ..._SYNTHETIC_TARGET: otherwise std's build script
# marks std `restricted_std` for a JSON target, an unstable library for every crate.
export RUSTC_BOOTSTRAP=1 RUSTC_BOOTSTRAP_SYNTHETIC_TARGET=1 RUSTC
REL="$CARGO_TARGET_DIR/sbf-solana-solana/release"
LOG="$SBF_WORK/build.log"
: >"$LOG"
for pkg in "${PROGRAMS[@]}"; do
  lib="${pkg//-/_}"
  say "5/5 $pkg"
  if ! (cd "$ROOT" && nice "$CARGO" build -q -Zjson-target-spec -Zbuild-std=std,panic_abort \
    --target "$TARGET_JSON" --config "$CFG" --release -p "$pkg" -j "$JOBS") 2>&1 | tee -a "$LOG" >&2; then
    die "cargo build -p $pkg failed (log: $LOG)"
  fi
  # LLVM reports a frame over 4 KB as an error; make sure nothing swallowed one.
  if grep -qi "stack limit is exceeded\|error:" "$LOG"; then die "LLVM reported errors (log: $LOG)"; fi
  # Whole output first: grep -q would close the pipe early and pipefail would see readelf's SIGPIPE.
  syms="$(readelf -W --dyn-syms "$REL/lib$lib.so")"
  grep -qw entrypoint <<<"$syms" || die "lib$lib.so exports no entrypoint"
  cp "$REL/lib$lib.so" "$SBF_OUT/$lib.so.tmp" && mv -f "$SBF_OUT/$lib.so.tmp" "$SBF_OUT/$lib.so"
done
for pkg in "${PROGRAMS[@]}"; do
  so="$SBF_OUT/${pkg//-/_}.so"
  say "$so: $(stat -c %s "$so") bytes"
done
mkdir -p "$CACHED.tmp"
for pkg in "${PROGRAMS[@]}"; do cp "$SBF_OUT/${pkg//-/_}.so" "$CACHED.tmp/"; done
rm -rf "$CACHED" && mv "$CACHED.tmp" "$CACHED"
say "done in $((SECONDS - T0)) s (sBPF v0 test build, not for deployment)"
