"""The Solana run creator's and the rewards' documented commands (README "Solana", "Rewards",
docs/rewards.md), each scene on its own local SVM: ``test_solana_documented.py``."""

from __future__ import annotations

C = "psyche-solana-client "

POOL = [
    C + "mining-pool-create --pool-index 7 --collateral-mint $USDC --redeemable-mint $MINT"
    " --max-deposit 5000000",
    C + "mining-pool-deposit --pool-index 7 --amount 1000000",
    C + "mining-pool-withdraw --pool-index 7 --amount 4000000",
    C + "mining-pool-update --pool-index 7 --freeze",
    C + "mining-pool-redeemable-deposit --pool-index 7 --amount 14000",
    C + "mining-pool-claim --pool-index 7",
]
"""The Mining Pool's lines, the same in the README and docs/rewards.md."""

SOLANA_SCENES: dict[str, list[str]] = {
    # README "Solana (`psyche-solana-client`)": the run creator, then a joiner.
    "solana run creator and joiner": [
        C + 'create-run --rpc $RPC --ws-rpc $WS_RPC --run-id myrun --name "My run"'
        ' --description "…"',
        C + "update-config --rpc $RPC --ws-rpc $WS_RPC --run-id myrun"
        " --config-path config/tiny/state.toml",
        "sh scripts/join-authorization-create.sh $RPC grantor.json $GRANTEE_PUBKEY",
        "sh scripts/join-authorization-set-delegates.sh $RPC $GRANTOR_PUBKEY grantee.json"
        " delegate*.json",
        C + "set-paused --rpc $RPC --ws-rpc $WS_RPC --run-id myrun resume",
        C + "check-authorization --run-id myrun --authorizer $AUTHORIZER --pubkey $PUBKEY",
        C + "train",
        C + "json-dump-run --run-id myrun",
    ],
    # README "Rewards: the Treasurer and the Mining Pool".
    "rewards in the README": [
        C + "create-test-mint --decimals 6 --mint-to $CREATOR=1000000000",
        C + "create-run --run-id myrun --treasurer-collateral-mint $MINT"
        " --treasurer-collateral-per-point 7",
        C + "update-config --run-id myrun --config-path config/tiny/state.toml",
        C + "set-future-epoch-rates --run-id myrun --earning-rate-total-shared 3000",
        C + "treasurer-top-up-rewards --run-id myrun --amount 500000000",
        C + "set-paused --run-id myrun resume",
        C + "treasurer-claim-rewards --run-id myrun",
        *POOL,
        C + "json-dump-user --address $PUBKEY --pool-index 7 --run-id myrun",
    ],
    # docs/rewards.md "Commands": the run creator's block, then the lenders' block.
    "rewards in docs/rewards.md": [
        C + "create-test-mint --decimals 6 --mint-to $CREATOR=1000000000",
        C + "create-run --run-id myrun --treasurer-collateral-mint $MINT"
        ' --treasurer-collateral-per-point 7 --name "My run"',
        C + "update-config --run-id myrun --config-path config/tiny/state.toml",
        C + "set-future-epoch-rates --run-id myrun --earning-rate-total-shared 3000",
        C + "treasurer-top-up-rewards --run-id myrun --amount 500000000",
        C + "set-paused --run-id myrun resume",
        *POOL,
        C + "json-dump-user --address $LENDER --pool-index 7 --run-id myrun",
    ],
}
