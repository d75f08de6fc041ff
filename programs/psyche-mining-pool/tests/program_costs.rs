//! Every mining-pool instruction at its worst case, with the compute units the runtime reports
//! (meaningful on the SBF build, `PSYCHE_SBF=1`; natively only the SPL Token CPIs run in the VM)
//! and the transaction size. With `PSYCHE_COSTS_OUT=FILE` it writes
//! `{"sbf", "rows": [{"case", "instruction", "compute_units", "tx_bytes", "heap_bytes"}],
//! "accounts": [{"name", "bytes", "rent"}]}` (bench/solana_costs.py prints the table; each
//! case starts with the instruction's name). The heap is not counted here (`heap_bytes` 0): the
//! program allocates only Anchor's boxed accounts, a few hundred bytes, and counting it natively
//! needs a test without libtest's harness, which this crate's manifest does not declare.
//!
//! What makes an instruction expensive here is PDA bump searches (Anchor's `seeds` + `bump`
//! tries `create_program_address` from 255 down, ~1,500 CU per try) and, for `pool_create`,
//! token-account addresses someone funded beforehand (three system CPIs instead of one). The pool
//! and the lender are the ones with the most bump tries among the first 4,096 indices / users;
//! the claim divides near-`u64::MAX` amounts in u128.

mod harness;

use std::collections::BTreeMap;

use anchor_lang::solana_program::system_instruction;
use harness::*;
use psyche_mining_pool::{Lender, Pool};
use serde_json::{json, Value};
use solana_sdk::signature::Signer;

/// The compute-unit limit of every measured transaction (the runtime's per-instruction default).
const CU_LIMIT: u32 = 200_000;
/// On SBF, a worst case may use at most this share of the limit the client requests (docs/solana.md,
/// "Costs": code generation here differs from platform-tools').
const CU_MARGIN: f64 = 0.8;
const COMPUTE_UNITS_JSON: &str = include_str!("../../../client/psyche/solana/compute_units.json");
/// Searched for the worst bumps.
const SEARCH: u64 = 4_096;

/// Bump tries of a PDA: `create_program_address` runs from 255 down to the bump.
fn tries(bump: u8) -> u32 {
    256 - u32::from(bump)
}

/// The pool index (of the first `SEARCH`) whose three PDAs need the most bump tries.
fn worst_pool_index() -> u64 {
    (0..SEARCH)
        .max_by_key(|&i| {
            let (pool, bump) = Pool::find_pda(i);
            tries(bump)
                + tries(Pool::find_collateral_pda(&pool).1)
                + tries(Pool::find_redeemable_pda(&pool).1)
        })
        .unwrap()
}

/// The user label (of the first `SEARCH`) whose lender PDA in `pool` needs the most bump tries.
fn worst_lender_label(pool: &PoolKeys) -> String {
    (0..SEARCH)
        .map(|i| format!("costs/lender/{i}"))
        .max_by_key(|label| {
            tries(
                Lender::find_pda(&pool.pool, &seeded_keypair(&format!("{label}/user")).pubkey()).1,
            )
        })
        .unwrap()
}

struct Row {
    instruction: String,
    compute_units: u64,
    tx_bytes: usize,
}

#[derive(Default)]
struct Costs {
    rows: BTreeMap<String, Row>,
    accounts: BTreeMap<String, usize>,
}

impl Costs {
    fn record(&mut self, case: &str, m: &Measured) {
        if let Err(e) = &m.result {
            panic!("{case}: {e:?}\n{}", m.logs.join("\n"));
        }
        let instruction = case.split_whitespace().next().unwrap().to_string();
        self.rows.insert(
            case.to_string(),
            Row { instruction, compute_units: m.compute_units, tx_bytes: m.tx_bytes },
        );
    }

    fn to_json(&self) -> Value {
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|(case, r)| {
                json!({
                    "case": case,
                    "instruction": r.instruction,
                    "compute_units": r.compute_units,
                    "tx_bytes": r.tx_bytes,
                    "heap_bytes": 0u64,
                })
            })
            .collect();
        let accounts: Vec<Value> = self
            .accounts
            .iter()
            .map(|(name, &bytes)| {
                json!({
                    "name": name,
                    "bytes": bytes,
                    "rent": rent_exempt(bytes),
                })
            })
            .collect();
        json!({
            "sbf": sbf_mode(),
            "rows": rows,
            "accounts": accounts,
        })
    }
}

/// The limit the client requests for `instruction`, if compute_units.json has one.
fn requested_limit(instruction: &str) -> Option<u64> {
    let key = format!("\"{instruction}\":");
    let at = COMPUTE_UNITS_JSON.find(&key)? + key.len();
    let rest = COMPUTE_UNITS_JSON[at..].trim_start();
    let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    rest[..end].parse().ok()
}

