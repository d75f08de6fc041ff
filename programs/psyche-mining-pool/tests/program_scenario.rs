//! A small pool's life through transactions, recorded as the cross-language vectors
//! `tests/vectors/solana/mining_pool.json` (the format of `whole_epoch.json`, see
//! tests/vectors/README.md, "Solana transactions"): mints and token accounts, `pool_create`, two
//! lenders, deposits (one over the cap, refused), a cap raise, `pool_extract`, the freeze, a
//! deposit after it (refused), two earnings deposits, claims in pieces and an over-claim
//! (refused). With `PSYCHE_WRITE_VECTORS=1` it writes the file, otherwise it compares with the
//! committed one and fails on any difference. Keys are derived from labels, so the file is
//! stable.

mod harness;

use std::path::PathBuf;

use anchor_spl::token::spl_token;
use harness::*;
use psyche_mining_pool::error::MiningPoolError as E;
use serde_json::{json, Value};
use solana_sdk::instruction::Instruction;
use solana_sdk::program_pack::Pack;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::{Keypair, Signer};

const INDEX: u64 = 1;
const CAP: u64 = 1_000;

fn program_name(id: &Pubkey) -> &'static str {
    if *id == psyche_mining_pool::ID {
        "psyche_mining_pool"
    } else if *id == spl_token::ID {
        "spl_token"
    } else if *id == anchor_lang::system_program::ID {
        "system"
    } else {
        panic!("unexpected program {id}")
    }
}

/// Pubkeys are written base58 (`Pubkey`'s own `Serialize` would write the 32 bytes).
fn instruction_json(ix: &Instruction, name: &str, args: Value) -> Value {
    let accounts: Vec<Value> = ix
        .accounts
        .iter()
        .map(|m| {
            json!({
                "pubkey": m.pubkey.to_string(),
                "is_signer": m.is_signer,
                "is_writable": m.is_writable,
            })
        })
        .collect();
    json!({
        "program": program_name(&ix.program_id),
        "program_id": ix.program_id.to_string(),
        "name": name,
        "args": args,
        "data": hex(&ix.data),
        "accounts": accounts,
    })
}

fn params(pairs: Value) -> Value {
    json!({ "params": pairs })
}

struct Scenario {
    env: Env,
    steps: Vec<Value>,
}

impl Scenario {
    /// Sends one transaction and records it with its outcome (`expect`: `None` = success).
    async fn step(
        &mut self,
        label: &str,
        ixs: Vec<(Instruction, &str, Value)>,
        signers: &[&Keypair],
        expect: Option<E>,
    ) {
        let only: Vec<Instruction> = ixs.iter().map(|(ix, _, _)| ix.clone()).collect();
        let result = self.env.send_many(&only, signers).await;
        let outcome = match expect {
            None => {
                result.unwrap_or_else(|e| panic!("{label}: {e:?}"));
                json!("ok")
            }
            Some(e) => {
                // The failing instruction is the last one; +1 for the compute-budget one.
                assert_eq!(custom_code_at(result, ixs.len() as u8), code(e), "{label}");
                json!({ "error": format!("{e:?}"), "code": code(e) })
            }
        };
        let mut all = vec![self.env.payer().pubkey()];
        for k in signers {
            if !all.contains(&k.pubkey()) {
                all.push(k.pubkey());
            }
        }
        let signers: Vec<String> = all.iter().map(Pubkey::to_string).collect();
        let instructions: Vec<Value> =
            ixs.into_iter().map(|(ix, name, args)| instruction_json(&ix, name, args)).collect();
        self.steps.push(json!({
            "label": label,
            "signers": signers,
            "instructions": instructions,
            "result": outcome,
        }));
    }

    /// `create_account` + `initialize_mint2` for the mint at `key` (payer = mint authority).
    fn create_mint(&self, key: &Keypair) -> Vec<(Instruction, &'static str, Value)> {
        let ixs = self.env.create_mint_ixs(&key.pubkey());
        let payer = self.env.payer().pubkey();
        vec![
            (ixs[0].clone(), "create_account", create_account_args(spl_token::state::Mint::LEN)),
            (
                ixs[1].clone(),
                "initialize_mint2",
                json!({
                    "decimals": 6u8,
                    "mint_authority": payer.to_string(),
                    "freeze_authority": null,
                }),
            ),
        ]
    }

    /// `create_account` + `initialize_account3` (+ `mint_to` when `amount > 0`).
    fn create_token_account(
        &self,
        key: &Keypair,
        mint: &Pubkey,
        owner: &Pubkey,
        amount: u64,
    ) -> Vec<(Instruction, &'static str, Value)> {
        let ixs = self.env.create_token_account_ixs(&key.pubkey(), mint, owner);
        let mut out = vec![
            (ixs[0].clone(), "create_account", create_account_args(spl_token::state::Account::LEN)),
            (ixs[1].clone(), "initialize_account3", json!({ "owner": owner.to_string() })),
        ];
        if amount > 0 {
            let ix = self.env.mint_to_ix(mint, &key.pubkey(), amount);
            out.push((ix, "mint_to", json!({ "amount": amount })));
        }
        out
    }
}

