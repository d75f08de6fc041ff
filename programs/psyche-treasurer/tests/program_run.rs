//! `run_create` and `run_update` through the real runtime (the treasurer CPIs into the
//! coordinator; SPL Token is program-test's BPF build).

mod harness;

use anchor_lang::error::ErrorCode as AnchorError;
use anchor_spl::token::spl_token;
use harness::*;
use psyche_coordinator::core::{FixedString280, FixedString64, Progress, RunMetadata, RunState};
use psyche_coordinator::error::CoordinatorProgramError as CE;
use psyche_treasurer::error::TreasurerError as E;
use psyche_treasurer::{RunCreateParams, RunUpdateParams};
use solana_sdk::account::{Account, AccountSharedData};
use solana_sdk::program_pack::Pack;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::{Keypair, Signer};

const TOKEN_2022: Pubkey = solana_sdk::pubkey!("TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb");

#[tokio::test]
async fn run_create_creates_run_escrow_and_coordinator_owned_by_the_run() {
    let mut env = Env::new().await;
    // The bundled SPL Token program is there (as BPF) in both modes.
    let token_program = env.account(spl_token::ID).await.expect("SPL Token is loaded");
    assert!(token_program.executable);

    let run = env.new_run("create", 7, 25).await;

    let stored = env.run(run.address).await;
    assert_eq!(stored.bump, psyche_treasurer::Run::find_pda(7).1);
    assert_eq!(stored.index, 7);
    assert_eq!(stored.main_authority, run.authority.pubkey());
    assert_eq!(stored.join_authority, run.join_authority.pubkey());
    assert_eq!(stored.coordinator_instance, run.instance);
    assert_eq!(stored.coordinator_account, run.account);
    assert_eq!(stored.collateral_mint, run.mint);
    assert_eq!(stored.collateral_per_point, 25);
    assert_eq!(stored.total_claimed_points, 0);
    assert_eq!(stored.total_claimed_collateral, 0);
    let run_account = env.account(run.address).await.unwrap();
    assert_eq!(run_account.owner, psyche_treasurer::ID);
    assert_eq!(run_account.data.len(), psyche_treasurer::Run::SPACE);

    // The escrow: a classic token account of the mint at its PDA, token authority the Run PDA.
    let escrow_account = env.account(run.collateral).await.unwrap();
    assert_eq!(escrow_account.owner, spl_token::ID);
    assert_eq!(escrow_account.lamports, rent_exempt(spl_token::state::Account::LEN));
    let escrow = env.token(run.collateral).await;
    assert_eq!(escrow.mint, run.mint);
    assert_eq!(escrow.owner, run.address);
    assert_eq!(escrow.amount, 0);
    assert!(escrow.delegate.is_none());
    assert!(escrow.close_authority.is_none());

    // The coordinator: its main authority is the Run PDA, so only the treasurer can update it.
    let instance = env.instance(run.instance).await;
    assert_eq!(instance.main_authority, run.address);
    assert_eq!(instance.join_authority, run.join_authority.pubkey());
    assert_eq!(instance.coordinator_account, run.account);
    assert_eq!(instance.run_id, "create");
    let account = env.coordinator(&run).await;
    assert_eq!(account.state.coordinator.run_id.as_str(), Some("create"));
    assert_eq!(account.state.client_version.as_str(), Some("test"));
    assert_eq!(account.state.run_state(), RunState::Uninitialized);
}

#[tokio::test]
async fn run_create_refuses_zero_collateral_per_point() {
    let mut env = Env::new().await;
    let mint = seeded_keypair(b"zero/mint");
    env.create_mint(&mint).await;
    let run = TRun::planned("zero", 1, mint.pubkey());
    // Index 2: compute budget, create_account, run_create.
    assert_eq!(custom_code_at(env.create_run(&run, 0).await, 2), code(E::CollateralPerPointZero));
    assert!(env.account(run.address).await.is_none(), "nothing was created");
    assert!(env.account(run.instance).await.is_none());
    env.create_run(&run, 1).await.expect("the same run with a rate");
}

