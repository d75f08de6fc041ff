//! Each treasurer instruction at its worst case, with the compute units the runtime metered and
//! the transaction's size; with `PSYCHE_COSTS_OUT=FILE` the table is also written as JSON
//! (`{"rows": [...], "accounts": [...]}`). Compute units are meaningful on the SBF build only
//! (`PSYCHE_SBF=1`): natively registered programs consume none, so natively only the SPL Token
//! CPIs (BPF in both modes) are counted. `heap_bytes` is not measured (reported as 0).
//!
//! The worst cases:
//! - `run_create`: one transaction with the coordinator account's `create_account`, as sent.
//! - `run_update`: the largest config and model, progress, both rates, a 96-byte client version
//!   and the resume, in one instruction (five CPIs; the resume checks everything it just got).
//! - `participant_claim`: the user is the last of 256 registered clients (the ledger scan is
//!   linear). The 256-entry list is written with `set_account` after a real `run_create` and a
//!   real resume: joining 256 wallets through `join_run` measures the coordinator, not this scan.
//! - `run_wind_down`: the run is running (WaitingForMembers), so the pause CPI is made.
//! - `run_close`: a remainder to move, the escrow to close and the coordinator's accounts to free.

mod harness;

use harness::*;
use psyche_coordinator::constants::MAX_EPOCH_RATE;
use psyche_coordinator::core::model::OptimizerDefinition;
use psyche_coordinator::core::{CoordinatorConfig, NodeIdentity, Progress, RunState};
use psyche_coordinator::CoordinatorAccount;
use psyche_treasurer::RunUpdateParams;
use serde_json::json;
use solana_sdk::signature::{Keypair, Signer};

const CU_LIMIT: u32 = 1_400_000;
/// On SBF, a worst case may use at most this share of the limit the client requests
/// (docs/solana.md, "Costs": code generation here differs from platform-tools').
const CU_MARGIN: f64 = 0.8;
const COMPUTE_UNITS_JSON: &str = include_str!("../../../client/psyche/solana/compute_units.json");

/// The limit the client requests for `instruction` (compute_units.json).
fn requested_limit(instruction: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(COMPUTE_UNITS_JSON).unwrap();
    v["limits"][instruction].as_u64().unwrap_or_else(|| panic!("no limit for {instruction}"))
}
const TX_LIMIT: usize = 1232;

fn big_config() -> CoordinatorConfig {
    CoordinatorConfig {
        warmup_time: 600,
        cooldown_time: 10,
        max_round_train_time: 30,
        round_witness_time: 1,
        global_batch_size_warmup_tokens: 0,
        epoch_time: 3_600,
        total_steps: 1_000,
        init_min_clients: 256,
        min_clients: 32,
        witness_nodes: 32,
        global_batch_size_start: 256,
        global_batch_size_end: 256,
        verification_percent: 0,
        waiting_for_members_extra_time: 1,
    }
}

struct Row {
    case: &'static str,
    m: Measured,
}

