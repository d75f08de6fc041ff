//! Every coordinator instruction at its worst case, under Solana's real limits: a full epoch of
//! 256 clients (the largest client list), 256 pending joins, a full witness set (32), a health
//! check that ejects 8 clients, the ticks that end a round and an epoch, the largest `update`,
//! and the largest peer record (created, overwritten, closed).
//!
//! Each transaction carries the compute-unit limit the Python client requests for that
//! instruction (`client/psyche/solana/compute_units.json`), so on the SBF build
//! (`PSYCHE_SBF=1`) an instruction over its budget fails the run. The test also asserts the
//! margins documented in docs/solana.md ("Costs"): compute units at most 80 % of the requested
//! limit (and the limit within the 1.4 M per-transaction cap), the program's heap at most half of
//! the 32 KB bump heap (counted natively, see `harness::heap`) and independent of the number of
//! clients. With `PSYCHE_COSTS_OUT=FILE` it writes what it measured as JSON
//! (bench/solana_costs.py prints the table).

mod harness;

use std::collections::BTreeMap;

use harness::*;
use psyche_coordinator::constants::{MAX_PEER_ADDRS, MAX_PEER_ADDR_LEN};
use psyche_coordinator::core::model::{Checkpoint, HubRepo};
use psyche_coordinator::core::verification::{sampled_count, sampled_trainer, VERIFIERS_PER_ROUND};
use psyche_coordinator::core::{
    Bloom, ClientState, CoordinatorConfig, CoordinatorState, HealthCheck, Progress, RunState,
    Verdict, WitnessProofArg, MAX_CLIENTS, MAX_WITNESSES,
};
use psyche_coordinator::{CoordinatorAccount, PeerRecord};
use solana_sdk::signature::Signer;

const COMPUTE_UNITS_JSON: &str = include_str!("../../../client/psyche/solana/compute_units.json");
/// Solana's per-transaction compute cap.
const MAX_TX_COMPUTE_UNITS: u64 = 1_400_000;
/// SBF's default heap (the programs request no larger frame).
const HEAP_BYTES: usize = 32 * 1024;
/// What the SBF entrypoint allocates per account before the program runs (an `AccountInfo` in
/// the list plus the two `Rc<RefCell<..>>` of its lamports and data), counted generously.
const ENTRYPOINT_BYTES_PER_ACCOUNT: usize = 160;
/// Used at most this share of the requested limit / of the heap.
const CU_MARGIN: f64 = 0.8;
const HEAP_MARGIN: f64 = 0.5;
/// Ejections in one health check: the most one instruction takes.
const EJECTED: usize = psyche_coordinator::constants::MAX_HEALTH_CHECKS_PER_INSTRUCTION;
/// The short client list the heap is compared with (still a full witness set after ejections).
const SMALL: usize = MAX_WITNESSES + 16;

fn limits() -> BTreeMap<String, u32> {
    let v: serde_json::Value = serde_json::from_str(COMPUTE_UNITS_JSON).unwrap();
    v["limits"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap() as u32))
        .collect()
}

fn big_config(n: usize) -> CoordinatorConfig {
    CoordinatorConfig {
        warmup_time: 600,
        cooldown_time: 10,
        max_round_train_time: 30,
        round_witness_time: 1,
        global_batch_size_warmup_tokens: 0,
        epoch_time: 3_600,
        total_steps: 1_000,
        init_min_clients: n as u16,
        min_clients: MAX_WITNESSES.min(n) as u16,
        witness_nodes: MAX_WITNESSES.min(n) as u16,
        global_batch_size_start: n as u16,
        global_batch_size_end: n as u16,
        // Every result sampled (at most 16): the verifiers' verdicts at their costliest.
        verification_percent: 100,
        waiting_for_members_extra_time: 1,
    }
}

/// The worst case seen per row of the table.
#[derive(Default)]
struct Costs {
    rows: BTreeMap<String, Row>,
    /// Account name → bytes, as created on chain.
    accounts: BTreeMap<String, usize>,
}