#[tokio::test]
async fn run_create_refuses_a_foreign_coordinator_account() {
    let mut env = Env::new().await;
    let first = env.new_run("first", 1, 10).await;
    let mint = seeded_keypair(b"second/mint");
    env.create_mint(&mint).await;

    // Another run's (initialized) coordinator account: the coordinator's `zero` constraint.
    let mut second = TRun::planned("second", 2, mint.pubkey());
    second.account = first.account;
    let params = RunCreateParams {
        index: 2,
        run_id: "second".into(),
        client_version: "test".into(),
        join_authority: second.join_authority.pubkey(),
        collateral_per_point: 10,
        local_run: false,
    };
    let payer = env.payer().pubkey();
    let ix = ix_run_create(&payer, &second, params.clone());
    let authority = second.authority.insecure_clone();
    assert_anchor_err(env.send(ix, &[&authority]).await, 1, AnchorError::ConstraintZero);

    // An account the coordinator does not own (a plain system account): refused before the CPI.
    let stranger = Keypair::new();
    env.fund(&stranger.pubkey()).await;
    second.account = stranger.pubkey();
    let ix = ix_run_create(&payer, &second, params);
    assert_anchor_err(env.send(ix, &[&authority]).await, 1, AnchorError::ConstraintOwner);
    assert!(env.account(second.address).await.is_none());
    // The first run is untouched.
    let account = env.coordinator(&first).await;
    assert_eq!(account.state.coordinator.run_id.as_str(), Some("first"));
}

#[tokio::test]
async fn run_create_requires_the_main_authority_signature() {
    let mut env = Env::new().await;
    let mint = seeded_keypair(b"unsigned/mint");
    env.create_mint(&mint).await;
    let run = TRun::planned("unsigned", 3, mint.pubkey());
    let mut ixs = env.create_run_ixs(&run, 5);
    ixs[1].accounts[1].is_signer = false;
    let account = run.account_keypair();
    assert_anchor_err(env.send_many(&ixs, &[&account]).await, 2, AnchorError::AccountNotSigner);
    assert!(env.account(run.address).await.is_none());
}

#[tokio::test]
async fn run_create_refuses_token_2022_mints_and_program() {
    let mut env = Env::new().await;
    // A mint owned by Token-2022 (same base layout as a classic mint).
    let fake_mint = Keypair::new().pubkey();
    let mut data = vec![0u8; spl_token::state::Mint::LEN];
    spl_token::state::Mint {
        mint_authority: Some(env.payer().pubkey()).into(),
        supply: 0,
        decimals: DECIMALS,
        is_initialized: true,
        freeze_authority: None.into(),
    }
    .pack_into_slice(&mut data);
    env.ctx.set_account(
        &fake_mint,
        &AccountSharedData::from(Account {
            lamports: rent_exempt(data.len()),
            data,
            owner: TOKEN_2022,
            executable: false,
            rent_epoch: 0,
        }),
    );
    let run = TRun::planned("t22", 4, fake_mint);
    let account = run.account_keypair();
    let authority = run.authority.insecure_clone();
    let ixs = env.create_run_ixs(&run, 5);
    assert_anchor_err(
        env.send_many(&ixs, &[&account, &authority]).await,
        2,
        AnchorError::AccountOwnedByWrongProgram,
    );

    // A classic mint with Token-2022 named as the token program.
    let mint = seeded_keypair(b"t22b/mint");
    env.create_mint(&mint).await;
    let run = TRun::planned("t22b", 5, mint.pubkey());
    let account = run.account_keypair();
    let authority = run.authority.insecure_clone();
    let mut ixs = env.create_run_ixs(&run, 5);
    ixs[1].accounts[8].pubkey = TOKEN_2022;
    assert_anchor_err(
        env.send_many(&ixs, &[&account, &authority]).await,
        2,
        AnchorError::InvalidProgramId,
    );
    assert!(env.account(run.address).await.is_none());
}

