//! One whole epoch through transactions: create → configure → unpause → joins → warmup →
//! rounds (clock warped) → epoch timeout → drain rounds → cooldown → checkpoint → points; then a
//! client's peer record (publish, overwrite, close).
//!
//! It also records the cross-language vectors in `tests/vectors/solana/` (format:
//! tests/vectors/README.md, "Solana transactions"): with `PSYCHE_WRITE_VECTORS=1` it writes
//! them, otherwise it compares with the committed files and fails on any difference.

mod common;
mod harness;

use std::collections::BTreeMap;
use std::path::PathBuf;

use anchor_lang::Discriminator;
use common::json::{
    checkpoint_to_json, config_to_json, hex_encode, identity_to_json, model_to_json, state_to_json,
};
use harness::*;
use psyche_coordinator::constants::{MAX_PEER_ADDRS, MAX_PEER_ADDR_LEN};
use psyche_coordinator::core::hash::sha256;
use psyche_coordinator::core::model::{Checkpoint, HubRepo};
use psyche_coordinator::core::{
    Bloom, Committee, CoordinatorState, HealthCheck, RunState, Verdict, WitnessMetadata,
    WitnessProofArg,
};
use psyche_coordinator::error::CoordinatorProgramError as E;
use psyche_coordinator::{CoordinatorAccount, CoordinatorInstanceState, PeerRecord};
use serde_json::{json, Value};
use solana_sdk::instruction::Instruction;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::{Keypair, Signer};

const EARNING_RATE: u64 = 600;
const SLASHING_RATE: u64 = 50;

fn vectors_dir() -> PathBuf {
    common::vectors_dir("solana")
}

/// Records every transaction of the scenario and a few account snapshots.
struct Recorder {
    steps: Vec<Value>,
    snapshots: BTreeMap<String, Value>,
}

fn program_name(id: &Pubkey) -> &'static str {
    if *id == psyche_coordinator::ID {
        "psyche_coordinator"
    } else if *id == psyche_authorizer::ID {
        "psyche_authorizer"
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

/// Non-zero byte runs of `data`: `[[offset, hex], ...]` (the account is mostly zeros).
fn sparse_runs(data: &[u8]) -> Vec<Value> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < data.len() {
        if data[i] == 0 {
            i += 1;
            continue;
        }
        // A run ends at 8 consecutive zeros (short zero gaps stay inside the run).
        let start = i;
        let mut end = i;
        let mut zeros = 0;
        while i < data.len() && zeros < 8 {
            if data[i] == 0 {
                zeros += 1;
            } else {
                zeros = 0;
                end = i + 1;
            }
            i += 1;
        }
        runs.push(json!([start, hex_encode(&data[start..end])]));
        i = end;
    }
    runs
}

fn program_state_json(s: &CoordinatorInstanceState) -> Value {
    let cs = &s.clients_state;
    json!({
        "metadata": {
            "name": s.metadata.name.as_str(),
            "description": s.metadata.description.as_str(),
            "num_parameters": s.metadata.num_parameters,
            "vocab_size": s.metadata.vocab_size,
        },
        "clients_state": {
            "clients": cs.clients().iter().map(|c| json!({
                "id": identity_to_json(&c.id),
                "earned": c.earned,
                "slashed": c.slashed,
                "active": c.active,
            })).collect::<Vec<_>>(),
            "next_active": cs.next_active,
            "current_epoch_rates": {
                "earning_rate_total_shared": cs.current_epoch_rates.earning_rate_total_shared,
                "slashing_rate_per_client": cs.current_epoch_rates.slashing_rate_per_client,
            },
            "future_epoch_rates": {
                "earning_rate_total_shared": cs.future_epoch_rates.earning_rate_total_shared,
                "slashing_rate_per_client": cs.future_epoch_rates.slashing_rate_per_client,
            },
        },
        "client_version": s.client_version.as_str(),
        "is_warmup_first_tick": s.is_warmup_first_tick != 0,
        "is_training_first_tick": s.is_training_first_tick != 0,
    })
}