#[tokio::test]
async fn program_costs() {
    let mut env = Env::new().await;
    let mut rows = Vec::new();

    let mint = seeded_keypair(b"costs/mint");
    env.create_mint(&mint).await;
    let run = TRun::planned("costs", u64::MAX, mint.pubkey());
    let ixs = env.create_run_ixs(&run, 1_000_000);
    let account = run.account_keypair();
    let authority = run.authority.insecure_clone();
    let m = env.send_measured(&ixs, &[&account, &authority], CU_LIMIT).await;
    rows.push(Row { case: "run_create (with the coordinator account's create_account)", m });

    let params = RunUpdateParams {
        metadata: None,
        config: Some(Box::new(big_config())),
        model: Some(Box::new(largest_model(OptimizerDefinition::Distro {
            clip_grad_norm: Some(1.0),
            weight_decay: Some(0.1),
            compression_decay: 0.999,
            compression_topk: 8,
            compression_chunk: 64,
            quantize_1bit: true,
        }))),
        progress: Some(Progress::new(0, 1, 0)),
        epoch_earning_rate_total_shared: Some(MAX_EPOCH_RATE),
        epoch_slashing_rate_per_client: Some(MAX_EPOCH_RATE),
        paused: Some(false),
        client_version: Some("v".repeat(96)),
    };
    let ix = ix_run_update(&authority.pubkey(), &run, params);
    let m = env.send_measured(&[ix], &[&authority], CU_LIMIT).await;
    rows.push(Row {
        case: "run_update: largest config + model, progress, rates, client version, resume",
        m,
    });
    assert_eq!(env.run_state(&run).await, RunState::WaitingForMembers);

    // The ledger: 256 registered wallets, the claiming user last (set_account, see above).
    let user = Keypair::new();
    let signer = user.pubkey().to_bytes();
    env.edit_coordinator(&run, |a: &mut CoordinatorAccount| {
        let cs = &mut a.state.clients_state;
        for (i, c) in cs.clients.iter_mut().enumerate() {
            let mut key = [0u8; 32];
            key[..8].copy_from_slice(&(i as u64 + 1).to_le_bytes());
            c.id = NodeIdentity { signer: key, p2p_identity: key };
            c.earned = 1_000;
        }
        cs.clients[255].id = NodeIdentity { signer, p2p_identity: signer };
        cs.num_clients = 256;
    })
    .await;

    let ix = ix_participant_create(&env.payer().pubkey(), &user.pubkey(), &run);
    let m = env.send_measured(&[ix], &[&user], CU_LIMIT).await;
    rows.push(Row { case: "participant_create", m });

    env.mint_to(&run.mint, &run.collateral, 1_000 * 1_000_000).await;
    let to = env.funded_token_account(&run.mint, &user.pubkey(), 0).await;
    let ix = ix_participant_claim(&user.pubkey(), &to, &run, 1_000);
    let m = env.send_measured(&[ix], &[&user], CU_LIMIT).await;
    rows.push(Row { case: "participant_claim: user last of 256 registered clients", m });
    assert_eq!(env.balance(to).await, 1_000 * 1_000_000);

    // The accounts, before run_close closes the escrow.
    let mut accounts = Vec::new();
    for (name, key) in [
        ("Run", run.address),
        ("RunCollateral", run.collateral),
        ("Participant", run.participant(&user.pubkey())),
    ] {
        let bytes = env.account_data(key).await.expect("account").len();
        println!("{name:<20} {bytes:>6} bytes, rent {}", rent_exempt(bytes));
        accounts.push(json!({"name": name, "bytes": bytes, "rent": rent_exempt(bytes)}));
    }

    env.fund(&authority.pubkey()).await;
    let ix = ix_run_wind_down(&authority.pubkey(), &run);
    let m = env.send_measured(&[ix], &[&authority], CU_LIMIT).await;
    rows.push(Row { case: "run_wind_down: pauses the running coordinator", m });
    let grace = psyche_treasurer::constants::RUN_CLOSE_GRACE_SECONDS;
    env.warp(grace).await;
    env.mint_to(&run.mint, &run.collateral, 12_345).await;
    let remainder_to = env.funded_token_account(&run.mint, &authority.pubkey(), 0).await;
    let ix = ix_run_close_with(close_accounts(&authority.pubkey(), &remainder_to, &run));
    let m = env.send_measured(&[ix], &[&authority], CU_LIMIT).await;
    rows.push(Row { case: "run_close: remainder, escrow closed, coordinator freed", m });
    assert_eq!(env.balance(remainder_to).await, 12_345);

    // The table.
    println!("{:<80} {:>8} {:>6}", "case", "CU", "bytes");
    for r in &rows {
        assert_eq!(r.m.result, Ok(()), "{}: {:?}", r.case, r.m.logs);
        println!("{:<80} {:>8} {:>6}", r.case, r.m.compute_units, r.m.tx_bytes);
        assert!(r.m.tx_bytes <= TX_LIMIT, "{}: {} bytes", r.case, r.m.tx_bytes);
        if sbf_mode() {
            // Metered by the VM: the treasurer itself runs as BPF.
            assert!(r.m.compute_units > 0 && r.m.compute_units < u64::from(CU_LIMIT), "{}", r.case);
            let instruction = r.case.split([' ', ':']).next().unwrap();
            let limit = requested_limit(instruction);
            let used = r.m.compute_units as f64 / limit as f64;
            assert!(
                used <= CU_MARGIN,
                "{}: {} CU is {used:.2} of {limit}",
                r.case,
                r.m.compute_units
            );
        }
    }
    assert_eq!(accounts[0]["bytes"], psyche_treasurer::Run::SPACE);
    assert_eq!(accounts[2]["bytes"], psyche_treasurer::Participant::SPACE);
    assert_eq!(accounts[1]["bytes"], 165);

    if let Ok(path) = std::env::var("PSYCHE_COSTS_OUT") {
        let value = json!({
            "rows": rows.iter().map(|r| json!({
                "case": r.case,
                "compute_units": r.m.compute_units,
                "tx_bytes": r.m.tx_bytes,
                "heap_bytes": 0,
            })).collect::<Vec<_>>(),
            "accounts": accounts,
        });
        std::fs::write(&path, serde_json::to_string_pretty(&value).unwrap() + "\n").unwrap();
    }
}
