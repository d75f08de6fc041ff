//! The run owner's instructions through the real runtime: `init_coordinator`, `update`,
//! `update_client_version`, `set_future_epoch_rates`, `set_paused`, `free_coordinator`.

mod harness;

use anchor_lang::error::ErrorCode as AnchorError;
use harness::*;
use psyche_coordinator::core::model::{Checkpoint, OptimizerDefinition};
use psyche_coordinator::core::{FixedString280, FixedString64, Progress, RunMetadata, RunState};
use psyche_coordinator::error::CoordinatorProgramError as E;
use psyche_coordinator::{CoordinatorAccount, CoordinatorInstance, InitCoordinatorParams};
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::{Keypair, Signer};

fn metadata(name: &str) -> RunMetadata {
    RunMetadata {
        name: FixedString64::new(name).unwrap(),
        description: FixedString280::new("a tiny run").unwrap(),
        num_parameters: 12_345,
        vocab_size: 256,
    }
}

#[tokio::test]
async fn init_coordinator_creates_an_uninitialized_run() {
    let mut env = Env::new().await;
    let run = env.create_run("run-a").await;
    let instance = env.instance(&run).await.unwrap();
    assert_eq!(instance.run_id, "run-a");
    assert_eq!(instance.main_authority, run.authority.pubkey());
    assert_eq!(instance.join_authority, run.join_authority.pubkey());
    assert_eq!(instance.coordinator_account, run.account);
    assert_eq!(instance.bump, CoordinatorInstance::find_pda("run-a").1);

    let account = env.coordinator(&run).await;
    assert_eq!(account.version, 2); // layout v2: Round.retries and EpochState.lost
    assert_eq!(account.nonce, 0);
    assert_eq!(account.state.coordinator.run_id.as_str(), Some("run-a"));
    assert_eq!(account.state.client_version.as_str(), Some("test"));
    assert_eq!(account.state.run_state(), RunState::Uninitialized);
}

#[tokio::test]
async fn init_coordinator_validates_run_id_version_size_and_reuse() {
    let mut env = Env::new().await;
    let payer = env.payer().pubkey();
    let main = Pubkey::new_unique();

    // Run ids: empty, 33 bytes (the PDA cannot even be derived: use a placeholder address).
    for run_id in ["", &"x".repeat(33)] {
        let account = Keypair::new();
        let mut ixs = env.create_run_ixs("placeholder", &account, &main, &main);
        ixs[1] = ix_init_coordinator(
            &payer,
            Pubkey::new_unique(),
            account.pubkey(),
            InitCoordinatorParams {
                main_authority: main,
                join_authority: main,
                run_id: run_id.to_string(),
                client_version: "test".into(),
                local_run: false,
            },
        );
        assert_eq!(
            custom_code_at(env.send_many(&ixs, &[&account]).await, 2),
            code(E::RunIdInvalidLength)
        );
    }

    // A client version over 96 bytes.
    let account = Keypair::new();
    let mut ixs = env.create_run_ixs("long-version", &account, &main, &main);
    ixs[1] = ix_init_coordinator(
        &payer,
        CoordinatorInstance::find_pda("long-version").0,
        account.pubkey(),
        InitCoordinatorParams {
            main_authority: main,
            join_authority: main,
            run_id: "long-version".into(),
            client_version: "v".repeat(97),
            local_run: false,
        },
    );
    assert_eq!(
        custom_code_at(env.send_many(&ixs, &[&account]).await, 2),
        code(E::ClientVersionInvalid)
    );

    // An account one byte short.
    let account = Keypair::new();
    let mut ixs = env.create_run_ixs("short", &account, &main, &main);
    ixs[0] = anchor_lang::solana_program::system_instruction::create_account(
        &payer,
        &account.pubkey(),
        rent_exempt(CoordinatorAccount::SPACE),
        (CoordinatorAccount::SPACE - 1) as u64,
        &psyche_coordinator::ID,
    );
    assert_eq!(
        custom_code_at(env.send_many(&ixs, &[&account]).await, 2),
        code(E::CoordinatorAccountIncorrectSize)
    );

    // The same run id twice: the instance PDA exists already.
    let run = env.create_run("twice").await;
    let account = Keypair::new();
    let ixs = env.create_run_ixs("twice", &account, &main, &main);
    assert!(env.send_many(&ixs, &[&account]).await.is_err());

    // An initialized account cannot be initialized again for another run.
    let ix = ix_init_coordinator(
        &payer,
        CoordinatorInstance::find_pda("other").0,
        run.account,
        InitCoordinatorParams {
            main_authority: main,
            join_authority: main,
            run_id: "other".into(),
            client_version: "test".into(),
            local_run: false,
        },
    );
    assert_eq!(custom_code(env.send(ix, &[]).await), anchor_code(AnchorError::ConstraintZero));
}

