//! The client instructions of an epoch through the real runtime: `tick`, `warmup_witness`,
//! `witness`, `health_check`, `checkpoint`: happy paths, wrong senders, wrong phases, limits.

mod harness;

use harness::*;
use psyche_coordinator::constants::MAX_HEALTH_CHECKS_PER_INSTRUCTION;
use psyche_coordinator::core::model::{Checkpoint, HubRepo};
use psyche_coordinator::core::{
    Bloom, ClientState, EvalResult, HealthCheck, RunState, WitnessMetadata, WitnessProofArg,
};
use psyche_coordinator::error::CoordinatorProgramError as E;
use solana_sdk::signature::{Keypair, Signer};

fn clients(n: u8) -> Vec<Client> {
    (0..n).map(Client::new).collect()
}

#[tokio::test]
async fn tick_is_permissionless_and_refused_on_halted_runs() {
    let mut env = Env::new().await;
    let run = env.started_run("ticks").await;
    let anyone = Keypair::new();
    env.fund(&anyone.pubkey()).await;
    let nonce = env.coordinator(&run).await.nonce;
    env.send(ix_tick(&run, &anyone.pubkey()), &[&anyone]).await.unwrap();
    assert_eq!(env.coordinator(&run).await.nonce, nonce + 1);

    // Wrong run id: this run's instance with another run's account.
    let other = env.create_run("other").await;
    let mixed = Run {
        run_id: run.run_id.clone(),
        instance: run.instance,
        account: other.account,
        authority: run.authority.insecure_clone(),
        join_authority: run.join_authority.insecure_clone(),
    };
    assert_err(env.tick(&mixed).await, E::CoordinatorAccountMismatch);
    // Uninitialized and paused runs do not tick.
    assert_err(env.tick(&other).await, E::Halted);
    env.send(ix_set_paused(&run, true), &[&run.authority]).await.unwrap();
    assert_err(env.tick(&run).await, E::Halted);
}

#[tokio::test]
async fn warmup_witness_is_validated_and_starts_training() {
    let mut env = Env::new().await;
    let run = env.started_run("warmup").await;
    let cs = clients(3);
    env.start_warmup(&run, &cs).await;
    let account = env.coordinator(&run).await;
    let index = |c: &Client| account.state.coordinator.index_of(&c.id()).unwrap() as u64;
    let send = |c: &Client, i: u64| {
        ix_warmup_witness(
            &run,
            &c.wallet.pubkey(),
            warmup_proof(i),
            Bloom::empty(0),
            Bloom::empty(0),
        )
    };

    // Claiming another client's index is refused (the reference trusted it, letting a client
    // block another's witness), as is an index past the list.
    assert_err(env.send(send(&cs[0], index(&cs[1])), &[&cs[0].wallet]).await, E::InvalidWitness);
    assert_err(env.send(send(&cs[0], 999), &[&cs[0].wallet]).await, E::InvalidWitness);
    // A wallet that never joined.
    let stranger = Client::new(9);
    env.fund(&stranger.wallet.pubkey()).await;
    assert_err(env.send(send(&stranger, 0), &[&stranger.wallet]).await, E::SignerNotAClient);

    env.send(send(&cs[0], index(&cs[0])), &[&cs[0].wallet]).await.unwrap();
    assert_err(env.send(send(&cs[0], index(&cs[0])), &[&cs[0].wallet]).await, E::DuplicateWitness);
    env.send(send(&cs[1], index(&cs[1])), &[&cs[1].wallet]).await.unwrap();
    let account = env.coordinator(&run).await;
    assert_eq!(account.state.run_state(), RunState::RoundTrain);
    // Training started: the join generation moved on.
    assert_eq!(account.state.clients_state.pending().count(), 0);
}