struct Scenario {
    env: Env,
    run: Run,
    clients: Vec<Client>,
    rec: Recorder,
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
        let clock = self.env.clock().await;
        let only: Vec<Instruction> = ixs.iter().map(|(ix, _, _)| ix.clone()).collect();
        let result = self.env.send_many(&only, signers).await;
        let outcome = match expect {
            None => {
                result.unwrap_or_else(|e| panic!("{label}: {e:?}"));
                json!("ok")
            }
            Some(e) => {
                // The program instruction is the last one; +1 for the compute-budget one.
                let index = ixs.len() as u8;
                assert_eq!(custom_code_at(result, index), code(e), "{label}");
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
        self.rec.steps.push(json!({
            "label": label,
            "unix_timestamp": clock.unix_timestamp,
            "slot": clock.slot,
            "signers": all_signers,
            "instructions": ixs.iter().map(|(ix, name, args)| instruction_json(ix, name, args.clone())).collect::<Vec<_>>(),
            "result": outcome,
        }));
    }

    /// Records the coordinator account as it is now under `name`.
    async fn snapshot(&mut self, name: &str) {
        let data = self.env.account_data(self.run.account).await.unwrap();
        let account = decode_coordinator_account(&data);
        let value = json!({
            "name": name,
            "after_step": self.rec.steps.len() - 1,
            "address": self.run.account.to_string(),
            "size": data.len(),
            "discriminator": hex_encode(CoordinatorAccount::DISCRIMINATOR),
            "version": account.version,
            "nonce": account.nonce,
            "coordinator": state_to_json(&account.state.coordinator),
            "program_state": program_state_json(&account.state),
            "bytes": sparse_runs(&data),
        });
        self.rec.snapshots.insert(name.to_string(), value);
    }

    async fn state(&mut self) -> Box<CoordinatorAccount> {
        self.env.coordinator(&self.run).await
    }

    async fn warp(&mut self, seconds: i64) {
        self.env.warp(seconds).await;
    }

    async fn tick(&mut self, label: &str) {
        let payer = self.env.payer();
        let ix = ix_tick(&self.run, &payer.pubkey());
        self.step(label, vec![(ix, "tick", json!({}))], &[], None).await;
    }

    fn client_index(state: &CoordinatorState, client: &Client) -> u64 {
        state.index_of(&client.id()).expect("epoch client") as u64
    }

    /// Each elected witness of the current round sends a witness whose participant bloom holds
    /// every epoch client (so all of them stay healthy).
    async fn witness_round(&mut self, label: &str) {
        let account = self.state().await;
        let coordinator = &account.state.coordinator;
        let height = coordinator.current_round().height;
        let mut participants = Bloom::empty(0x5eed_0000 + u64::from(height));
        for c in coordinator.epoch_state.clients() {
            participants.add(&sha256(&c.id.signer));
        }
        let broadcast = Bloom::empty(0xb0ad_0000 + u64::from(height));
        let mut sent = 0;
        for i in 0..self.clients.len() {
            let index = Self::client_index(coordinator, &self.clients[i]);
            let Some(proof) = witness_proof(coordinator, index) else { continue };
            let user = self.clients[i].wallet.pubkey();
            let metadata = WitnessMetadata {
                step: coordinator.progress.step,
                tokens_per_sec: 1000.5,
                bandwidth_per_sec: 2.0e6,
                loss: 3.25,
                efficiency: 0.5,
                evals: vec![],
            };
            let args = witness_args(&proof, &participants, &broadcast, Some(&metadata));
            let ix = ix_witness(&self.run, &user, proof, participants, broadcast, metadata);
            let wallet = self.clients[i].wallet.insecure_clone();
            self.step(
                &format!("{label}: witness from client {i}"),
                vec![(ix, "witness", args)],
                &[&wallet],
                None,
            )
            .await;
            sent += 1;
        }
        assert!(sent > 0, "{label}: no elected witness");
    }
}

fn proof_json(p: &WitnessProofArg) -> Value {
    json!({"position": p.position, "index": p.index, "witness": p.witness})
}

fn metadata_json(m: &WitnessMetadata) -> Value {
    json!({
        "step": m.step,
        "tokens_per_sec": m.tokens_per_sec,
        "bandwidth_per_sec": m.bandwidth_per_sec,
        "loss": m.loss,
        "efficiency": m.efficiency,
        "evals": m.evals.iter().map(|e| json!({"task": e.task, "value": e.value})).collect::<Vec<_>>(),
    })
}

/// The recorded args of a `witness` (with `m`: its verdict, always empty in this scenario, and
/// metadata) or a `warmup_witness` (without).
fn witness_args(
    p: &WitnessProofArg,
    participant: &Bloom,
    broadcast: &Bloom,
    m: Option<&WitnessMetadata>,
) -> Value {
    let mut args = json!({
        "proof": proof_json(p),
        "participant_bloom": hex_encode(&participant.to_bytes()),
        "broadcast_bloom": hex_encode(&broadcast.to_bytes()),
    });
    if let Some(m) = m {
        let v = Verdict::default();
        args["verdict"] = json!({"checked": v.checked, "mismatch": v.mismatch});
        args["metadata"] = metadata_json(m);
    }
    args
}

fn write_or_compare(name: &str, value: &Value) {
    let path = vectors_dir().join(name);
    let text = serde_json::to_string_pretty(value).unwrap() + "\n";
    if std::env::var("PSYCHE_WRITE_VECTORS").as_deref() == Ok("1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; generate the vectors with PSYCHE_WRITE_VECTORS=1 cargo test -p psyche-coordinator --test program_scenario",
            path.display()
        )
    });
    assert!(
        committed == text,
        "{} differs from what the programs produce now; if the change is intended, regenerate with \
         PSYCHE_WRITE_VECTORS=1 cargo test -p psyche-coordinator --test program_scenario and commit",
        path.display()
    );
}

