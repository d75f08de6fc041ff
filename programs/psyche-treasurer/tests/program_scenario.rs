//! A small treasurer scenario through the real runtime, recorded as the cross-language vectors
//! `tests/vectors/solana/treasurer.json` (the shape of `whole_epoch.json`, tests/vectors/README.md
//! "Solana transactions"): with `PSYCHE_WRITE_VECTORS=1` it writes the file, otherwise it compares
//! with the committed one and fails on any difference. Every key is derived from a label, and the
//! clock is fixed, so the file is the same on every run.

#[path = "../../psyche-coordinator/tests/common/mod.rs"]
mod common;
mod harness;

use anchor_lang::Discriminator;
use anchor_spl::token::spl_token;
use common::json::{config_to_json, hex_encode, model_to_json};
use harness::*;
use psyche_coordinator::core::{FixedString280, FixedString64, RunMetadata};
use psyche_treasurer::error::TreasurerError as E;
use psyche_treasurer::{Participant, Run, RunUpdateParams};
use serde_json::{json, Value};
use solana_sdk::instruction::Instruction;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::{Keypair, Signer};

const PER_POINT: u64 = 1_000;
const EARNING: u64 = 600;
const INDEX: u64 = 0x5eed_0001;
const MINT_LEN: usize = 82;
const TOKEN_ACCOUNT_LEN: usize = 165;

fn program_name(id: &Pubkey) -> &'static str {
    if *id == psyche_treasurer::ID {
        "psyche_treasurer"
    } else if *id == psyche_coordinator::ID {
        "psyche_coordinator"
    } else if *id == psyche_authorizer::ID {
        "psyche_authorizer"
    } else if *id == spl_token::ID {
        "spl_token"
    } else if *id == anchor_lang::system_program::ID {
        "system"
    } else {
        "unknown"
    }
}

fn instruction_json(ix: &Instruction, name: &str, args: Value) -> Value {
    json!({
        "program": program_name(&ix.program_id),
        "program_id": ix.program_id.to_string(),
        "name": name,
        "args": args,
        "data": hex_encode(&ix.data),
        "accounts": ix.accounts.iter().map(|m| json!({
            "pubkey": m.pubkey.to_string(),
            "is_signer": m.is_signer,
            "is_writable": m.is_writable,
        })).collect::<Vec<_>>(),
    })
}

fn create_account_args(space: usize, owner: &Pubkey) -> Value {
    json!({"lamports": rent_exempt(space), "space": space, "owner": owner.to_string()})
}

fn metadata_json(m: &RunMetadata) -> Value {
    json!({
        "name": m.name.as_str(),
        "description": m.description.as_str(),
        "num_parameters": m.num_parameters,
        "vocab_size": m.vocab_size,
    })
}

struct Scenario {
    env: Env,
    steps: Vec<Value>,
}

impl Scenario {
    /// Sends one transaction and records it with its outcome (`expect`: `None` = success; the
    /// error belongs to the last instruction).
    async fn step(
        &mut self,
        label: &str,
        ixs: Vec<(Instruction, &str, Value)>,
        signers: &[&Keypair],
        expect: Option<E>,
    ) {
        let clock = self.env.clock().await;
        let only: Vec<Instruction> = ixs.iter().map(|(ix, _, _)| ix.clone()).collect();
        let result = self.env.send_many(&only, signers).await;
        let outcome = match expect {
            None => {
                result.unwrap_or_else(|e| panic!("{label}: {e:?}"));
                json!("ok")
            }
            Some(e) => {
                assert_eq!(custom_code_at(result, ixs.len() as u8), code(e), "{label}");
                json!({"error": format!("{e:?}"), "code": code(e)})
            }
        };
        let mut all_signers = vec![self.env.payer().pubkey().to_string()];
        for k in signers {
            let key = k.pubkey().to_string();
            if !all_signers.contains(&key) {
                all_signers.push(key);
            }
        }
        self.steps.push(json!({
            "label": label,
            "unix_timestamp": clock.unix_timestamp,
            "slot": clock.slot,
            "signers": all_signers,
            "instructions": ixs.iter().map(|(ix, name, args)| instruction_json(ix, name, args.clone())).collect::<Vec<_>>(),
            "result": outcome,
        }));
    }

    /// The account at `address` now: its data (hex) and, via `fields`, its decoded fields.
    async fn snapshot(&mut self, name: &str, address: Pubkey, fields: Value) -> Value {
        let data = self.env.account_data(address).await.expect("account");
        json!({
            "name": name,
            "after_step": self.steps.len() - 1,
            "address": address.to_string(),
            "size": data.len(),
            "fields": fields,
            "data": hex_encode(&data),
        })
    }
}