#[derive(Clone, Default)]
struct Row {
    instruction: String,
    compute_units: u64,
    limit: u32,
    tx_bytes: usize,
    heap: usize,
    accounts: usize,
    clients: usize,
}

impl Costs {
    fn record(&mut self, label: &str, instruction: &str, m: &Measured, accounts: usize, n: usize) {
        if let Err(e) = &m.result {
            panic!("{label}: {e:?}\n{}", m.logs.join("\n"));
        }
        let row = self.rows.entry(label.to_string()).or_default();
        row.instruction = instruction.to_string();
        row.compute_units = row.compute_units.max(m.compute_units);
        row.tx_bytes = row.tx_bytes.max(m.tx_bytes);
        row.heap = row.heap.max(m.heap + accounts * ENTRYPOINT_BYTES_PER_ACCOUNT);
        row.accounts = accounts;
        row.clients = n;
    }
}

/// The accounts of the permissionless instructions (user, instance, account) and of join_run
/// (+ the authorization).
const PERMISSIONLESS_ACCOUNTS: usize = 3;
const JOIN_ACCOUNTS: usize = 4;
const OWNER_ACCOUNTS: usize = 3;
/// set_peer_addrs: signer, instance, record, system program; close_peer_record: signer, record.
const SET_PEER_ADDRS_ACCOUNTS: usize = 4;
const CLOSE_PEER_RECORD_ACCOUNTS: usize = 2;
/// The peer record's bump in the measured case: 11 bumps tried (see `drive`).
const PEER_BUMP: u8 = 245;

