"""A member that joins, loads the model and then never delivers anything, for the silent-member
test: a normal ``centralized-client train`` process whose rounds do nothing (no training, no
results, no Finished, no witness), while it stays connected and listed.

It lives in the tests, not in the product: the daemon has no switch for misbehaving.
"""

from __future__ import annotations

import sys
from typing import Any

from psyche.daemon.training import TrainingStep


async def _silent_round(self: Any, coord: Any) -> None:
    # Neither applies, trains nor records the round, so it never announces Finished nor
    # witnesses. The test reads these lines from logs/<label>.log: an elected witness that never
    # witnesses holds its round to the timeout whatever the others do, so the test needs to know
    # when.
    rnd = coord.current_round()
    me = coord.index_of(self.parts.identity)
    elected = me is not None and coord.committee_selection(rnd).get_witness(me).witness
    print(
        f"rogue: silent round epoch={coord.progress.epoch} height={rnd.height} elected={elected}",
        flush=True,
    )


async def _silent_poll(self: Any, coord: Any) -> None:
    return None


if __name__ == "__main__":
    TrainingStep.start = _silent_round  # type: ignore[method-assign]
    TrainingStep.poll = _silent_poll  # type: ignore[method-assign]
    from psyche.cli.main import main

    main(sys.argv[1:], prog_name="psyche")
