//! Result verification through the real runtime (issue 25; docs/protocol.md, "Threat model and
//! result verification"): the `witness` instruction carries a verifier's verdict, the program
//! refuses one that breaks the rules, and a quorum of mismatches ejects the trainer, whose
//! epoch ends with nothing earned and its stake slashed. The rules themselves are replayed from
//! `tests/vectors/verification` (vectors_verification.rs); this file checks the instruction
//! path natively and on the SBF build (`PSYCHE_SBF=1`).

mod harness;

use harness::*;
use psyche_coordinator::core::verification::{sampled_trainer, VERIFIERS_PER_ROUND};
use psyche_coordinator::core::{
    Bloom, ClientState, CoordinatorState, RunState, Verdict, WitnessProofArg,
};
use psyche_coordinator::error::CoordinatorProgramError as E;
use solana_sdk::signature::Signer;

#[tokio::test]
async fn a_quorum_of_mismatch_verdicts_ejects_the_trainer_and_the_epoch_end_slashes_it() {
    let mut env = Env::new().await;
    let mut config = tiny_config();
    config.init_min_clients = 4;
    config.min_clients = 3;
    config.witness_nodes = 3;
    config.verification_percent = 100;
    let run = env.started_run_with("verdict", config).await;
    let rates = ix_set_future_epoch_rates(&run, &run.authority.pubkey(), Some(900), Some(40));
    env.send(rates, &[&run.authority]).await.unwrap();
    let cs: Vec<Client> = (0..4).map(Client::new).collect();
    env.start_training(&run, &cs).await;
    env.next_round(&run, &cs, &[]).await;

    // Round 1 judges round 0: every one of its 4 results is sampled (vp 100), by round 1's seed.
    let account = env.coordinator(&run).await;
    let coordinator = &account.state.coordinator;
    assert_eq!(coordinator.current_round().height, 1);
    assert_eq!(coordinator.previous_round().unwrap().clients_len, 4);
    let seed = coordinator.current_round().random_seed;
    let slot_of = |index: u64| (0..4).find(|&s| sampled_trainer(s, 4, seed, 100) == Some(index));
    let mut witnesses: Vec<(usize, WitnessProofArg)> = Vec::new();
    let mut target = None;
    for (i, c) in cs.iter().enumerate() {
        let index = coordinator.index_of(&c.id()).unwrap() as u64;
        match witness_proof(coordinator, index) {
            Some(proof) => witnesses.push((i, proof)),
            None => target = Some(i),
        }
    }
    assert_eq!(witnesses.len(), 3);
    assert!(witnesses.iter().all(|(_, p)| p.position < VERIFIERS_PER_ROUND), "all verify");
    let target = target.expect("one client is not a witness");
    let target_index = coordinator.index_of(&cs[target].id()).unwrap() as u64;
    let bit = 1u16 << slot_of(target_index).expect("every result is sampled");
    // Refused: a mismatch on a slot it did not check, and a verdict on its own result (the
    // blooms do not matter to the refusal).
    let (w, proof) = witnesses[0];
    let own = 1u16 << slot_of(proof.index).unwrap();
    for verdict in [Verdict { checked: 0, mismatch: bit }, Verdict { checked: own, mismatch: 0 }] {
        let user = cs[w].wallet.pubkey();
        let (b0, b1) = (Bloom::empty(0), Bloom::empty(0));
        let ix = ix_witness_with_verdict(&run, &user, proof, b0, b1, verdict, empty_metadata());
        assert_err(env.send(ix, &[&cs[w].wallet]).await, E::InvalidWitness);
    }

    // Every verifier recomputed the target's result and found it does not match.
    let mismatch =
        |_: &CoordinatorState, _: &WitnessProofArg| Verdict { checked: bit, mismatch: bit };
    for (ix, i) in env.witness_ixs_with(&run, &cs, &[], mismatch).await {
        env.send(ix, &[&cs[i].wallet]).await.unwrap();
    }
    let account = env.coordinator(&run).await;
    let stored = account.state.coordinator.current_round().witnesses();
    assert_eq!(stored.len(), 3);
    assert!(stored.iter().all(|w| w.proof.verdict == Verdict { checked: bit, mismatch: bit }));

    // The round's end acts on the verdicts: the target is ejected, nobody else.
    env.warp(1).await;
    env.tick(&run).await.unwrap();
    let account = env.coordinator(&run).await;
    for (i, c) in account.state.coordinator.epoch_state.clients().iter().enumerate() {
        let want =
            if c.id == cs[target].id() { ClientState::Ejected } else { ClientState::Healthy };
        assert_eq!(c.state, want as u8, "client {i}");
    }

    // Wind the epoch down (epoch timeout, two drain rounds, Cooldown): the target earns nothing
    // for the epoch and loses its stake; the honest clients are paid.
    let mut alive = cs;
    let cheater = alive.remove(target);
    env.witness_round(&run, &alive, &[&cheater]).await;
    env.warp(240).await;
    env.tick(&run).await.unwrap();
    env.next_round(&run, &alive, &[&cheater]).await;
    env.next_round(&run, &alive, &[&cheater]).await;
    assert_eq!(env.run_state(&run).await, RunState::Cooldown);
    env.warp(10).await;
    env.tick(&run).await.unwrap();
    let account = env.coordinator(&run).await;
    assert_eq!(account.state.run_state(), RunState::WaitingForMembers);
    for c in account.state.clients_state.clients() {
        if c.id == cheater.id() {
            assert_eq!((c.earned, c.slashed), (0, 40));
        } else {
            assert!(c.earned > 0 && c.slashed == 0, "{:?}: {} {}", c.id, c.earned, c.slashed);
        }
    }
}