#[tokio::test]
async fn treasurer_scenario() {
    let env = Env::new().await;
    let mut s = Scenario { env, steps: vec![] };
    let payer = s.env.payer();
    let mint = seeded_keypair(b"treasurer/mint");
    let run = TRun::planned("treasurer", INDEX, mint.pubkey());
    let authority = run.authority.insecure_clone();
    let clients: Vec<Client> =
        (0..3).map(|i| Client::seeded(&format!("treasurer/client-{i}"), 0xc0 + i as u8)).collect();
    let user = clients[0].wallet.insecure_clone();

    // 1. The collateral mint (6 decimals, mint authority the payer).
    let ixs = s.env.create_mint_ixs(&mint);
    s.step(
        "create the collateral mint",
        vec![
            (
                ixs[0].clone(),
                "create_account",
                create_account_args(MINT_LEN, &spl_token::ID),
            ),
            (
                ixs[1].clone(),
                "initialize_mint2",
                json!({"decimals": DECIMALS, "mint_authority": payer.pubkey().to_string(), "freeze_authority": null}),
            ),
        ],
        &[&mint],
        None,
    )
    .await;

    // 2. The run: the coordinator account, then run_create (escrow and coordinator by CPI).
    let ixs = s.env.create_run_ixs(&run, PER_POINT);
    let params = json!({"params": {
        "index": INDEX,
        "run_id": run.run_id,
        "client_version": "test",
        "join_authority": run.join_authority.pubkey().to_string(),
        "collateral_per_point": PER_POINT,
        "local_run": false,
    }});
    let account = run.account_keypair();
    s.step(
        "create the run",
        vec![
            (
                ixs[0].clone(),
                "create_account",
                create_account_args(
                    psyche_coordinator::CoordinatorAccount::SPACE,
                    &psyche_coordinator::ID,
                ),
            ),
            (ixs[1].clone(), "run_create", params),
        ],
        &[&account, &authority],
        None,
    )
    .await;
    let fields = run_fields(&mut s, &run).await;
    let snapshot_run_created = s.snapshot("run_created", run.address, fields).await;

    // 3. A refused update (all None), then config, model, metadata, rates and the resume.
    let ix = ix_run_update(&authority.pubkey(), &run, empty_update());
    s.step(
        "an empty run_update is refused",
        vec![(ix, "run_update", update_args(&empty_update()))],
        &[&authority],
        Some(E::RunUpdateEmpty),
    )
    .await;
    let metadata = RunMetadata {
        name: FixedString64::new("treasurer run").unwrap(),
        description: FixedString280::new("a run paid by the treasurer").unwrap(),
        num_parameters: 20_000_000,
        vocab_size: 32_000,
    };
    let params = RunUpdateParams {
        metadata: Some(Box::new(metadata)),
        config: Some(Box::new(tiny_config())),
        model: Some(Box::new(tiny_model())),
        progress: None,
        epoch_earning_rate_total_shared: Some(EARNING),
        epoch_slashing_rate_per_client: Some(50),
        paused: Some(false),
        client_version: Some("test".into()),
    };
    let args = update_args(&params);
    let ix = ix_run_update(&authority.pubkey(), &run, params);
    s.step("configure, set rates and resume", vec![(ix, "run_update", args)], &[&authority], None)
        .await;

    // 4. Not recorded: the epoch that earns the points (join authorization, three joins, Warmup,
    //    rounds, Cooldown; 200 points each), as the coordinator's own vectors record it.
    s.env.permissionless_authorization(&run).await;
    s.env.run_epoch(&run, &clients).await;
    let ledger = s.env.coordinator(&run).await;
    let c0 = ledger.state.clients_state.clients().iter().find(|c| c.id == clients[0].id()).unwrap();
    assert_eq!((c0.earned, c0.slashed), (EARNING / 3, 0));

    // 5. Client 0's Participant and payout token account; the escrow funded for 150 points.
    let ix = ix_participant_create(&payer.pubkey(), &user.pubkey(), &run);
    s.step(
        "client 0 creates its participant",
        vec![(ix, "participant_create", json!({}))],
        &[&user],
        None,
    )
    .await;
    let payout = seeded_keypair(b"treasurer/client-0/payout");
    let ixs = s.env.create_token_account_ixs(&payout, &run.mint, &user.pubkey());
    s.step(
        "client 0's payout token account",
        vec![
            (
                ixs[0].clone(),
                "create_account",
                create_account_args(TOKEN_ACCOUNT_LEN, &spl_token::ID),
            ),
            (ixs[1].clone(), "initialize_account3", json!({"owner": user.pubkey().to_string()})),
        ],
        &[&payout],
        None,
    )
    .await;
    let ix = s.env.mint_to_ix(&run.mint, &run.collateral, 150 * PER_POINT);
    s.step(
        "fund the escrow (150 points' worth)",
        vec![(ix, "mint_to", json!({"amount": 150 * PER_POINT}))],
        &[],
        None,
    )
    .await;

    // 6. Claims: 120 points paid; 81 more exceed what is left (80); 80 exceed the escrow (30
    //    points' worth); a top-up by a plain transfer (here mint_to), then the 80 are paid.
    let claim = |points: u64| {
        (
            ix_participant_claim(&user.pubkey(), &payout.pubkey(), &run, points),
            "participant_claim",
            json!({"params": {"claim_points": points}}),
        )
    };
    s.step("client 0 claims 120 points", vec![claim(120)], &[&user], None).await;
    s.step(
        "a claim beyond the points earned",
        vec![claim(81)],
        &[&user],
        Some(E::ClaimExceedsEarned),
    )
    .await;
    s.step("a claim beyond the escrow", vec![claim(80)], &[&user], Some(E::EscrowShort)).await;
    let ix = s.env.mint_to_ix(&run.mint, &run.collateral, 50 * PER_POINT);
    s.step(
        "top up the escrow",
        vec![(ix, "mint_to", json!({"amount": 50 * PER_POINT}))],
        &[],
        None,
    )
    .await;
    s.step("client 0 claims the remaining 80 points", vec![claim(80)], &[&user], None).await;
    s.step("nothing is left to claim", vec![claim(1)], &[&user], Some(E::ClaimExceedsEarned)).await;

    assert_eq!(s.env.balance(payout.pubkey()).await, 200 * PER_POINT);
    assert_eq!(s.env.balance(run.collateral).await, 0);
    let participant_address = run.participant(&user.pubkey());
    let p = s.env.participant(participant_address).await;
    assert_eq!((p.claimed_points, p.claimed_collateral), (200, 200 * PER_POINT));
    let fields = json!({
        "bump": p.bump,
        "run": p.run.to_string(),
        "user": p.user.to_string(),
        "claimed_points": p.claimed_points,
        "claimed_collateral": p.claimed_collateral,
    });
    let snapshot_participant = s.snapshot("participant", participant_address, fields).await;
    let fields = run_fields(&mut s, &run).await;
    let snapshot_run = s.snapshot("run_after_claims", run.address, fields).await;

    // 7. Winding down (issue 26): the escrow refused as a claim's destination, the wind-down,
    //    a close before the grace period, and the close after it (20 points' worth left).
    let ix = ix_participant_claim(&user.pubkey(), &run.collateral, &run, 1);
    s.step(
        "a claim paid into the escrow itself",
        vec![(ix, "participant_claim", json!({"params": {"claim_points": 1}}))],
        &[&user],
        Some(E::RunCollateralAsDestination),
    )
    .await;
    let ix = ix_run_wind_down(&authority.pubkey(), &run);
    s.step(
        "the owner winds the run down",
        vec![(ix, "run_wind_down", json!({}))],
        &[&authority],
        None,
    )
    .await;
    let remainder_to = seeded_keypair(b"treasurer/authority/remainder");
    let ixs = s.env.create_token_account_ixs(&remainder_to, &run.mint, &authority.pubkey());
    s.step(
        "the owner's token account for the remainder",
        vec![
            (
                ixs[0].clone(),
                "create_account",
                create_account_args(TOKEN_ACCOUNT_LEN, &spl_token::ID),
            ),
            (
                ixs[1].clone(),
                "initialize_account3",
                json!({"owner": authority.pubkey().to_string()}),
            ),
        ],
        &[&remainder_to],
        None,
    )
    .await;
    let ix = s.env.mint_to_ix(&run.mint, &run.collateral, 20 * PER_POINT);
    s.step(
        "20 points' worth left in the escrow",
        vec![(ix, "mint_to", json!({"amount": 20 * PER_POINT}))],
        &[],
        None,
    )
    .await;
    let close = || {
        let accounts = close_accounts(&authority.pubkey(), &remainder_to.pubkey(), &run);
        (ix_run_close_with(accounts), "run_close", json!({}))
    };
    s.step(
        "a close before the grace period",
        vec![close()],
        &[&authority],
        Some(E::RunCloseTooEarly),
    )
    .await;
    let started = s.env.run(run.address).await.wind_down_at;
    s.env.set_time(started + psyche_treasurer::constants::RUN_CLOSE_GRACE_SECONDS).await;
    s.step("the owner closes the run", vec![close()], &[&authority], None).await;
    assert_eq!(s.env.balance(remainder_to.pubkey()).await, 20 * PER_POINT);
    let fields = run_fields(&mut s, &run).await;
    let snapshot_closed = s.snapshot("run_closed", run.address, fields).await;

    let scenario = json!({
        "name": "treasurer",
        "description": "the treasurer through the real runtime: a collateral mint, run_create (coordinator account + escrow + coordinator by CPI, the Run PDA as main authority), a refused empty run_update, run_update with metadata, tiny config and model, rates (600, 50), client version and resume; then (not recorded) one epoch of the coordinator with three clients, 200 points each; then client 0's participant_create, payout token account, escrow funding, a 120-point claim, a refused over-claim (ClaimExceedsEarned), a refused claim beyond the escrow (EscrowShort), a top-up, the remaining 80 points, and a refused claim of 1; then a claim into the escrow itself (RunCollateralAsDestination), run_wind_down, the owner's token account, 20 points' worth minted to the escrow, a refused run_close (RunCloseTooEarly) and, 7 days later, run_close. collateral_per_point 1000, mint decimals 6",
        "programs": {
            "psyche_treasurer": psyche_treasurer::ID.to_string(),
            "psyche_coordinator": psyche_coordinator::ID.to_string(),
            "psyche_authorizer": psyche_authorizer::ID.to_string(),
            "spl_token": spl_token::ID.to_string(),
        },
        "pdas": {
            "run": {"seeds": ["Run", format!("u64le:{INDEX}")], "address": run.address.to_string(), "bump": Run::find_pda(INDEX).1},
            "run_collateral": {"seeds": ["RunCollateral", run.address.to_string()], "address": run.collateral.to_string()},
            "participant": {"seeds": ["Participant", run.address.to_string(), user.pubkey().to_string()], "address": participant_address.to_string(), "bump": Participant::find_pda(&run.address, &user.pubkey()).1},
            "coordinator_instance": run.instance.to_string(),
        },
        "discriminators": {
            "Run": hex_encode(Run::DISCRIMINATOR),
            "Participant": hex_encode(Participant::DISCRIMINATOR),
        },
        "errors": errors_table(),
        "steps": s.steps,
        "accounts": [snapshot_run_created, snapshot_participant, snapshot_run, snapshot_closed],
    });
    write_or_compare("treasurer.json", &scenario);
}