#[tokio::test]
async fn update_by_the_owner_only_and_for_this_run_only() {
    let mut env = Env::new().await;
    let run = env.create_run("owned").await;
    let other = env.create_run("other").await;
    let stranger = Keypair::new();

    // Wrong signer: not the main authority.
    let ix = ix_update(&run, &stranger.pubkey(), Some(metadata("x")), None, None, None);
    assert_err(env.send(ix, &[&stranger]).await, E::NotMainAuthority);
    // Another run's authority.
    let ix = ix_update(&run, &other.authority.pubkey(), Some(metadata("x")), None, None, None);
    assert_err(env.send(ix, &[&other.authority]).await, E::NotMainAuthority);
    // The authority's key without its signature.
    let mut ix = ix_update(&run, &run.authority.pubkey(), Some(metadata("x")), None, None, None);
    ix.accounts[0].is_signer = false;
    assert_eq!(custom_code(env.send(ix, &[]).await), anchor_code(AnchorError::AccountNotSigner));
    // Wrong run id: this run's instance with the other run's account.
    let mixed = Run {
        run_id: run.run_id.clone(),
        instance: run.instance,
        account: other.account,
        authority: run.authority.insecure_clone(),
        join_authority: run.join_authority.insecure_clone(),
    };
    let ix = ix_update(&mixed, &run.authority.pubkey(), Some(metadata("x")), None, None, None);
    assert_err(env.send(ix, &[&run.authority]).await, E::CoordinatorAccountMismatch);
    assert_eq!(env.coordinator(&run).await.nonce, 0);

    // The owner: metadata, config, model, progress; the nonce moves.
    let ix = ix_update(
        &run,
        &run.authority.pubkey(),
        Some(metadata("tiny")),
        Some(tiny_config()),
        Some(tiny_model()),
        Some(Progress::new(0, 1, 0)),
    );
    env.send(ix, &[&run.authority]).await.unwrap();
    let account = env.coordinator(&run).await;
    assert_eq!(account.nonce, 1);
    assert_eq!(account.state.metadata, metadata("tiny"));
    assert_eq!(account.state.coordinator.config, tiny_config());
    assert_eq!(account.state.coordinator.model.load(), Some(tiny_model()));
    assert_eq!(account.state.coordinator.progress, Progress::new(0, 1, 0));
}

#[tokio::test]
async fn update_checks_config_model_progress_and_run_state() {
    let mut env = Env::new().await;
    let run = env.create_run("checks").await;
    let send_update = |config, model, progress| {
        ix_update(&run, &run.authority.pubkey(), None, config, model, progress)
    };

    let mut bad_config = tiny_config();
    bad_config.epoch_time = 0;
    assert_err(
        env.send(send_update(Some(bad_config), None, None), &[&run.authority]).await,
        E::ConfigSanityCheckFailed,
    );

    let mut bad_model = tiny_model();
    bad_model.llm_mut().checkpoint = Checkpoint::Ephemeral;
    assert_err(
        env.send(send_update(None, Some(bad_model), None), &[&run.authority]).await,
        E::ModelSanityCheckFailed,
    );
    let mut bad_model = tiny_model();
    bad_model.llm_mut().optimizer = OptimizerDefinition::Dummy;
    assert_err(
        env.send(send_update(None, Some(bad_model), None), &[&run.authority]).await,
        E::ModelSanityCheckFailed,
    );

    // Cold-start warmup steps must fit the epoch: (240 - 60) / 30 = 6 rounds at most.
    let mut long_cold_start = tiny_model();
    long_cold_start.llm_mut().cold_start_warmup_steps = 7;
    let ix = send_update(Some(tiny_config()), Some(long_cold_start), None);
    assert_err(env.send(ix, &[&run.authority]).await, E::ModelSanityCheckFailed);

    // Progress: step 0 has its own error (the reference reported a model error).
    let ix = send_update(None, None, Some(Progress::new(0, 0, 0)));
    assert_err(env.send(ix, &[&run.authority]).await, E::ProgressSanityCheckFailed);
    assert_eq!(env.coordinator(&run).await.nonce, 0, "rejected updates change nothing");

    // Running: config, model and progress are frozen, metadata is not.
    env.configure(&run, tiny_config(), tiny_model()).await;
    env.send(ix_set_paused(&run, false), &[&run.authority]).await.unwrap();
    assert_err(
        env.send(send_update(Some(tiny_config()), None, None), &[&run.authority]).await,
        E::UpdateConfigNotHalted,
    );
    assert_err(
        env.send(send_update(None, Some(tiny_model()), None), &[&run.authority]).await,
        E::UpdateConfigNotHalted,
    );
    let ix = send_update(None, None, Some(Progress::new(0, 1, 0)));
    assert_err(env.send(ix, &[&run.authority]).await, E::UpdateConfigNotHalted);
    let ix = ix_update(&run, &run.authority.pubkey(), Some(metadata("renamed")), None, None, None);
    env.send(ix, &[&run.authority]).await.unwrap();
    assert_eq!(env.coordinator(&run).await.state.metadata, metadata("renamed"));
}

