"""A misbehaving client for the rogue-witness test: a normal ``centralized-client train`` process
whose witnesses carry empty blooms (it claims to have received nothing from anybody).

It lives in the tests, not in the product: the daemon has no switch for misbehaving. Everything
else (joining, training, sharing results) is the real client, so the only lie is the witness.
"""

from __future__ import annotations

import sys
from typing import Any

import psyche.daemon.witnessing as witnessing
from psyche.coordinator import Witness
from psyche.protocol.bloom import Bloom


def _empty_witness(proof: Any, attested: Any, bloom_seed: int) -> Witness:
    print(f"rogue: empty witness {proof}", flush=True)  # counted by the test in logs/<label>.log
    return Witness(proof, Bloom.empty(bloom_seed), Bloom.empty(bloom_seed ^ 1))


if __name__ == "__main__":
    witnessing.build_witness = _empty_witness  # type: ignore[assignment]
    from psyche.cli.main import main

    main(sys.argv[1:], prog_name="psyche")
