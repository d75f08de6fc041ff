#!/usr/bin/env bash
# Fill .whl/ (git-ignored) with what a lent GPU machine lacks to run the device checks
# (scripts/device-checks.sh): cp312 manylinux wheels of the P2P host's dependencies and of numba
# (the copy check's loops), at the versions .venv holds where such a wheel exists, and the two
# pure-Python modules that PyPI only has as sdists, copied from .venv. The machine has Python
# 3.12, torch, numpy and no network.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl/pure
names="PyNaCl aioquic async-generator base58 blake3 cbor2 cffi coincurve cryptography dnspython
fastecdsa ifaddr libp2p miniupnpc mmh3 morphys msgspec multiaddr netaddr noiseprotocol outcome
py-cid py-multibase py-multicodec py-multihash pyOpenSSL pycparser pycryptodome pylsqpack
service-identity trio trio-typing trio-websocket websockets wsproto zeroconf google-api-core
google-auth google-cloud-core google-cloud-storage google-resumable-media
googleapis-common-protos proto-plus google-crc32c pyasn1 pyasn1-modules rsa cachetools sniffio
anyio numba llvmlite"
plat=()
for n in 17 24 27 28 31 34; do plat+=(--platform "manylinux_2_${n}_x86_64"); done
plat+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
get() {
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp "${plat[@]}" -d .whl "$1" > /dev/null 2>&1
}
for name in $names; do
    version=$(.venv/bin/python -c "import importlib.metadata as m, sys
try: print(m.version(sys.argv[1]))
except m.PackageNotFoundError: print('')" "$name")
    if [ -n "$version" ] && get "$name==$version"; then continue; fi
    # fastecdsa 2.3.2 has no cp312 wheel; 3.0.1 ran the hosts on an H200 (4.0 was not tried).
    fallback=$name
    [ "$name" = fastecdsa ] && fallback=fastecdsa==3.0.1
    get "$fallback" || echo "no cp312 wheel of $fallback" >&2
done
site=$(.venv/bin/python -c 'import site; print(site.getsitepackages()[0])')
cp "$site/baseconv.py" "$site/varint.py" .whl/pure/
du -sh .whl