#[tokio::test]
async fn run_create_twice_at_one_index_fails() {
    let mut env = Env::new().await;
    let run = env.new_run("once", 9, 1).await;
    // Same index (so the same Run PDA), another run id and coordinator account.
    let mut again = TRun::planned("once-again", 9, run.mint);
    again.authority = run.authority.insecure_clone();
    let account = again.account_keypair();
    let authority = again.authority.insecure_clone();
    let ixs = env.create_run_ixs(&again, 1);
    // The system program refuses to create an account in use (SystemError::AccountAlreadyInUse).
    assert_eq!(custom_code_at(env.send_many(&ixs, &[&account, &authority]).await, 2), 0);
    assert_eq!(env.run(run.address).await.coordinator_account, run.account);
}

fn metadata(name: &str) -> RunMetadata {
    RunMetadata {
        name: FixedString64::new(name).unwrap(),
        description: FixedString280::new("a run paid by the treasurer").unwrap(),
        num_parameters: 12_345,
        vocab_size: 32_000,
    }
}

#[tokio::test]
async fn run_update_routes_every_field_to_the_coordinator() {
    let mut env = Env::new().await;
    let run = env.new_run("update", 11, 3).await;
    let nonce0 = env.coordinator(&run).await.nonce;

    // Metadata alone.
    let params = RunUpdateParams { metadata: Some(Box::new(metadata("named"))), ..empty_update() };
    env.run_update(&run, params).await.unwrap();
    let account = env.coordinator(&run).await;
    assert_eq!(account.state.metadata, metadata("named"));
    assert_eq!(account.nonce, nonce0 + 1);

    // Config and model (halted run): stored.
    let params = RunUpdateParams {
        config: Some(Box::new(tiny_config())),
        model: Some(Box::new(tiny_model())),
        ..empty_update()
    };
    env.run_update(&run, params).await.unwrap();
    let account = env.coordinator(&run).await;
    assert_eq!(account.state.coordinator.config, tiny_config());
    assert_eq!(account.state.coordinator.model.load(), Some(tiny_model()));
    assert_eq!(account.state.run_state(), RunState::Uninitialized);

    // Rates land in the future rates; client version; progress.
    let params = RunUpdateParams {
        epoch_earning_rate_total_shared: Some(900),
        epoch_slashing_rate_per_client: Some(40),
        client_version: Some("v2".into()),
        progress: Some(Progress { epoch: 0, _pad: [0; 2], step: 1, epoch_start_data_index: 0 }),
        ..empty_update()
    };
    env.run_update(&run, params).await.unwrap();
    let account = env.coordinator(&run).await;
    let rates = account.state.clients_state.future_epoch_rates;
    assert_eq!((rates.earning_rate_total_shared, rates.slashing_rate_per_client), (900, 40));
    assert_eq!(account.state.clients_state.current_epoch_rates.earning_rate_total_shared, 0);
    assert_eq!(account.state.client_version.as_str(), Some("v2"));
    assert_eq!(account.state.coordinator.progress.step, 1);
    // Each update so far bumped the nonce once per coordinator instruction: metadata (1),
    // config and model (1), then update, update_client_version, set_future_epoch_rates (3).
    assert_eq!(account.nonce, nonce0 + 5);

    // Only one rate: the other is kept.
    let params = RunUpdateParams { epoch_slashing_rate_per_client: Some(41), ..empty_update() };
    env.run_update(&run, params).await.unwrap();
    let rates = env.coordinator(&run).await.state.clients_state.future_epoch_rates;
    assert_eq!((rates.earning_rate_total_shared, rates.slashing_rate_per_client), (900, 41));

    // Resume: WaitingForMembers.
    let params = RunUpdateParams { paused: Some(false), ..empty_update() };
    env.run_update(&run, params).await.unwrap();
    assert_eq!(env.run_state(&run).await, RunState::WaitingForMembers);

    // The coordinator's own rules still apply: config while running is refused (its error).
    let params = RunUpdateParams { config: Some(Box::new(tiny_config())), ..empty_update() };
    assert_eq!(
        custom_code(env.run_update(&run, params).await),
        coordinator_code(CE::UpdateConfigNotHalted)
    );
    // Pause.
    let params = RunUpdateParams { paused: Some(true), ..empty_update() };
    env.run_update(&run, params).await.unwrap();
    assert_eq!(env.run_state(&run).await, RunState::Paused);
}