async fn run_fields(s: &mut Scenario, run: &TRun) -> Value {
    let r = s.env.run(run.address).await;
    json!({
        "bump": r.bump,
        "index": r.index,
        "main_authority": r.main_authority.to_string(),
        "join_authority": r.join_authority.to_string(),
        "coordinator_instance": r.coordinator_instance.to_string(),
        "coordinator_account": r.coordinator_account.to_string(),
        "collateral_mint": r.collateral_mint.to_string(),
        "collateral_per_point": r.collateral_per_point,
        "total_claimed_points": r.total_claimed_points,
        "total_claimed_collateral": r.total_claimed_collateral,
        "wind_down_at": r.wind_down_at,
    })
}

fn update_args(p: &RunUpdateParams) -> Value {
    json!({"params": {
        "metadata": p.metadata.as_deref().map(metadata_json),
        "config": p.config.as_deref().map(config_to_json),
        "model": p.model.as_deref().map(model_to_json),
        "progress": p.progress.map(|g| json!({"epoch": g.epoch, "step": g.step, "epoch_start_data_index": g.epoch_start_data_index})),
        "epoch_earning_rate_total_shared": p.epoch_earning_rate_total_shared,
        "epoch_slashing_rate_per_client": p.epoch_slashing_rate_per_client,
        "paused": p.paused,
        "client_version": p.client_version,
    }})
}

/// The treasurer's errors (name → code) from the committed IDL.
fn errors_table() -> Value {
    let idl = common::read_json(&common::manifest_dir().join("../../idl/psyche_treasurer.json"));
    let mut errors = serde_json::Map::new();
    for e in idl["errors"].as_array().expect("IDL errors") {
        errors.insert(e["name"].as_str().unwrap().to_string(), e["code"].clone());
    }
    // The IDL and the program agree.
    assert_eq!(errors["EscrowShort"], code(E::EscrowShort));
    Value::Object(errors)
}

fn write_or_compare(name: &str, value: &Value) {
    let path = common::vectors_dir("solana").join(name);
    let text = serde_json::to_string_pretty(value).unwrap() + "\n";
    if std::env::var("PSYCHE_WRITE_VECTORS").as_deref() == Ok("1") {
        std::fs::write(&path, text).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; generate it with PSYCHE_WRITE_VECTORS=1 cargo test -p psyche-treasurer --test program_scenario",
            path.display()
        )
    });
    assert!(
        committed == text,
        "{} differs from what the programs produce now; if the change is intended, regenerate with \
         PSYCHE_WRITE_VECTORS=1 cargo test -p psyche-treasurer --test program_scenario and commit",
        path.display()
    );
}
