"""`bench/agreement_cost.py` on the tiny model: the filter leaves nothing out of an honest round
and exactly the flipped result out of the same round with one result's signs flipped (the script
checks both), and reports its cost beside the apply's."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_the_filter_cost_bench_runs_on_tiny() -> None:
    sys.path.insert(0, str(BENCH))  # the script imports its bench neighbours as it runs
    try:
        import agreement_cost

        rows = agreement_cost.measure("tiny", [3, 5], repeat=1, chunk=64, topk=8)
    finally:
        sys.path.remove(str(BENCH))
    assert [r["peers"] for r in rows] == [3, 5]
    for r in rows:
        assert r["filter_s"] > 0 and r["filter_flipped_s"] > 0 and r["apply_s"] > 0