#[tokio::test]
async fn run_update_with_config_model_and_resume_in_one_instruction() {
    let mut env = Env::new().await;
    let run = env.new_run("oneshot", 12, 3).await;
    // set_paused runs last, so the resume sees the config and model given with it.
    let params = RunUpdateParams {
        metadata: Some(Box::new(metadata("oneshot"))),
        config: Some(Box::new(tiny_config())),
        model: Some(Box::new(tiny_model())),
        epoch_earning_rate_total_shared: Some(600),
        paused: Some(false),
        ..empty_update()
    };
    env.run_update(&run, params).await.unwrap();
    let account = env.coordinator(&run).await;
    assert_eq!(account.state.run_state(), RunState::WaitingForMembers);
    assert_eq!(account.state.coordinator.config, tiny_config());
    assert_eq!(account.state.metadata, metadata("oneshot"));
    assert_eq!(account.state.clients_state.future_epoch_rates.earning_rate_total_shared, 600);
    assert_eq!(account.state.coordinator.progress.step, 1);
}

#[tokio::test]
async fn run_update_refuses_empty_updates_and_other_signers() {
    let mut env = Env::new().await;
    let run = env.new_run("guard", 13, 3).await;
    let nonce = env.coordinator(&run).await.nonce;
    assert_err(env.run_update(&run, empty_update()).await, E::RunUpdateEmpty);

    let intruder = Keypair::new();
    env.fund(&intruder.pubkey()).await;
    let params = RunUpdateParams { paused: Some(false), ..empty_update() };
    let ix = ix_run_update(&intruder.pubkey(), &run, params);
    assert_err(env.send(ix, &[&intruder]).await, E::NotRunAuthority);

    // The authority's key without its signature.
    let params = RunUpdateParams { epoch_earning_rate_total_shared: Some(1), ..empty_update() };
    let mut ix = ix_run_update(&run.authority.pubkey(), &run, params);
    ix.accounts[0].is_signer = false;
    assert_anchor_err(env.send(ix, &[]).await, 1, AnchorError::AccountNotSigner);
    assert_eq!(env.coordinator(&run).await.nonce, nonce, "nothing changed");
}

#[tokio::test]
async fn run_update_refuses_another_runs_coordinator() {
    let mut env = Env::new().await;
    let run = env.new_run("mine", 14, 3).await;
    let other = env.new_run("theirs", 15, 3).await;
    let params = || RunUpdateParams { epoch_earning_rate_total_shared: Some(5), ..empty_update() };

    let mut mixed = TRun::planned("mine", 14, run.mint);
    mixed.account = other.account;
    let ix = ix_run_update(&run.authority.pubkey(), &mixed, params());
    assert_err(env.send(ix, &[&run.authority]).await, E::CoordinatorAccountMismatch);

    let mut mixed = TRun::planned("mine", 14, run.mint);
    mixed.instance = other.instance;
    let ix = ix_run_update(&run.authority.pubkey(), &mixed, params());
    assert_err(env.send(ix, &[&run.authority]).await, E::CoordinatorInstanceMismatch);

    // Another run's Run account with this run's coordinator (signed by the other authority).
    let mut mixed = TRun::planned("theirs", 15, other.mint);
    mixed.account = run.account;
    mixed.instance = run.instance;
    let ix = ix_run_update(&other.authority.pubkey(), &mixed, params());
    assert_err(env.send(ix, &[&other.authority]).await, E::CoordinatorInstanceMismatch);

    for r in [&run, &other] {
        let rates = env.coordinator(r).await.state.clients_state.future_epoch_rates;
        assert_eq!(rates.earning_rate_total_shared, 0);
    }
}