/// Drives one run with `n` clients from creation through the end of its first epoch, measuring
/// every instruction at the points where it does the most work.
async fn drive(n: usize, costs: &mut Costs) {
    let limit = limits();
    let lim = |name: &str| *limit.get(name).unwrap_or_else(|| panic!("no limit for {name}"));
    let mut env = Env::new().await;
    let run = env.create_run("costs").await;

    let ix = ix_update(
        &run,
        &run.authority.pubkey(),
        None,
        Some(big_config(n)),
        Some(largest_model(distro())),
        Some(Progress::new(0, 1, 0)),
    );
    let m = env.send_measured(ix, &[&run.authority], lim("update")).await;
    costs.record("update: largest config + model + progress", "update", &m, OWNER_ACCOUNTS, n);
    env.send(ix_set_paused(&run, false), &[&run.authority]).await.unwrap();
    let authorization = env.permissionless_authorization(&run).await;
    for (name, key) in [
        ("CoordinatorAccount", run.account),
        ("CoordinatorInstance", run.instance),
        ("Authorization (no delegates)", authorization),
    ] {
        let bytes = env.account_data(key).await.expect("account").len();
        costs.accounts.insert(name.to_string(), bytes);
    }

    let clients: Vec<Client> =
        (0..n).map(|i| Client::seeded(&format!("costs/{i}"), i as u8)).collect();
    for c in &clients {
        env.fund(&c.wallet.pubkey()).await;
    }
    // Each join scans the registration list and counts the pending ones: the last is the worst.
    for c in &clients {
        let ix = ix_join_run(&run, &c.wallet.pubkey(), Env::open_authorization(&run), c.id());
        let m = env.send_measured(ix, &[&c.wallet], lim("join_run")).await;
        costs.record("join_run: full pending list", "join_run", &m, JOIN_ACCOUNTS, n);
    }
    env.warp(1).await;
    let payer = env.payer();
    let m = env.send_measured(ix_tick(&run, &payer.pubkey()), &[], lim("tick")).await;
    costs.record("tick: WaitingForMembers → Warmup", "tick", &m, PERMISSIONLESS_ACCOUNTS, n);
    assert_eq!(env.run_state(&run).await, RunState::Warmup);

    // Warmup witnesses until the quorum starts training: the last one moves the phase.
    for c in &clients {
        if env.run_state(&run).await != RunState::Warmup {
            break;
        }
        let account = env.coordinator(&run).await;
        let index = account.state.coordinator.index_of(&c.id()).unwrap() as u64;
        let ix = ix_warmup_witness(
            &run,
            &c.wallet.pubkey(),
            warmup_proof(index),
            Bloom::empty(0),
            Bloom::empty(0),
        );
        let m = env.send_measured(ix, &[&c.wallet], lim("warmup_witness")).await;
        costs.record("warmup_witness", "warmup_witness", &m, PERMISSIONLESS_ACCOUNTS, n);
    }
    assert_eq!(env.run_state(&run).await, RunState::RoundTrain);

    // Rounds 0 and 1: every elected witness reports all but the last EJECTED clients, so the
    // health check of round 2 can eject them.
    let silent: Vec<&Client> = clients[n - EJECTED..].iter().collect();
    for round in 0..2 {
        if round == 0 {
            witness_all(&mut env, &run, &clients, &silent, costs, lim("witness")).await;
        } else {
            // Round 1 judges round 0: each verifier checks all 16 sampled slots but its own.
            let ixs = env.witness_ixs_with(&run, &clients, &silent, full_verdict).await;
            for (ix, i) in ixs {
                let m = env.send_measured(ix, &[&clients[i].wallet], lim("witness")).await;
                let case = "witness: full witness set, verdicts on 16 slots";
                costs.record(case, "witness", &m, PERMISSIONLESS_ACCOUNTS, n);
            }
        }
        env.warp(1).await;
        let m = env.send_measured(ix_tick(&run, &payer.pubkey()), &[], lim("tick")).await;
        costs.record("tick: RoundWitness → next round", "tick", &m, PERMISSIONLESS_ACCOUNTS, n);
    }

    let account = env.coordinator(&run).await;
    let coordinator = &account.state.coordinator;
    let prev = coordinator.previous_round().unwrap();
    let sel = coordinator.committee_selection(prev).unwrap();
    let checks: Vec<HealthCheck> = silent
        .iter()
        .map(|c| HealthCheck {
            id: c.id(),
            proof: sel.get_committee(coordinator.index_of(&c.id()).unwrap() as u64).unwrap(),
        })
        .collect();
    let reporter = &clients[0];
    let ix = ix_health_check(&run, &reporter.wallet.pubkey(), checks);
    let m = env.send_measured(ix, &[&reporter.wallet], lim("health_check")).await;
    costs.record("health_check: ejects 8", "health_check", &m, PERMISSIONLESS_ACCOUNTS, n);
    let account = env.coordinator(&run).await;
    for c in &silent {
        let i = account.state.coordinator.index_of(&c.id()).unwrap();
        let state = account.state.coordinator.epoch_state.clients()[i].state;
        assert_eq!(state, ClientState::Ejected as u8);
    }

    // The epoch times out: drain rounds until Cooldown, then the elected checkpointer's
    // checkpoint ends the epoch and credits every healthy client's points.
    env.warp(3_600).await;
    let alive = &clients[..n - EJECTED];
    for _ in 0..8 {
        if env.run_state(&run).await == RunState::Cooldown {
            break;
        }
        witness_all(&mut env, &run, alive, &[], costs, lim("witness")).await;
        env.warp(1).await;
        let m = env.send_measured(ix_tick(&run, &payer.pubkey()), &[], lim("tick")).await;
        costs.record("tick: drain rounds → Cooldown", "tick", &m, PERMISSIONLESS_ACCOUNTS, n);
    }
    assert_eq!(env.run_state(&run).await, RunState::Cooldown);
    let account: Box<CoordinatorAccount> = env.coordinator(&run).await;
    let coordinator = &account.state.coordinator;
    let elected = coordinator.checkpointer_indices();
    let who = elected
        .iter()
        .map(|&i| coordinator.epoch_state.clients()[i as usize].id)
        .find_map(|id| alive.iter().find(|c| c.id() == id))
        .expect("an elected checkpointer among the healthy clients");
    let checkpoint =
        Checkpoint::Hub(HubRepo { repo_id: "r".repeat(64), revision: Some("v".repeat(64)) });
    let ix = ix_checkpoint(&run, &who.wallet.pubkey(), checkpoint);
    let m = env.send_measured(ix, &[&who.wallet], lim("checkpoint")).await;
    costs.record(
        "checkpoint: ends the epoch, credits points",
        "checkpoint",
        &m,
        PERMISSIONLESS_ACCOUNTS,
        n,
    );
    assert_eq!(env.run_state(&run).await, RunState::WaitingForMembers);

    // Peer records: the largest content (4 addresses of 128 bytes), on creation (the system
    // program CPI) and on overwrite, then the close. `init_if_needed` searches the record's bump
    // on every call (a `create_program_address` per bump tried, ~1,500 CU each), so the
    // publisher is a wallet whose record needs 11 tries (bump ≤ 245: about 1 wallet in 2,000).
    // Each address is three IPv6 targets (the costliest to check) and padding, in a public run
    // (every target checked against the local ranges too).
    let ip6 = "/ip6/2001:db8:85a3:8d3:1319:8a2e:370:7348";
    let addrs: Vec<String> = (0..usize::from(MAX_PEER_ADDRS))
        .map(|i| {
            let head = format!("{ip6}{ip6}{ip6}/{i}");
            format!("{head}{}", "x".repeat(usize::from(MAX_PEER_ADDR_LEN) - head.len()))
        })
        .collect();
    let addrs: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let publisher = (0u32..)
        .map(|i| seeded_keypair(format!("costs/peer/{i}").as_bytes()))
        .find(|k| PeerRecord::find_pda(&run.instance, &k.pubkey()).1 <= PEER_BUMP)
        .unwrap();
    env.fund(&publisher.pubkey()).await;
    let record = PeerRecord::find_pda(&run.instance, &publisher.pubkey()).0;
    for label in ["set_peer_addrs: creates, 4 × 128 B", "set_peer_addrs: overwrites, 4 × 128 B"] {
        let ix = ix_set_peer_addrs(run.instance, &publisher.pubkey(), &addrs);
        let m = env.send_measured(ix, &[&publisher], lim("set_peer_addrs")).await;
        costs.record(label, "set_peer_addrs", &m, SET_PEER_ADDRS_ACCOUNTS, n);
        env.warp(1).await;
    }
    let bytes = env.account_data(record).await.expect("peer record").len();
    costs.accounts.insert("PeerRecord".to_string(), bytes);
    let ix = ix_close_peer_record(&publisher.pubkey(), record);
    let m = env.send_measured(ix, &[&publisher], lim("close_peer_record")).await;
    costs.record("close_peer_record", "close_peer_record", &m, CLOSE_PEER_RECORD_ACCOUNTS, n);
}