fn create_account_args(space: usize) -> Value {
    json!({
        "lamports": rent_exempt(space),
        "space": space,
        "owner": spl_token::ID.to_string(),
    })
}

fn vectors_path() -> PathBuf {
    // At run time, not with env!: the test may be a build made in another clone (cargo_mtimes.py).
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo test");
    PathBuf::from(dir).join("../../tests/vectors/solana/mining_pool.json")
}

fn write_or_compare(value: &Value) {
    let path = vectors_path();
    let text = serde_json::to_string_pretty(value).unwrap() + "\n";
    if std::env::var("PSYCHE_WRITE_VECTORS").as_deref() == Ok("1") {
        std::fs::write(&path, text).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; generate it with PSYCHE_WRITE_VECTORS=1 cargo test -p psyche-mining-pool --test program_scenario",
            path.display()
        )
    });
    assert!(
        committed == text,
        "{} differs from what the program produces now; if the change is intended, regenerate with \
         PSYCHE_WRITE_VECTORS=1 cargo test -p psyche-mining-pool --test program_scenario and commit",
        path.display()
    );
}

#[tokio::test]
async fn a_pool_through_transactions() {
    let mut s = Scenario { env: Env::new().await, steps: vec![] };
    let payer = s.env.payer();
    let authority = seeded_keypair("scenario/authority");
    let collateral_mint = seeded_keypair("scenario/collateral_mint");
    let redeemable_mint = seeded_keypair("scenario/redeemable_mint");
    let (cm, rm) = (collateral_mint.pubkey(), redeemable_mint.pubkey());

    // 1. Mints and the authority's token accounts (SPL Token and system instructions).
    let mut ixs = s.create_mint(&collateral_mint);
    ixs.extend(s.create_mint(&redeemable_mint));
    s.step("create the two mints", ixs, &[&collateral_mint, &redeemable_mint], None).await;
    let authority_collateral = seeded_keypair("scenario/authority/collateral");
    let authority_redeemable = seeded_keypair("scenario/authority/redeemable");
    let mut ixs = s.create_token_account(&authority_collateral, &cm, &authority.pubkey(), 0);
    ixs.extend(s.create_token_account(&authority_redeemable, &rm, &authority.pubkey(), 2_000));
    s.step(
        "the authority's token accounts (2,000 redeemable)",
        ixs,
        &[&authority_collateral, &authority_redeemable],
        None,
    )
    .await;

    // 2. The pool.
    let pool = PoolKeys::new(
        INDEX,
        authority.insecure_clone(),
        cm,
        rm,
        authority_collateral.pubkey(),
        authority_redeemable.pubkey(),
    );
    let ix = ix_pool_create(&payer.pubkey(), &pool, CAP);
    let args = params(json!({ "index": INDEX, "max_deposit_collateral_amount": CAP }));
    s.step(
        "pool_create (index 1, cap 1,000)",
        vec![(ix, "pool_create", args)],
        &[&authority],
        None,
    )
    .await;

    // 3. Two lenders: token accounts (collateral minted), lender accounts.
    let mut lenders = Vec::new();
    for (i, collateral) in [(0, 400u64), (1, 800)] {
        let user = seeded_keypair(&format!("scenario/lender{i}"));
        let c = seeded_keypair(&format!("scenario/lender{i}/collateral"));
        let r = seeded_keypair(&format!("scenario/lender{i}/redeemable"));
        let mut ixs = s.create_token_account(&c, &cm, &user.pubkey(), collateral);
        ixs.extend(s.create_token_account(&r, &rm, &user.pubkey(), 0));
        s.step(
            &format!("lender {i}'s token accounts ({collateral} collateral)"),
            ixs,
            &[&c, &r],
            None,
        )
        .await;
        let lender = psyche_mining_pool::Lender::find_pda(&pool.pool, &user.pubkey()).0;
        let ix = ix_lender_create(&payer.pubkey(), &user.pubkey(), pool.pool, lender);
        s.step(
            &format!("lender {i}: lender_create"),
            vec![(ix, "lender_create", json!({}))],
            &[&user],
            None,
        )
        .await;
        lenders.push(LenderKeys { user, lender, collateral: c.pubkey(), redeemable: r.pubkey() });
    }

    // 4. Deposits: 300 and 700 fill the cap; one more is refused; a raised cap lets 1 more in.
    let deposit = |l: &LenderKeys, amount: u64| {
        let ix = ix_lender_deposit(&l.user.pubkey(), l.collateral, &pool, l.lender, amount);
        (ix, "lender_deposit", params(json!({ "collateral_amount": amount })))
    };
    let d = deposit(&lenders[0], 300);
    s.step("lender 0 deposits 300", vec![d], &[&lenders[0].user], None).await;
    let d = deposit(&lenders[1], 700);
    s.step("lender 1 deposits 700 (the cap is reached)", vec![d], &[&lenders[1].user], None).await;
    let d = deposit(&lenders[1], 1);
    s.step(
        "a deposit over the cap is refused",
        vec![d],
        &[&lenders[1].user],
        Some(E::PoolCapExceeded),
    )
    .await;
    let update = |cap: Option<u64>, freeze: Option<bool>| {
        let ix = ix_pool_update(&authority.pubkey(), pool.pool, cap, freeze);
        let args = params(json!({ "max_deposit_collateral_amount": cap, "freeze": freeze }));
        (ix, "pool_update", args)
    };
    s.step(
        "the authority raises the cap to 1,001",
        vec![update(Some(1_001), None)],
        &[&authority],
        None,
    )
    .await;
    let d = deposit(&lenders[1], 1);
    s.step("lender 1 deposits 1 more", vec![d], &[&lenders[1].user], None).await;

    // 5. The authority takes collateral out to buy compute, then freezes the pool.
    let ix = ix_pool_extract(&authority.pubkey(), authority_collateral.pubkey(), &pool, 900);
    let args = params(json!({ "collateral_amount": 900u64 }));
    s.step("pool_extract 900", vec![(ix, "pool_extract", args)], &[&authority], None).await;
    s.step("freeze", vec![update(None, Some(true))], &[&authority], None).await;
    let d = deposit(&lenders[0], 10);
    s.step(
        "a deposit after the freeze is refused",
        vec![d],
        &[&lenders[0].user],
        Some(E::PoolFrozen),
    )
    .await;

    // 6. Earnings in two deposits: 1,500 + 2 = 1,502 for 1,001 deposited.
    for amount in [1_500u64, 2] {
        let ix = ix_pool_redeemable_deposit(
            &authority.pubkey(),
            authority_redeemable.pubkey(),
            &pool,
            amount,
        );
        let args = params(json!({ "redeemable_amount": amount }));
        s.step(
            &format!("pool_redeemable_deposit {amount}"),
            vec![(ix, "pool_redeemable_deposit", args)],
            &[&authority],
            None,
        )
        .await;
    }

    // 7. Claims: lender 0 is owed floor(1,502 × 300 / 1,001) = 450, lender 1 floor(1,502 × 701 /
    //    1,001) = 1,051; one base unit stays in the pool.
    let claim = |l: &LenderKeys, amount: u64| {
        let ix = ix_lender_claim(&l.user.pubkey(), l.redeemable, &pool, l.lender, amount);
        (ix, "lender_claim", params(json!({ "redeemable_amount": amount })))
    };
    let c = claim(&lenders[0], 200);
    s.step("lender 0 claims 200", vec![c], &[&lenders[0].user], None).await;
    let c = claim(&lenders[0], 251);
    s.step(
        "lender 0 claims 251: over its share, refused",
        vec![c],
        &[&lenders[0].user],
        Some(E::ClaimExceedsShare),
    )
    .await;
    let c = claim(&lenders[0], 250);
    s.step("lender 0 claims the remaining 250", vec![c], &[&lenders[0].user], None).await;
    let c = claim(&lenders[1], 1_051);
    s.step("lender 1 claims its 1,051", vec![c], &[&lenders[1].user], None).await;

    assert_eq!(s.env.balance(lenders[0].redeemable).await, 450);
    assert_eq!(s.env.balance(lenders[1].redeemable).await, 1_051);
    assert_eq!(s.env.balance(pool.pool_redeemable).await, 1);
    assert_eq!(s.env.balance(pool.pool_collateral).await, 101);
    assert_eq!(s.env.balance(authority_collateral.pubkey()).await, 900);
    let state = s.env.pool(pool.pool).await;
    assert_eq!(state.total_deposited_collateral_amount, 1_001);
    assert_eq!(state.total_extracted_collateral_amount, 900);
    assert_eq!(state.total_deposited_redeemable_amount, 1_502);
    assert_eq!(state.total_claimed_redeemable_amount, 1_501);
    assert!(state.frozen);

    let steps = std::mem::take(&mut s.steps);
    let scenario = json!({
        "name": "mining_pool",
        "description": "a mining pool through the real runtime: two mints, pool_create (index 1, cap 1,000), two lenders, deposits 300 + 700 (one more refused over the cap), cap raised to 1,001 and 1 more deposited, pool_extract 900, freeze, a deposit after it refused, earnings 1,500 + 2, claims 200 + 250 (an over-claim refused) and 1,051: floor shares, 1 base unit left in the pool",
        "programs": {
            "psyche_mining_pool": psyche_mining_pool::ID.to_string(),
            "spl_token": spl_token::ID.to_string(),
            "system": anchor_lang::system_program::ID.to_string(),
        },
        "steps": steps,
    });
    write_or_compare(&scenario);
}