#[tokio::test]
async fn a_finished_run_refuses_updates_ticks_and_joins_but_can_be_freed() {
    let mut env = Env::new().await;
    let run = env.create_run("finished").await;
    // total_steps = 1 with progress step 1: resuming finishes the run at once.
    let mut config = tiny_config();
    config.total_steps = 1;
    env.configure(&run, config, tiny_model()).await;
    env.send(ix_set_paused(&run, false), &[&run.authority]).await.unwrap();
    assert_eq!(env.run_state(&run).await, RunState::Finished);

    let ix = ix_update(&run, &run.authority.pubkey(), Some(metadata("late")), None, None, None);
    assert_err(env.send(ix, &[&run.authority]).await, E::UpdateConfigFinished);
    assert_err(env.tick(&run).await, E::Halted);
    env.permissionless_authorization(&run).await;
    assert_err(env.join(&run, &Client::new(1)).await, E::Halted);
    assert_err(env.send(ix_set_paused(&run, false), &[&run.authority]).await, E::CannotResume);
    assert_err(env.send(ix_set_paused(&run, true), &[&run.authority]).await, E::Halted);

    let spill = Pubkey::new_unique();
    env.send(ix_free_coordinator(&run, &run.authority.pubkey(), &spill), &[&run.authority])
        .await
        .unwrap();
    assert!(env.account_data(run.account).await.is_none());
    assert!(env.instance(&run).await.is_none());
}

#[tokio::test]
async fn update_client_version_needs_a_halted_run_and_bumps_the_nonce() {
    let mut env = Env::new().await;
    let run = env.create_run("versions").await;
    let stranger = Keypair::new();

    let ix = ix_update_client_version(&run, &stranger.pubkey(), "v2");
    assert_err(env.send(ix, &[&stranger]).await, E::NotMainAuthority);
    let ix = ix_update_client_version(&run, &run.authority.pubkey(), &"v".repeat(97));
    assert_err(env.send(ix, &[&run.authority]).await, E::ClientVersionInvalid);

    env.send(ix_update_client_version(&run, &run.authority.pubkey(), "v2"), &[&run.authority])
        .await
        .unwrap();
    let account = env.coordinator(&run).await;
    assert_eq!(account.state.client_version.as_str(), Some("v2"));
    // Unlike the reference, subscribers see the change.
    assert_eq!(account.nonce, 1);

    env.configure(&run, tiny_config(), tiny_model()).await;
    env.send(ix_set_paused(&run, false), &[&run.authority]).await.unwrap();
    let ix = ix_update_client_version(&run, &run.authority.pubkey(), "v3");
    assert_err(env.send(ix, &[&run.authority]).await, E::UpdateConfigNotHalted);
}

#[tokio::test]
async fn set_future_epoch_rates_by_the_owner() {
    let mut env = Env::new().await;
    let run = env.create_run("rates").await;
    let stranger = Keypair::new();
    let ix = ix_set_future_epoch_rates(&run, &stranger.pubkey(), Some(1), Some(2));
    assert_err(env.send(ix, &[&stranger]).await, E::NotMainAuthority);

    let ix = ix_set_future_epoch_rates(&run, &run.authority.pubkey(), Some(100), Some(7));
    env.send(ix, &[&run.authority]).await.unwrap();
    let ix = ix_set_future_epoch_rates(&run, &run.authority.pubkey(), None, Some(9));
    env.send(ix, &[&run.authority]).await.unwrap();
    let account = env.coordinator(&run).await;
    let rates = account.state.clients_state.future_epoch_rates;
    assert_eq!((rates.earning_rate_total_shared, rates.slashing_rate_per_client), (100, 9));
    assert_eq!(account.state.clients_state.current_epoch_rates.earning_rate_total_shared, 0);
    assert_eq!(account.nonce, 2);
}