/// A verifier's verdict that checks every sampled slot of the previous round but its own, if
/// sampled (each
/// checked slot costs the program a shuffle to rule out the sender's own result); empty for the
/// other witnesses.
fn full_verdict(state: &CoordinatorState, proof: &WitnessProofArg) -> Verdict {
    if proof.position >= VERIFIERS_PER_ROUND {
        return Verdict::default();
    }
    let prev = state.previous_round().expect("a judged round");
    let n = u64::from(prev.clients_len);
    let seed = state.current_round().random_seed;
    let vp = state.config.verification_percent;
    let mut checked = 0u16;
    for slot in 0..sampled_count(n, vp) {
        if sampled_trainer(slot, n, seed, vp) != Some(proof.index) {
            checked |= 1 << slot;
        }
    }
    assert!(checked.count_ones() >= 15, "16 sampled slots, at most one the verifier's own");
    Verdict { checked, mismatch: 0 }
}

/// Every elected witness among `clients` witnesses the round, all epoch clients but `unseen` in
/// its participant bloom.
async fn witness_all(
    env: &mut Env,
    run: &Run,
    clients: &[Client],
    unseen: &[&Client],
    costs: &mut Costs,
    limit: u32,
) {
    let n = env.coordinator(run).await.state.coordinator.epoch_state.clients().len();
    for (ix, i) in env.witness_ixs(run, clients, unseen).await {
        let m = env.send_measured(ix, &[&clients[i].wallet], limit).await;
        costs.record("witness: full witness set", "witness", &m, PERMISSIONLESS_ACCOUNTS, n);
    }
}