/// The costliest verdict tick: every one of 16 sampled results rejected by the verifiers, so the
/// round's end finds 16 trainers and ejects them. On the SBF build it must stay within the
/// compute-unit limit a client requests for `tick` (`compute_units.json`) with the margin
/// program_costs.rs keeps; a tick over it would stall the run.
#[tokio::test]
async fn sixteen_rejected_results_fit_one_tick() {
    const CLIENTS: u8 = 20;
    let mut env = Env::new().await;
    let mut config = tiny_config();
    config.init_min_clients = u16::from(CLIENTS);
    config.min_clients = 3;
    config.witness_nodes = 3;
    config.verification_percent = 100;
    config.global_batch_size_start = 40;
    config.global_batch_size_end = 40;
    let run = env.started_run_with("verdicts16", config).await;
    let cs: Vec<Client> = (0..CLIENTS).map(Client::new).collect();
    env.start_training(&run, &cs).await;
    env.next_round(&run, &cs, &[]).await;

    let account = env.coordinator(&run).await;
    let coordinator = &account.state.coordinator;
    let n = u64::from(coordinator.previous_round().unwrap().clients_len);
    let seed = coordinator.current_round().random_seed;
    let sampled: Vec<u64> = (0..16).map(|s| sampled_trainer(s, n, seed, 100).unwrap()).collect();
    let clients = coordinator.epoch_state.clients();
    let ids: Vec<_> = sampled.iter().map(|&i| clients[i as usize].id).collect();
    let accuse = |_: &CoordinatorState, proof: &WitnessProofArg| {
        let mut bits = 0u16;
        for (slot, &index) in sampled.iter().enumerate() {
            if index != proof.index {
                bits |= 1 << slot;
            }
        }
        Verdict { checked: bits, mismatch: bits }
    };
    for (ix, i) in env.witness_ixs_with(&run, &cs, &[], accuse).await {
        let m = env.send_measured(ix, &[&cs[i].wallet], compute_limit("witness")).await;
        m.result.as_ref().expect("a verifier's witness with 15 or 16 slots checked");
        assert_within_limit("witness with a verdict on 16 slots", m.compute_units, "witness");
    }
    env.warp(1).await;
    let payer = env.payer();
    let m = env.send_measured(ix_tick(&run, &payer.pubkey()), &[], compute_limit("tick")).await;
    m.result.as_ref().expect("the tick that ejects 16 trainers");
    assert_within_limit("tick: 16 rejected results", m.compute_units, "tick");

    let account = env.coordinator(&run).await;
    let coordinator = &account.state.coordinator;
    // The 16 sampled trainers are out (ejected, and gone from the list once the round moved
    // on); the 4 others are healthy.
    let clients = coordinator.epoch_state.clients();
    assert_eq!(clients.len(), usize::from(CLIENTS) - 16);
    for c in clients {
        assert!(!ids.contains(&c.id) && c.state == ClientState::Healthy as u8);
    }
}

fn compute_limit(instruction: &str) -> u32 {
    let json: serde_json::Value =
        serde_json::from_str(include_str!("../../../client/psyche/solana/compute_units.json"))
            .unwrap();
    json["limits"][instruction].as_u64().unwrap() as u32
}

/// On the SBF build (the only one whose compute units mean anything), at most 80 % of the limit,
/// as program_costs.rs asserts for every instruction.
fn assert_within_limit(case: &str, used: u64, instruction: &str) {
    let limit = u64::from(compute_limit(instruction));
    println!("{case}: {used} CU of {limit}");
    if sbf_mode() {
        assert!(used * 10 <= limit * 8, "{case}: {used} CU of {limit}");
    }
}