#[tokio::test]
async fn the_coordinator_refuses_its_owner_instructions_from_anyone_but_the_run_pda() {
    let mut env = Env::new().await;
    let run = env.new_run("locked", 16, 3).await;
    env.start_run(&run, 600, 0).await;
    assert_eq!(env.run_state(&run).await, RunState::WaitingForMembers);
    // The run's main authority (the Run's, not the coordinator's) goes to the coordinator
    // directly: refused, the coordinator's main authority is the Run PDA.
    let authority = run.authority.insecure_clone();
    let ix = ix_coordinator_set_paused(&run, &authority.pubkey(), true);
    assert_eq!(
        custom_code(env.send(ix, &[&authority]).await),
        coordinator_code(CE::NotMainAuthority)
    );
    let ix = ix_coordinator_set_rates(&run, &authority.pubkey(), 1);
    assert_eq!(
        custom_code(env.send(ix, &[&authority]).await),
        coordinator_code(CE::NotMainAuthority)
    );
    // The Run PDA cannot sign a transaction (no key), so the message is refused before the
    // runtime runs anything.
    let mut ix = ix_coordinator_set_paused(&run, &run.address, true);
    ix.accounts[0].is_signer = false;
    assert_anchor_err(env.send(ix, &[]).await, 1, AnchorError::AccountNotSigner);
    assert_eq!(env.run_state(&run).await, RunState::WaitingForMembers);
    let rates = env.coordinator(&run).await.state.clients_state.future_epoch_rates;
    assert_eq!(rates.earning_rate_total_shared, 600);
}

#[tokio::test]
async fn run_create_copes_with_lamports_sent_to_the_escrow_address_beforehand() {
    let mut env = Env::new().await;
    let mint = seeded_keypair(b"prefunded/mint");
    env.create_mint(&mint).await;
    let run = TRun::planned("prefunded", 21, mint.pubkey());
    // Anyone can send lamports to the (predictable) escrow address before the run exists; a
    // plain create_account would then fail and block the run.
    let payer = env.payer();
    let ix =
        solana_sdk::system_instruction::transfer(&payer.pubkey(), &run.collateral, rent_exempt(0));
    env.send(ix, &[]).await.unwrap();
    env.create_run(&run, 4).await.expect("run_create over a prefunded escrow address");
    let escrow_account = env.account(run.collateral).await.unwrap();
    assert_eq!(escrow_account.owner, spl_token::ID);
    assert_eq!(escrow_account.lamports, rent_exempt(spl_token::state::Account::LEN));
    let escrow = env.token(run.collateral).await;
    assert_eq!((escrow.mint, escrow.owner, escrow.amount), (run.mint, run.address, 0));
}