fn to_json(costs: &Costs) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = costs
        .rows
        .iter()
        .map(|(label, r)| {
            serde_json::json!({
                "case": label, "instruction": r.instruction, "compute_units": r.compute_units,
                "limit": r.limit, "tx_bytes": r.tx_bytes, "heap_bytes": r.heap,
                "clients": r.clients,
            })
        })
        .collect();
    let accounts: Vec<serde_json::Value> = costs
        .accounts
        .iter()
        .map(|(name, &bytes)| serde_json::json!({"name": name, "bytes": bytes, "rent": rent_exempt(bytes)}))
        .collect();
    serde_json::json!({ "sbf": sbf_mode(), "rows": rows, "accounts": accounts })
}

/// A test without libtest's harness (`harness = false` in Cargo.toml): libtest captures output
/// into a buffer that grows on the program's thread whenever the native program logs, which the
/// heap count would take for the program's own allocations.
fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(every_instruction_fits_the_limits_at_its_worst_case());
    println!("program_costs: every instruction fits the limits at its worst case");
}

async fn every_instruction_fits_the_limits_at_its_worst_case() {
    let limit = limits();
    let mut big = Costs::default();
    drive(MAX_CLIENTS, &mut big).await;
    for row in big.rows.values_mut() {
        row.limit = limit[&row.instruction];
    }
    let mut report = String::new();
    for (label, r) in &big.rows {
        report += &format!(
            "{label:<45} {:>9} CU / {:>9} limit  {:>5} tx B  {:>6} heap B\n",
            r.compute_units, r.limit, r.tx_bytes, r.heap
        );
    }
    println!("{report}");
    if let Ok(path) = std::env::var("PSYCHE_COSTS_OUT") {
        std::fs::write(path, serde_json::to_string_pretty(&to_json(&big)).unwrap()).unwrap();
    }
    for (label, r) in &big.rows {
        assert!(u64::from(r.limit) <= MAX_TX_COMPUTE_UNITS, "{label}: limit over the cap");
        assert!(r.tx_bytes <= 1232, "{label}: {} transaction bytes", r.tx_bytes);
        if sbf_mode() {
            let used = r.compute_units as f64 / f64::from(r.limit);
            assert!(used <= CU_MARGIN, "{label}: {} CU is {used:.2} of its limit", r.compute_units);
        } else {
            let share = r.heap as f64 / HEAP_BYTES as f64;
            assert!(share <= HEAP_MARGIN, "{label}: heap {} B is {share:.2} of 32 KB", r.heap);
        }
    }
    if !sbf_mode() {
        // No instruction allocates in proportion to the client lists: the same run with a
        // client list a fifth as long allocates as much.
        let mut small = Costs::default();
        drive(SMALL, &mut small).await;
        let grew: Vec<String> = big
            .rows
            .iter()
            .filter(|(label, r)| r.heap > small.rows[*label].heap)
            .map(|(label, r)| {
                format!(
                    "{label}: {} B with 256 clients, {} B with {SMALL}",
                    r.heap, small.rows[label].heap
                )
            })
            .collect();
        assert!(grew.is_empty(), "heap grows with the client list:\n{}", grew.join("\n"));
    }
}