/// Issue 26, finding 7: a rate that could overflow the ledger (every later epoch end would fail)
/// is refused when it is set; the bound itself is accepted.
#[tokio::test]
async fn epoch_rates_above_the_bound_are_refused() {
    use psyche_coordinator::constants::MAX_EPOCH_RATE;
    let mut env = Env::new().await;
    let run = env.create_run("rates-bound").await;
    let owner = run.authority.pubkey();
    for (earning, slashing) in [(Some(u64::MAX), None), (None, Some(MAX_EPOCH_RATE + 1))] {
        let ix = ix_set_future_epoch_rates(&run, &owner, earning, slashing);
        assert_err(env.send(ix, &[&run.authority]).await, E::EpochRateTooLarge);
    }
    let ix = ix_set_future_epoch_rates(&run, &owner, Some(MAX_EPOCH_RATE), Some(MAX_EPOCH_RATE));
    env.send(ix, &[&run.authority]).await.unwrap();
    let rates = env.coordinator(&run).await.state.clients_state.future_epoch_rates;
    assert_eq!(rates.earning_rate_total_shared, MAX_EPOCH_RATE);
}

#[tokio::test]
async fn set_paused_checks_and_transitions() {
    let mut env = Env::new().await;
    let run = env.create_run("pausing").await;
    let stranger = Keypair::new();

    // Nothing configured: the zero config fails its check; with a config but no model, the
    // model is missing.
    assert_err(
        env.send(ix_set_paused(&run, false), &[&run.authority]).await,
        E::ConfigSanityCheckFailed,
    );
    let ix = ix_update(&run, &run.authority.pubkey(), None, Some(tiny_config()), None, None);
    env.send(ix, &[&run.authority]).await.unwrap();
    assert_err(env.send(ix_set_paused(&run, false), &[&run.authority]).await, E::ModelMissing);
    // Pausing an uninitialized run: it is halted already.
    assert_err(env.send(ix_set_paused(&run, true), &[&run.authority]).await, E::Halted);

    env.configure(&run, tiny_config(), tiny_model()).await;
    assert_err(
        env.send(ix_set_paused_by(&run, &stranger.pubkey(), false), &[&stranger]).await,
        E::NotMainAuthority,
    );
    let next_active = env.coordinator(&run).await.state.clients_state.next_active;
    env.send(ix_set_paused(&run, false), &[&run.authority]).await.unwrap();
    let account = env.coordinator(&run).await;
    assert_eq!(account.state.run_state(), RunState::WaitingForMembers);
    assert_eq!(account.state.coordinator.progress.step, 1);
    assert_eq!(account.state.clients_state.next_active, next_active + 1);
    assert_err(env.send(ix_set_paused(&run, false), &[&run.authority]).await, E::CannotResume);

    // Pause in WaitingForMembers: Paused at once; ticks are refused; resume works again.
    env.send(ix_set_paused(&run, true), &[&run.authority]).await.unwrap();
    assert_eq!(env.run_state(&run).await, RunState::Paused);
    assert_err(env.tick(&run).await, E::Halted);
    assert_err(env.send(ix_set_paused(&run, true), &[&run.authority]).await, E::Halted);
    env.send(ix_set_paused(&run, false), &[&run.authority]).await.unwrap();
    assert_eq!(env.run_state(&run).await, RunState::WaitingForMembers);

    // Pause while training: only flagged; the epoch winds down (drain rounds) first.
    env.permissionless_authorization(&run).await;
    let clients: Vec<Client> = (0..3).map(Client::new).collect();
    env.start_training(&run, &clients).await;
    env.send(ix_set_paused(&run, true), &[&run.authority]).await.unwrap();
    let account = env.coordinator(&run).await;
    assert_eq!(account.state.run_state(), RunState::RoundTrain);
    assert!(account.state.coordinator.pending_pause());
}

#[tokio::test]
async fn free_coordinator_only_by_the_owner_of_a_halted_run() {
    let mut env = Env::new().await;
    let run = env.started_run("freeing").await;
    let stranger = Keypair::new();
    let spill = Pubkey::new_unique();

    assert_err(
        env.send(ix_free_coordinator(&run, &run.authority.pubkey(), &spill), &[&run.authority])
            .await,
        E::CloseCoordinatorNotHalted,
    );
    env.send(ix_set_paused(&run, true), &[&run.authority]).await.unwrap();
    assert_err(
        env.send(ix_free_coordinator(&run, &stranger.pubkey(), &spill), &[&stranger]).await,
        E::NotMainAuthority,
    );
    let rent = rent_exempt(CoordinatorAccount::SPACE) + rent_exempt(CoordinatorInstance::SPACE);
    env.send(ix_free_coordinator(&run, &run.authority.pubkey(), &spill), &[&run.authority])
        .await
        .unwrap();
    assert!(env.account_data(run.account).await.is_none());
    assert!(env.instance(&run).await.is_none());
    assert_eq!(env.ctx.banks_client.get_balance(spill).await.unwrap(), rent);
}