#[tokio::test]
async fn every_instruction_at_its_worst_case() {
    let mut env = Env::new().await;
    let mut costs = Costs::default();
    let payer = env.payer();

    // pool_create: the worst bumps, both token-account addresses funded beforehand (below rent,
    // so the payer tops them up: transfer + allocate + assign each).
    let index = worst_pool_index();
    let pool = env.pool_keys("costs", index).await;
    let prefund = [
        system_instruction::transfer(&payer.pubkey(), &pool.pool_collateral, rent_exempt(0)),
        system_instruction::transfer(&payer.pubkey(), &pool.pool_redeemable, rent_exempt(0)),
    ];
    env.send_many(&prefund, &[]).await.unwrap();
    let ix = ix_pool_create(&payer.pubkey(), &pool, u64::MAX);
    let m = env.send_measured(&[ix], &[&pool.authority], CU_LIMIT).await;
    costs.record("pool_create (worst of 4,096 indices' bumps, prefunded token accounts)", &m);
    // The common case for comparison: a fresh index, nothing prefunded.
    let plain = env.pool_keys("costs/plain", index + SEARCH).await;
    let ix = ix_pool_create(&payer.pubkey(), &plain, u64::MAX);
    let m = env.send_measured(&[ix], &[&plain.authority], CU_LIMIT).await;
    costs.record("pool_create (typical: fresh addresses)", &m);

    // lender_create: the worst lender bump.
    let label = worst_lender_label(&pool);
    let big = u64::MAX / 2 - 1;
    let lender = env.lender_keys(&pool, &label, big).await;
    let ix = ix_lender_create(&payer.pubkey(), &lender.user.pubkey(), pool.pool, lender.lender);
    let m = env.send_measured(&[ix], &[&lender.user], CU_LIMIT).await;
    costs.record("lender_create (worst of 4,096 users' bumps)", &m);
    let other = env.create_lender(&pool, "costs/other", big).await;

    // lender_deposit: near-u64::MAX totals (the cap is u64::MAX).
    let ix = ix_lender_deposit(&lender.user.pubkey(), lender.collateral, &pool, lender.lender, big);
    let m = env.send_measured(&[ix], &[&lender.user], CU_LIMIT).await;
    costs.record("lender_deposit (pool collateral bump search, u64 totals)", &m);
    env.deposit(&pool, &other, big).await.unwrap();

    // pool_update: both fields.
    let ix = ix_pool_update(&pool.authority.pubkey(), pool.pool, Some(u64::MAX - 1), Some(true));
    let m = env.send_measured(&[ix], &[&pool.authority], CU_LIMIT).await;
    costs.record("pool_update (cap and freeze)", &m);

    // pool_extract.
    let ix = ix_pool_extract(&pool.authority.pubkey(), pool.authority_collateral, &pool, big);
    let m = env.send_measured(&[ix], &[&pool.authority], CU_LIMIT).await;
    costs.record("pool_extract (pool collateral bump search)", &m);

    // pool_redeemable_deposit: near u64::MAX of earnings.
    let earnings = u64::MAX - 12_345;
    env.mint_to(&pool.redeemable_mint, &pool.authority_redeemable, earnings).await;
    let ix = ix_pool_redeemable_deposit(
        &pool.authority.pubkey(),
        pool.authority_redeemable,
        &pool,
        earnings,
    );
    let m = env.send_measured(&[ix], &[&pool.authority], CU_LIMIT).await;
    costs.record("pool_redeemable_deposit (pool redeemable bump search)", &m);

    // lender_claim: a u128 product near 2^127 divided by a near-u64::MAX total.
    let share = (u128::from(earnings) * u128::from(big) / u128::from(2 * big)) as u64;
    let ix = ix_lender_claim(&lender.user.pubkey(), lender.redeemable, &pool, lender.lender, share);
    let m = env.send_measured(&[ix], &[&lender.user], CU_LIMIT).await;
    costs.record("lender_claim (u128 share of near-u64::MAX amounts)", &m);
    assert_eq!(env.balance(lender.redeemable).await, share);

    for (name, address) in [
        ("Pool", pool.pool),
        ("Lender", lender.lender),
        ("PoolCollateral (SPL token account)", pool.pool_collateral),
        ("PoolRedeemable (SPL token account)", pool.pool_redeemable),
    ] {
        let bytes = env.account_data(address).await.expect("account").len();
        costs.accounts.insert(name.to_string(), bytes);
    }
    assert_eq!(costs.accounts["Pool"], Pool::SPACE);
    assert_eq!(costs.accounts["Lender"], Lender::SPACE);

    let mut table = String::new();
    for (case, r) in &costs.rows {
        table += &format!("{case:<75} {:>7} CU  {:>5} tx B\n", r.compute_units, r.tx_bytes);
    }
    for (name, &bytes) in &costs.accounts {
        table += &format!("{name:<75} {bytes:>7} B  {:>9} lamports rent\n", rent_exempt(bytes));
    }
    println!("{table}");
    if let Ok(path) = std::env::var("PSYCHE_COSTS_OUT") {
        std::fs::write(path, serde_json::to_string_pretty(&costs.to_json()).unwrap() + "\n")
            .unwrap();
    }
    for (case, r) in &costs.rows {
        assert!(r.tx_bytes <= 1232, "{case}: {} transaction bytes", r.tx_bytes);
        if sbf_mode() {
            assert!(r.compute_units > 0, "{case}: no compute units reported");
            let limit = requested_limit(&r.instruction).unwrap_or(u64::from(CU_LIMIT));
            let used = r.compute_units as f64 / limit as f64;
            assert!(used <= CU_MARGIN, "{case}: {} CU is {used:.2} of {limit}", r.compute_units);
        }
    }
}
