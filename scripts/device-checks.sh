#!/usr/bin/env bash
# The checks a lent GPU machine runs (bench/README.md, "The same weights on CPU and GPU"): run it
# there with the device tool, carrying .whl (scripts/device-wheels.sh fills it; put this VM's
# reference hashes in .whl/xd_ref.json first:
#   .venv/bin/python bench/apply_across_devices.py --presets tiny,small,medium --devices cpu \
#       --threads 1 --json .whl/xd_ref.json
# ). Each part has its own time limit and writes its log and JSON under $OUT as it goes.
# SKIP_PAR=1 skips the train-step throughput; P2P_ROUNDS / P2P_LIMIT size the real-host run.
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.." || exit 3
OUT=${OUT:-/tmp/device-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH="/tmp/site:$PWD/.whl/pure:$PWD/client:$PWD/bench"
{
    date; nproc; nvidia-smi -L
    python3 -c "import torch, numpy; print(torch.__version__, numpy.__version__, torch.cuda.get_device_name())"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
echo "== apply across devices"
timeout -k 5 150 python3 bench/apply_across_devices.py --presets tiny,small,medium \
    --devices cpu,cuda --rounds 4 --threads 1 --reference .whl/xd_ref.json \
    --json "$OUT/xdev.json" > "$OUT/xdev.log" 2>&1
echo "rc=$?" >> "$OUT/xdev.log"
cat "$OUT/xdev.log"
if [ -z "${SKIP_PAR:-}" ]; then
    echo "== train step, 1x1 on cuda"
    timeout -k 5 100 python3 bench/parallel_scaling.py --device cuda --preset small \
        --layouts 1x1 --steps 5 --json "$OUT/par.json" > "$OUT/par.log" 2>&1
    echo "rc=$?" >> "$OUT/par.log"
    tail -n 5 "$OUT/par.log"
fi
echo "== real libp2p hosts"
timeout -k 10 "${P2P_LIMIT:-300}" python3 bench/scale.py --p2p-hosts "${P2P_HOSTS:-64}" \
    --p2p-rounds "${P2P_ROUNDS:-6}" --json "$OUT/p2p.json" > "$OUT/p2p.log" 2>&1
echo "rc=$?" >> "$OUT/p2p.log"
grep -E "started in|full mesh|round [0-9]+:|fetches ok|copies a producer|rc=" "$OUT/p2p.log"