/// Issue 26, finding 2: before, a Treasurer run could never be closed (the creator's
/// `free_coordinator` is refused, the escrow's tokens cannot leave). Now the main authority
/// winds it down (the coordinator pauses for good, claims go on) and after
/// `RUN_CLOSE_GRACE_SECONDS` closes it: the escrow's remainder and the rent of the escrow and
/// the coordinator's accounts go to the main authority; the `Run` stays.
#[tokio::test]
async fn a_run_winds_down_and_closes_after_the_grace_period() {
    use psyche_treasurer::constants::RUN_CLOSE_GRACE_SECONDS as GRACE;
    const PER_POINT: u64 = 7;
    let mut env = Env::new().await;
    let run = env.new_run("closing", 77, PER_POINT).await;
    env.start_run(&run, 3000, 0).await;
    env.mint_to(&run.mint, &run.collateral, 50_000).await;
    let authority = run.authority.insecure_clone();
    env.fund(&authority.pubkey()).await;
    let remainder_to = env.funded_token_account(&run.mint, &authority.pubkey(), 0).await;
    // A participant with 1,000 points (written directly, set_account).
    let user = Keypair::new();
    let user_key = user.pubkey().to_bytes();
    env.edit_coordinator(&run, |a| {
        let cs = &mut a.state.clients_state;
        cs.clients[0].id.signer = user_key;
        cs.clients[0].id.p2p_identity = user_key;
        cs.clients[0].earned = 1000;
        cs.num_clients = 1;
    })
    .await;
    env.participant_create(&run, &user).await.unwrap();
    let user_tokens = env.funded_token_account(&run.mint, &user.pubkey(), 0).await;

    let close = |to: Pubkey| ix_run_close_with(close_accounts(&authority.pubkey(), &to, &run));
    // Not winding down yet.
    assert_err(env.send(close(remainder_to), &[&authority]).await, E::RunNotWindingDown);
    // Only the main authority winds down.
    let stranger = Keypair::new();
    let ix = ix_run_wind_down(&stranger.pubkey(), &run);
    assert_err(env.send(ix, &[&stranger]).await, E::NotRunAuthority);

    env.send(ix_run_wind_down(&authority.pubkey(), &run), &[&authority]).await.unwrap();
    let started = env.clock().await.unix_timestamp;
    assert_eq!(env.run(run.address).await.wind_down_at, started);
    assert_eq!(env.run_state(&run).await, RunState::Paused);
    // One-way: no second wind-down, no update, no resume.
    env.warp(1).await;
    let r = env.send(ix_run_wind_down(&authority.pubkey(), &run), &[&authority]).await;
    assert_err(r, E::RunWindingDown);
    let r = env.run_update(&run, RunUpdateParams { paused: Some(false), ..empty_update() }).await;
    assert_err(r, E::RunWindingDown);

    // Claims go on during the grace period.
    let ix = ix_participant_claim(&user.pubkey(), &user_tokens, &run, 400);
    env.send(ix, &[&user]).await.unwrap();
    // Too early, one second before the end of the grace period.
    env.set_time(started + GRACE - 1).await;
    assert_err(env.send(close(remainder_to), &[&authority]).await, E::RunCloseTooEarly);
    env.set_time(started + GRACE).await;
    // The remainder goes to a token account of the main authority, of the run's mint.
    let elsewhere = env.funded_token_account(&run.mint, &user.pubkey(), 0).await;
    assert_err(env.send(close(elsewhere), &[&authority]).await, E::RecipientNotRunAuthority);
    let other_mint = Keypair::new();
    env.create_mint(&other_mint).await;
    let wrong_mint = env.funded_token_account(&other_mint.pubkey(), &authority.pubkey(), 0).await;
    assert_err(env.send(close(wrong_mint), &[&authority]).await, E::WrongCollateralMint);
    // Signed by someone else.
    let mut ix = close(remainder_to);
    ix.accounts[0].pubkey = stranger.pubkey();
    env.fund(&stranger.pubkey()).await;
    assert_err(env.send(ix, &[&stranger]).await, E::NotRunAuthority);

    let rent = env.lamports(run.account).await
        + env.lamports(run.instance).await
        + env.lamports(run.collateral).await;
    let before = env.lamports(authority.pubkey()).await;
    env.send(close(remainder_to), &[&authority]).await.unwrap();
    assert_eq!(env.balance(remainder_to).await, 50_000 - 400 * PER_POINT);
    assert_eq!(env.lamports(authority.pubkey()).await, before + rent);
    assert!(rent > 1_000_000_000, "the coordinator's rent comes back: {rent}");
    for gone in [run.account, run.instance, run.collateral] {
        assert!(env.account(gone).await.is_none(), "{gone} still exists");
    }
    // The Run stays as the record of what was paid; nothing more can be claimed or closed.
    let record = env.run(run.address).await;
    assert_eq!((record.total_claimed_points, record.wind_down_at), (400, started));
    env.warp(1).await;
    let ix = ix_participant_claim(&user.pubkey(), &user_tokens, &run, 1);
    assert!(env.send(ix, &[&user]).await.is_err());
    assert!(env.send(close(remainder_to), &[&authority]).await.is_err());
}
