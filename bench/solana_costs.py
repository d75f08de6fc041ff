"""What every program instruction costs at its worst case, against Solana's real limits.

Runs ``programs/psyche-coordinator/tests/program_costs.rs`` twice, side by side: on the SBF build
in the runtime's VM (compute units; ``PSYCHE_SBF=1``) and natively (the heap the program's code
allocates, counted as SBF's bump allocator spends it). The Treasurer's and the Mining Pool's
``tests/program_costs.rs`` run on the SBF build only (their heap is not counted: "–"). The tests
assert the margins; this script prints the table for bench/README.md, with account sizes and
rent.

    .venv/bin/python bench/solana_costs.py            # needs target/deploy/*.so (build-sbf.sh)
    .venv/bin/python bench/solana_costs.py --json out.json
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import click

ROOT = Path(__file__).resolve().parents[1]
TX_LIMIT = 1_400_000
PACKET = 1232
HEAP = 32 * 1024
OTHER_PACKAGES = ("psyche-treasurer", "psyche-mining-pool")
LIMITS = ROOT / "client" / "psyche" / "backends" / "solana" / "compute_units.json"


def _measure(sbf: bool, package: str = "psyche-coordinator") -> dict[str, Any]:
    env = dict(os.environ)
    env.setdefault("CARGO_TARGET_DIR", str(Path.home() / ".cache/psyche/cargo-target"))
    env.setdefault("RUST_LOG", "error")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "costs.json"
        env["PSYCHE_COSTS_OUT"] = str(out)
        if sbf:
            deploy = str(ROOT / "target" / "deploy")
            env.update(PSYCHE_SBF="1", SBF_OUT_DIR=deploy, BPF_OUT_DIR=deploy)
        cmd = ["cargo", "test", "-q", "-p", package, "--test", "program_costs"]
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
            raise SystemExit(f"{package} program_costs failed ({'SBF' if sbf else 'native'})")
        result: dict[str, Any] = json.loads(out.read_text())
        return result


@click.command()
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), default=None)
def main(json_out: Path | None) -> None:
    sbf = _measure(sbf=True)
    native = _measure(sbf=False)
    heap = {r["case"]: r["heap_bytes"] for r in native["rows"]}
    clients = sbf["rows"][0]["clients"]
    print(f"worst cases with {clients} epoch clients (SBF build, solana-program-test 2.3)")
    print(
        f"{'case':<45} {'CU':>9} {'limit':>9} {'used':>5} {'tx B':>5} {'/1232':>6} "
        f"{'heap B':>7} {'/32K':>5}"
    )
    rows = []
    for r in sbf["rows"]:
        h = heap[r["case"]]
        rows.append({**r, "heap_bytes": h})
        print(
            f"{r['case']:<45} {r['compute_units']:>9,} {r['limit']:>9,} "
            f"{r['compute_units'] / r['limit']:>5.0%} {r['tx_bytes']:>5} "
            f"{r['tx_bytes'] / PACKET:>6.0%} {h:>7,} {h / HEAP:>5.0%}"
        )
    limits = json.loads(LIMITS.read_text())["limits"]
    for package in OTHER_PACKAGES:
        other = _measure(sbf=True, package=package)
        print(f"\n{package} (SBF build)")
        for r in other["rows"]:
            limit = limits.get(r["case"].replace(":", " ").split()[0])
            used = f"{r['compute_units'] / limit:>5.0%}" if limit else f"{'–':>5}"
            print(
                f"{r['case']:<45} {r['compute_units']:>9,} {limit or 0:>9,} {used} "
                f"{r['tx_bytes']:>5} {r['tx_bytes'] / PACKET:>6.0%} {'–':>7} {'–':>5}"
            )
            rows.append({**r, "program": package, "limit": limit})
        sbf["accounts"] += other["accounts"]
    print(f"\nper-transaction cap {TX_LIMIT:,} CU; every limit requested is at most that")
    print(f"\n{'account':<32} {'bytes':>8} {'rent-exempt lamports':>22}")
    for a in sbf["accounts"]:
        print(f"{a['name']:<32} {a['bytes']:>8,} {a['rent']:>22,}")
    if json_out:
        json_out.write_text(
            json.dumps(
                {"rows": rows, "accounts": sbf["accounts"]},
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
