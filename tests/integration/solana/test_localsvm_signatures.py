"""``getSignaturesForAddress`` of the local SVM (``psyche.localsvm.signatures``): what an indexer
pages through to follow a run's transactions, on a fake clock with the builtin programs."""

from __future__ import annotations

from typing import Any

import pytest
from solders.keypair import Keypair

from psyche.localsvm.chain import Chain
from psyche.localsvm.jsonrpc import RpcMethods
from psyche.localsvm.protocol import RpcFault

SOL = 10**9


def _methods() -> tuple[Chain, Any]:
    t = [1_700_000_000.0]
    chain = Chain(now=lambda: t[0])
    return chain, RpcMethods(chain).table()["getSignaturesForAddress"]


def test_newest_first_paged_with_before_and_until() -> None:
    chain, call = _methods()
    a, b = Keypair().pubkey(), Keypair().pubkey()
    sigs = [str(chain.airdrop(a, SOL).signature) for _ in range(3)]
    other = str(chain.airdrop(b, SOL).signature)
    got = call([str(a)])
    assert [g["signature"] for g in got] == sigs[::-1]
    assert all(g["err"] is None and g["confirmationStatus"] == "finalized" for g in got)
    assert {g["slot"] for g in got} <= {chain.slot}
    assert [g["signature"] for g in call([str(a), {"limit": 1}])] == [sigs[2]]
    assert [g["signature"] for g in call([str(a), {"before": sigs[2]}])] == [sigs[1], sigs[0]]
    assert [g["signature"] for g in call([str(a), {"until": sigs[0]}])] == [sigs[2], sigs[1]]
    assert [g["signature"] for g in call([str(b)])] == [other]
    assert call([str(Keypair().pubkey())]) == []


def test_an_index_made_later_includes_the_history() -> None:
    chain, _ = _methods()
    a = Keypair().pubkey()
    sig = str(chain.airdrop(a, SOL).signature)
    late = RpcMethods(chain).table()["getSignaturesForAddress"]
    assert [g["signature"] for g in late([str(a)])] == [sig]


@pytest.mark.parametrize(
    "params",
    [[], ["not a key"], [str(Keypair().pubkey()), {"limit": 0}],
     [str(Keypair().pubkey()), {"limit": 1001}], [str(Keypair().pubkey()), {"before": "x"}]],
)  # fmt: skip
def test_bad_params_are_invalid_params(params: list[Any]) -> None:
    _, call = _methods()
    with pytest.raises(RpcFault) as e:
        call(params)
    assert e.value.code == -32602