/// Error name → code of both programs, from the committed IDL (so it covers every variant).
fn errors_table() -> Value {
    let mut table = serde_json::Map::new();
    for program in ["psyche_coordinator", "psyche_authorizer"] {
        let idl =
            common::read_json(&common::manifest_dir().join(format!("../../idl/{program}.json")));
        let mut errors = serde_json::Map::new();
        for e in idl["errors"].as_array().expect("IDL errors") {
            errors.insert(e["name"].as_str().unwrap().to_string(), e["code"].clone());
        }
        table.insert(program.to_string(), Value::Object(errors));
    }
    Value::Object(table)
}

#[tokio::test]
async fn whole_epoch_through_transactions() {
    let env = Env::new().await;
    let clients: Vec<Client> =
        (0..3).map(|i| Client::seeded(&format!("client-{i}"), 0xa0 + i as u8)).collect();
    let run = Run {
        run_id: "scenario".into(),
        instance: psyche_coordinator::CoordinatorInstance::find_pda("scenario").0,
        account: seeded_keypair(b"scenario/account").pubkey(),
        authority: seeded_keypair(b"scenario/authority"),
        join_authority: seeded_keypair(b"scenario/join_authority"),
    };
    let mut s =
        Scenario { env, run, clients, rec: Recorder { steps: vec![], snapshots: BTreeMap::new() } };
    let authority = s.run.authority.insecure_clone();
    let payer = s.env.payer();

    // 1. Create the run: allocate the zero-copy account and initialize it in one transaction.
    let account_key = seeded_keypair(b"scenario/account");
    let ixs = s.env.create_run_ixs(
        "scenario",
        &account_key,
        &authority.pubkey(),
        &s.run.join_authority.pubkey(),
    );
    let create_args = json!({
        "lamports": rent_exempt(CoordinatorAccount::SPACE),
        "space": CoordinatorAccount::SPACE,
        "owner": psyche_coordinator::ID.to_string(),
    });
    let init_args = json!({"params": {
        "main_authority": authority.pubkey().to_string(),
        "join_authority": s.run.join_authority.pubkey().to_string(),
        "run_id": "scenario",
        "client_version": "test",
        "local_run": false,
    }});
    s.step(
        "create run",
        vec![
            (ixs[0].clone(), "create_account", create_args),
            (ixs[1].clone(), "init_coordinator", init_args),
        ],
        &[&account_key],
        None,
    )
    .await;
    s.snapshot("01_initialized").await;
    assert_eq!(s.env.run_state(&s.run).await, RunState::Uninitialized);

    // 2. Configure: the tiny config and model.
    let (config, model) = (tiny_config(), tiny_model());
    let ix = ix_update(&s.run, &authority.pubkey(), None, Some(config), Some(model.clone()), None);
    let args = json!({"metadata": null, "config": config_to_json(&config), "model": model_to_json(&model), "progress": null});
    s.step("configure", vec![(ix, "update", args)], &[&authority], None).await;

    // 3. Points for the coming epochs.
    let ix = ix_set_future_epoch_rates(
        &s.run,
        &authority.pubkey(),
        Some(EARNING_RATE),
        Some(SLASHING_RATE),
    );
    let args = json!({"earning_rate_total_shared": EARNING_RATE, "slashing_rate_per_client": SLASHING_RATE});
    s.step(
        "set future epoch rates",
        vec![(ix, "set_future_epoch_rates", args)],
        &[&authority],
        None,
    )
    .await;

    // 4. A permissionless join authorization from the join authority.
    let join_authority = s.run.join_authority.insecure_clone();
    let scope = psyche_coordinator::constants::JOIN_RUN_AUTHORIZATION_SCOPE;
    let (authorization, _) = psyche_authorizer::Authorization::find_pda(
        &join_authority.pubkey(),
        &Pubkey::default(),
        scope,
    );
    let create = {
        use anchor_lang::{InstructionData, ToAccountMetas};
        Instruction {
            program_id: psyche_authorizer::ID,
            accounts: psyche_authorizer::accounts::AuthorizationCreate {
                payer: payer.pubkey(),
                grantor: join_authority.pubkey(),
                authorization,
                system_program: anchor_lang::system_program::ID,
            }
            .to_account_metas(None),
            data: psyche_authorizer::instruction::AuthorizationCreate {
                params: psyche_authorizer::AuthorizationCreateParams {
                    grantee: Pubkey::default(),
                    scope: scope.to_vec(),
                },
            }
            .data(),
        }
    };
    let activate = ix_grantor_update(&join_authority, authorization, true);
    s.step(
        "permissionless join authorization",
        vec![
            (create, "authorization_create", json!({"params": {"grantee": Pubkey::default().to_string(), "scope": hex_encode(scope)}})),
            (activate, "authorization_grantor_update", json!({"params": {"active": true}})),
        ],
        &[&join_authority],
        None,
    )
    .await;

    // 5. Unpause: Uninitialized → WaitingForMembers (step 1).
    let ix = ix_set_paused(&s.run, false);
    s.step("resume", vec![(ix, "set_paused", json!({"paused": false}))], &[&authority], None).await;
    s.snapshot("02_waiting_for_members").await;
    assert_eq!(s.env.run_state(&s.run).await, RunState::WaitingForMembers);

    // 6. Three clients join (the third join's tick cannot start the epoch yet: the
    //    waiting_for_members_extra_time second has not passed).
    for i in 0..3 {
        let c = &s.clients[i];
        let ix = ix_join_run(&s.run, &c.wallet.pubkey(), authorization, c.id());
        let args = json!({"params": {"client_id": identity_to_json(&c.id())}});
        let wallet = c.wallet.insecure_clone();
        s.step(&format!("join client {i}"), vec![(ix, "join_run", args)], &[&wallet], None).await;
    }
    assert_eq!(s.env.run_state(&s.run).await, RunState::WaitingForMembers);

    // 7. One second later a tick starts the epoch: Warmup with the three pending clients, and
    //    this epoch's rates are fixed.
    s.warp(1).await;
    s.tick("tick: WaitingForMembers → Warmup").await;
    s.snapshot("03_warmup").await;
    let account = s.state().await;
    assert_eq!(account.state.run_state(), RunState::Warmup);
    assert_eq!(account.state.coordinator.epoch_state.clients().len(), 3);
    assert_eq!(
        account.state.clients_state.current_epoch_rates.earning_rate_total_shared,
        EARNING_RATE
    );

    // 8. Warmup witnesses: after witness_nodes (2) of them training starts, and the join
    //    generation moves on (everyone must join again for the next epoch).
    let next_active_before = account.state.clients_state.next_active;
    for i in 0..2 {
        let index = Scenario::client_index(&account.state.coordinator, &s.clients[i]);
        let proof = warmup_proof(index);
        let (pb, bb) = (Bloom::empty(0), Bloom::empty(0));
        let user = s.clients[i].wallet.pubkey();
        let ix = ix_warmup_witness(&s.run, &user, proof, pb, bb);
        let args = witness_args(&proof, &pb, &bb, None);
        let wallet = s.clients[i].wallet.insecure_clone();
        s.step(
            &format!("warmup witness from client {i}"),
            vec![(ix, "warmup_witness", args)],
            &[&wallet],
            None,
        )
        .await;
    }
    s.snapshot("04_round_train").await;
    let account = s.state().await;
    assert_eq!(account.state.run_state(), RunState::RoundTrain);
    assert_eq!(account.state.clients_state.next_active, next_active_before + 1);

    // 9. Round 0: the elected witnesses report; the second one ends RoundTrain at once.
    s.witness_round("round 0").await;
    assert_eq!(s.env.run_state(&s.run).await, RunState::RoundWitness);

    // A second witness from the same client is refused.
    let account = s.state().await;
    let coordinator = &account.state.coordinator;
    let first = coordinator.current_round().witnesses()[0];
    let sender = s
        .clients
        .iter()
        .position(|c| Scenario::client_index(coordinator, c) == first.proof.index)
        .unwrap();
    let proof =
        WitnessProofArg { position: first.proof.position, index: first.proof.index, witness: true };
    let user = s.clients[sender].wallet.pubkey();
    let ix = ix_witness(
        &s.run,
        &user,
        proof,
        first.participant_bloom,
        first.broadcast_bloom,
        empty_metadata(),
    );
    let args = witness_args(
        &proof,
        &first.participant_bloom,
        &first.broadcast_bloom,
        Some(&empty_metadata()),
    );
    let wallet = s.clients[sender].wallet.insecure_clone();
    s.step("duplicate witness", vec![(ix, "witness", args)], &[&wallet], Some(E::DuplicateWitness))
        .await;

    // 10. Rounds 1 and 2 (the RoundWitness phase lasts round_witness_time = 1 s).
    s.warp(1).await;
    s.tick("tick: round 0 witness timeout → round 1").await;
    s.witness_round("round 1").await;
    s.warp(1).await;
    s.tick("tick: round 1 witness timeout → round 2").await;
    let account = s.state().await;
    assert_eq!(account.state.coordinator.current_round().height, 2);
    assert_eq!(account.state.coordinator.progress.step, 3);

    // 11. A health check against a healthy client is refused (everyone was seen).
    let coordinator = &account.state.coordinator;
    let prev = coordinator.previous_round().unwrap();
    let sel = coordinator.committee_selection(prev).unwrap();
    let accused = Scenario::client_index(coordinator, &s.clients[1]);
    let proof = sel.get_committee(accused).unwrap();
    assert_eq!(proof.committee, Committee::Trainer);
    let check = HealthCheck { id: s.clients[1].id(), proof };
    let user = s.clients[0].wallet.pubkey();
    let ix = ix_health_check(&s.run, &user, vec![check]);
    let args = json!({"checks": [{"id": identity_to_json(&check.id), "proof": {"committee": "Trainer", "position": proof.position, "index": proof.index}}]});
    let wallet = s.clients[0].wallet.insecure_clone();
    s.step(
        "health check of a healthy client",
        vec![(ix, "health_check", args)],
        &[&wallet],
        Some(E::InvalidHealthCheck),
    )
    .await;

    // 12. The epoch times out (epoch_time = 240 s): the witness timeout of round 2 sets
    //     last_step = step + 2; two drain rounds follow, then Cooldown.
    s.witness_round("round 2").await;
    s.warp(240).await;
    s.tick("tick: round 2 witness timeout after the epoch time → drain round 3").await;
    let account = s.state().await;
    assert_eq!(account.state.coordinator.epoch_state.last_step, 6);
    s.witness_round("round 3").await;
    s.warp(1).await;
    s.tick("tick: → drain round 4").await;
    s.witness_round("round 4").await;
    s.warp(1).await;
    s.tick("tick: last step reached → Cooldown").await;
    s.snapshot("05_cooldown").await;
    let account = s.state().await;
    assert_eq!(account.state.run_state(), RunState::Cooldown);

    // 13. Checkpoint: refused from a client that is not an elected checkpointer, accepted from
    //     the elected one, which ends Cooldown at once (EpochEnd(true)): points are credited.
    let coordinator = &account.state.coordinator;
    let elected = coordinator.checkpointer_indices();
    assert_eq!(elected.len(), 1);
    let repo = Checkpoint::Hub(HubRepo {
        repo_id: "runs/tiny/model".into(),
        revision: Some("rev-1".into()),
    });
    let not_elected = s
        .clients
        .iter()
        .position(|c| Scenario::client_index(coordinator, c) != elected[0])
        .unwrap();
    let is_elected = s
        .clients
        .iter()
        .position(|c| Scenario::client_index(coordinator, c) == elected[0])
        .unwrap();
    for (i, expect) in [(not_elected, Some(E::InvalidCheckpoint)), (is_elected, None)] {
        let user = s.clients[i].wallet.pubkey();
        let ix = ix_checkpoint(&s.run, &user, repo.clone());
        let args = json!({"checkpoint": checkpoint_to_json(&repo)});
        let wallet = s.clients[i].wallet.insecure_clone();
        let label = if expect.is_some() {
            "checkpoint from a non-elected client"
        } else {
            "checkpoint from the elected checkpointer"
        };
        s.step(label, vec![(ix, "checkpoint", args)], &[&wallet], expect).await;
    }
    s.snapshot("06_epoch_end").await;
    let account = s.state().await;
    assert_eq!(account.state.run_state(), RunState::WaitingForMembers);
    assert_eq!(account.state.coordinator.progress.epoch, 1);
    for c in account.state.clients_state.clients() {
        assert_eq!(c.earned, EARNING_RATE / 3, "every healthy client shares the epoch's points");
        assert_eq!(c.slashed, 0);
    }
    // The checkpoint moved to P2P with the reported revision.
    let stored = account.state.coordinator.model.load().unwrap();
    assert_eq!(
        stored.llm().checkpoint,
        Checkpoint::P2P(HubRepo {
            repo_id: "runs/tiny/model".into(),
            revision: Some("rev-1".into())
        })
    );
    // Nobody joined for the next epoch yet: a tick keeps waiting.
    s.warp(5).await;
    s.tick("tick: nobody rejoined yet").await;
    assert_eq!(s.env.run_state(&s.run).await, RunState::WaitingForMembers);

    // 14. Peer records: client 0 publishes two P2P addresses, is refused an address with a
    //     space, overwrites with one shorter address a second later (the old bytes stay after the
    //     borsh value), and closes the record.
    let mut peer_records = Vec::new();
    let wallet = s.clients[0].wallet.insecure_clone();
    let record = PeerRecord::find_pda(&s.run.instance, &wallet.pubkey()).0;
    // The publishing wallet pays the record's rent (the payer pays only fees): fund it, a setup
    // transfer that is not one of the recorded steps.
    s.env.fund(&wallet.pubkey()).await;
    let published = [
        "/ip4/198.51.100.1/tcp/4001/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN",
        "/ip6/2001:db8::1/udp/4001/quic-v1",
    ];
    let steps: [(&str, &[&str], Option<E>); 3] = [
        ("client 0 publishes its P2P addresses", &published, None),
        (
            "an address with a space is refused",
            &["/ip4/198.51.100.1 /tcp/4001"],
            Some(E::PeerAddrNotPrintable),
        ),
        ("client 0 overwrites its P2P addresses", &["/ip4/198.51.100.2/tcp/1"], None),
    ];
    for (label, addrs, expect) in steps {
        let ix = ix_set_peer_addrs(s.run.instance, &wallet.pubkey(), addrs);
        let args = json!({"params": {"addrs": addrs}});
        s.step(label, vec![(ix, "set_peer_addrs", args)], &[&wallet], expect).await;
        if expect.is_none() {
            peer_records.push(peer_record_json(&mut s, record).await);
            s.warp(1).await;
        }
    }
    let ix = ix_close_peer_record(&wallet.pubkey(), record);
    s.step(
        "client 0 closes its peer record",
        vec![(ix, "close_peer_record", json!({}))],
        &[&wallet],
        None,
    )
    .await;
    assert!(s.env.account_data(record).await.is_none());

    // The vectors.
    let scenario = json!({
        "name": "whole_epoch",
        "description": "one epoch of the tiny run through the real runtime: create, configure, rates, join authorization, resume, 3 joins, warmup, rounds 0-2, epoch timeout, drain rounds 3-4, cooldown, checkpoint (EpochEnd(true), 200 points each), then client 0's peer record (publish, a refused address, overwrite, close); error steps included",
        "programs": {
            "psyche_coordinator": psyche_coordinator::ID.to_string(),
            "psyche_authorizer": psyche_authorizer::ID.to_string(),
        },
        "steps": s.rec.steps,
        "snapshots": s.rec.snapshots.keys().collect::<Vec<_>>(),
    });
    write_or_compare("whole_epoch.json", &scenario);
    for (name, snapshot) in &s.rec.snapshots {
        write_or_compare(&format!("accounts/{name}.json"), snapshot);
    }
    write_or_compare("errors.json", &errors_table());
    let peer_records = json!({
        "description": "the PeerRecord account after each accepted set_peer_addrs of whole_epoch.json (client 0), with the program's limits",
        "max_peer_addrs": MAX_PEER_ADDRS,
        "max_peer_addr_len": MAX_PEER_ADDR_LEN,
        "space": PeerRecord::SPACE,
        "rent": rent_exempt(PeerRecord::SPACE),
        "records": peer_records,
    });
    write_or_compare("peer_records.json", &peer_records);
}

/// The peer record at `address` as it is now: its fields and the whole account's bytes.
async fn peer_record_json(s: &mut Scenario, address: Pubkey) -> Value {
    let data = s.env.account_data(address).await.expect("peer record");
    let record = s.env.peer_record(address).await.unwrap();
    json!({
        "after_step": s.rec.steps.len() - 1,
        "address": address.to_string(),
        "size": data.len(),
        "discriminator": hex_encode(PeerRecord::DISCRIMINATOR),
        "coordinator_instance": record.coordinator_instance.to_string(),
        "signer": record.signer.to_string(),
        "bump": record.bump,
        "updated_at": record.updated_at,
        "updated_slot": record.updated_slot,
        "addrs": record.addrs,
        "data": hex_encode(&data),
    })
}