#[tokio::test]
async fn witness_checks_sender_proof_phase_and_metadata() {
    let mut env = Env::new().await;
    let run = env.started_run("witness").await;
    let cs = clients(3);

    // Before any epoch: wrong phase.
    env.join(&run, &cs[0]).await.unwrap();
    let proof = WitnessProofArg { position: 0, index: 0, witness: true };
    let ix = ix_witness(
        &run,
        &cs[0].wallet.pubkey(),
        proof,
        Bloom::empty(0),
        Bloom::empty(0),
        empty_metadata(),
    );
    assert_err(env.send(ix, &[&cs[0].wallet]).await, E::InvalidRunState);

    env.start_training(&run, &cs).await;
    let account = env.coordinator(&run).await;
    let coordinator = &account.state.coordinator;
    let elected: Vec<usize> = (0..3)
        .filter(|&i| {
            witness_proof(coordinator, coordinator.index_of(&cs[i].id()).unwrap() as u64).is_some()
        })
        .collect();
    let idle = (0..3).find(|i| !elected.contains(i)).unwrap();
    let w = elected[0];
    let proof =
        witness_proof(coordinator, coordinator.index_of(&cs[w].id()).unwrap() as u64).unwrap();

    // A client that is not elected, or one using another's proof.
    let idle_index = coordinator.index_of(&cs[idle].id()).unwrap() as u64;
    let fake = WitnessProofArg { position: 0, index: idle_index, witness: true };
    let ix = ix_witness(
        &run,
        &cs[idle].wallet.pubkey(),
        fake,
        Bloom::empty(0),
        Bloom::empty(0),
        empty_metadata(),
    );
    assert_err(env.send(ix, &[&cs[idle].wallet]).await, E::InvalidWitness);
    let ix = ix_witness(
        &run,
        &cs[idle].wallet.pubkey(),
        proof,
        Bloom::empty(0),
        Bloom::empty(0),
        empty_metadata(),
    );
    assert_err(env.send(ix, &[&cs[idle].wallet]).await, E::InvalidWitness);

    // Nine evals are one too many.
    let mut metadata = empty_metadata();
    metadata.evals = (0..9).map(|task| EvalResult { task, value: 1.0 }).collect();
    let ix =
        ix_witness(&run, &cs[w].wallet.pubkey(), proof, Bloom::empty(0), Bloom::empty(0), metadata);
    assert_err(env.send(ix, &[&cs[w].wallet]).await, E::WitnessMetadataInvalid);

    // The elected witness, once.
    let metadata =
        WitnessMetadata { evals: vec![EvalResult { task: 1, value: 0.5 }], ..empty_metadata() };
    let ix = ix_witness(
        &run,
        &cs[w].wallet.pubkey(),
        proof,
        Bloom::empty(1),
        Bloom::empty(2),
        metadata.clone(),
    );
    env.send(ix, &[&cs[w].wallet]).await.unwrap();
    let ix =
        ix_witness(&run, &cs[w].wallet.pubkey(), proof, Bloom::empty(1), Bloom::empty(2), metadata);
    assert_err(env.send(ix, &[&cs[w].wallet]).await, E::DuplicateWitness);
    let account = env.coordinator(&run).await;
    assert_eq!(account.state.coordinator.current_round().witnesses().len(), 1);

    // Paused (pending) and then halted: the run winds down, witnesses are refused once Paused.
    env.send(ix_set_paused(&run, true), &[&run.authority]).await.unwrap();
    assert!(env.coordinator(&run).await.state.coordinator.pending_pause());
}

#[tokio::test]
async fn health_check_ejects_a_silent_client_and_the_epoch_end_slashes_it() {
    let mut env = Env::new().await;
    let run = env.started_run("health").await;
    let rates = ix_set_future_epoch_rates(&run, &run.authority.pubkey(), Some(900), Some(40));
    env.send(rates, &[&run.authority]).await.unwrap();
    let cs = clients(4);
    let mut config = tiny_config();
    config.init_min_clients = 4;
    env.send(ix_set_paused(&run, true), &[&run.authority]).await.unwrap();
    let ix = ix_update(&run, &run.authority.pubkey(), None, Some(config), None, None);
    env.send(ix, &[&run.authority]).await.unwrap();
    env.send(ix_set_paused(&run, false), &[&run.authority]).await.unwrap();
    env.start_training(&run, &cs).await;

    // Client 3's results never reach the witnesses of rounds 0 and 1.
    let silent = &cs[3];
    env.next_round(&run, &cs, &[silent]).await;
    env.next_round(&run, &cs, &[silent]).await;
    let account = env.coordinator(&run).await;
    let coordinator = &account.state.coordinator;
    assert_eq!(coordinator.current_round().height, 2);
    let prev = coordinator.previous_round().unwrap();
    let sel = coordinator.committee_selection(prev).unwrap();
    let proof_of =
        |c: &Client| sel.get_committee(coordinator.index_of(&c.id()).unwrap() as u64).unwrap();
    let reporter = &cs[0];

    // Limits and senders.
    let check = HealthCheck { id: silent.id(), proof: proof_of(silent) };
    let ix = ix_health_check(
        &run,
        &reporter.wallet.pubkey(),
        vec![check; MAX_HEALTH_CHECKS_PER_INSTRUCTION + 1],
    );
    assert_err(env.send(ix, &[&reporter.wallet]).await, E::HealthCheckCountInvalid);
    let ix = ix_health_check(&run, &reporter.wallet.pubkey(), vec![]);
    assert_err(env.send(ix, &[&reporter.wallet]).await, E::InvalidHealthCheck);
    let stranger = Client::new(9);
    env.fund(&stranger.wallet.pubkey()).await;
    let ix = ix_health_check(&run, &stranger.wallet.pubkey(), vec![check]);
    assert_err(env.send(ix, &[&stranger.wallet]).await, E::SignerNotAClient);
    // A healthy client in the report fails the whole report.
    let healthy = HealthCheck { id: cs[1].id(), proof: proof_of(&cs[1]) };
    let ix = ix_health_check(&run, &reporter.wallet.pubkey(), vec![check, healthy]);
    assert_err(env.send(ix, &[&reporter.wallet]).await, E::InvalidHealthCheck);
    // A wrong proof.
    let mut wrong = check;
    wrong.proof.position = wrong.proof.position.wrapping_add(1);
    let ix = ix_health_check(&run, &reporter.wallet.pubkey(), vec![wrong]);
    assert_err(env.send(ix, &[&reporter.wallet]).await, E::InvalidCommitteeProof);

    // The report holds: the silent client is ejected.
    let ix = ix_health_check(&run, &reporter.wallet.pubkey(), vec![check]);
    env.send(ix, &[&reporter.wallet]).await.unwrap();
    let account = env.coordinator(&run).await;
    let index = account.state.coordinator.index_of(&silent.id()).unwrap();
    assert_eq!(
        account.state.coordinator.epoch_state.clients()[index].state,
        ClientState::Ejected as u8
    );

    // Wind the epoch down (epoch timeout, two drain rounds), then let Cooldown time out.
    let alive = &cs[..3];
    env.witness_round(&run, alive, &[silent]).await;
    env.warp(240).await;
    env.tick(&run).await.unwrap();
    let account = env.coordinator(&run).await;
    assert!(account.state.coordinator.index_of(&silent.id()).is_none(), "ejected clients leave");
    env.next_round(&run, alive, &[silent]).await;
    env.next_round(&run, alive, &[silent]).await;
    assert_eq!(env.run_state(&run).await, RunState::Cooldown);
    env.warp(10).await;
    env.tick(&run).await.unwrap();
    let account = env.coordinator(&run).await;
    assert_eq!(account.state.run_state(), RunState::WaitingForMembers);
    for c in account.state.clients_state.clients() {
        if c.id == silent.id() {
            assert_eq!((c.earned, c.slashed), (0, 40));
        } else {
            assert_eq!((c.earned, c.slashed), (300, 0));
        }
    }
}

#[tokio::test]
async fn checkpoint_only_from_the_cooling_epochs_elected_clients() {
    let mut env = Env::new().await;
    let run = env.started_run("checkpoints").await;
    let cs = clients(3);
    env.start_training(&run, &cs).await;
    let repo =
        Checkpoint::Hub(HubRepo { repo_id: "org/model".into(), revision: Some("abc".into()) });

    // Training: wrong phase.
    let ix = ix_checkpoint(&run, &cs[0].wallet.pubkey(), repo.clone());
    assert_err(env.send(ix, &[&cs[0].wallet]).await, E::InvalidRunState);
    // A registered wallet that is not in the epoch (it joined for the next one).
    let late = Client::new(7);
    env.join(&run, &late).await.unwrap();
    let ix = ix_checkpoint(&run, &late.wallet.pubkey(), repo.clone());
    assert_err(env.send(ix, &[&late.wallet]).await, E::SignerNotAClient);

    // A round with no witnesses ends the epoch at once: Cooldown.
    env.warp(30).await;
    env.tick(&run).await.unwrap();
    env.warp(1).await;
    env.tick(&run).await.unwrap();
    assert_eq!(env.run_state(&run).await, RunState::Cooldown);
    // Everyone was withdrawn (no witnesses): nobody may checkpoint; Cooldown times out.
    let account = env.coordinator(&run).await;
    let coordinator = &account.state.coordinator;
    let elected = coordinator.checkpointer_indices();
    let c = cs.iter().find(|c| coordinator.index_of(&c.id()) == Some(elected[0] as usize)).unwrap();
    let ix = ix_checkpoint(&run, &c.wallet.pubkey(), repo.clone());
    assert_err(env.send(ix, &[&c.wallet]).await, E::InvalidCommitteeProof);
    env.warp(10).await;
    env.tick(&run).await.unwrap();
    assert_eq!(env.run_state(&run).await, RunState::WaitingForMembers);
}
