//! `join_run` through the real runtime: authorization (authorizer program), registration,
//! limits, and the reuse of stale registrations once the list is full.

mod harness;

use harness::*;
use psyche_coordinator::constants::{JOIN_RUN_AUTHORIZATION_SCOPE, MAX_REGISTERED_CLIENTS};
use psyche_coordinator::core::{Client as EpochClient, EpochState, NodeIdentity, RunState};
use psyche_coordinator::error::CoordinatorProgramError as E;
use psyche_coordinator::{ClientsState, Registration};
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::{Keypair, Signer};

#[tokio::test]
async fn join_registers_and_rejoin_refreshes_the_p2p_key() {
    let mut env = Env::new().await;
    let run = env.started_run("joins").await;
    let client = Client::new(1);
    env.join(&run, &client).await.unwrap();
    let account = env.coordinator(&run).await;
    let cs = &account.state.clients_state;
    assert_eq!(cs.clients().len(), 1);
    assert_eq!(cs.clients()[0].id.signer, client.wallet.pubkey().to_bytes());
    assert_eq!(cs.clients()[0].id.p2p_identity, [1; 32]);
    assert_eq!(cs.clients()[0].active, cs.next_active);
    assert_eq!(cs.pending().count(), 1);

    // Same wallet, new P2P key: one registration, the key refreshed.
    let restarted = Client { wallet: client.wallet.insecure_clone(), p2p: [2; 32] };
    env.join(&run, &restarted).await.unwrap();
    let account = env.coordinator(&run).await;
    assert_eq!(account.state.clients_state.clients().len(), 1);
    assert_eq!(account.state.clients_state.clients()[0].id.p2p_identity, [2; 32]);
}

#[tokio::test]
async fn join_requires_a_valid_authorization() {
    let mut env = Env::new().await;
    let run = env.create_run("gated").await;
    env.configure(&run, tiny_config(), tiny_model()).await;
    env.send(ix_set_paused(&run, false), &[&run.authority]).await.unwrap();
    let join_authority = run.join_authority.insecure_clone();
    let user = Client::new(1);
    let try_join =
        |authorization: Pubkey| ix_join_run(&run, &user.wallet.pubkey(), authorization, user.id());

    // Granted to this user but not active yet.
    let inactive = env
        .authorization(&join_authority, user.wallet.pubkey(), JOIN_RUN_AUTHORIZATION_SCOPE, false)
        .await;
    assert_err(env.send(try_join(inactive), &[&user.wallet]).await, E::JoinNotAuthorized);
    // Active, but for another wallet.
    let other = Keypair::new();
    let for_other = env
        .authorization(&join_authority, other.pubkey(), JOIN_RUN_AUTHORIZATION_SCOPE, true)
        .await;
    assert_err(env.send(try_join(for_other), &[&user.wallet]).await, E::JoinNotAuthorized);
    // Active and permissionless, but for another scope.
    let wrong_scope =
        env.authorization(&join_authority, Pubkey::default(), b"SomethingElse", true).await;
    assert_err(env.send(try_join(wrong_scope), &[&user.wallet]).await, E::JoinNotAuthorized);
    // Active and permissionless, but from a grantor that is not the run's join authority.
    let impostor = Keypair::new();
    let foreign =
        env.authorization(&impostor, Pubkey::default(), JOIN_RUN_AUTHORIZATION_SCOPE, true).await;
    assert_err(env.send(try_join(foreign), &[&user.wallet]).await, E::JoinNotAuthorized);
    // Not an authorizer account at all (the run's own instance): Anchor's owner check.
    assert_eq!(
        custom_code(env.send(try_join(run.instance), &[&user.wallet]).await),
        anchor_code(anchor_lang::error::ErrorCode::AccountOwnedByWrongProgram)
    );
    assert!(env.coordinator(&run).await.state.clients_state.clients().is_empty());

    // Activated: the grantee joins.
    env.send(ix_grantor_update(&join_authority, inactive, true), &[&join_authority]).await.unwrap();
    env.send(try_join(inactive), &[&user.wallet]).await.unwrap();

    // A delegate of `other` joins through `other`'s authorization.
    let delegate = Client::new(3);
    let ix =
        grantee_update_ix(&env.payer().pubkey(), &other, for_other, vec![delegate.wallet.pubkey()]);
    env.send(ix, &[&other]).await.unwrap();
    let ix = ix_join_run(&run, &delegate.wallet.pubkey(), for_other, delegate.id());
    env.send(ix, &[&delegate.wallet]).await.unwrap();
    assert_eq!(env.coordinator(&run).await.state.clients_state.clients().len(), 2);

    // Deactivated again: refused.
    env.send(ix_grantor_update(&join_authority, inactive, false), &[&join_authority])
        .await
        .unwrap();
    assert_err(env.send(try_join(inactive), &[&user.wallet]).await, E::JoinNotAuthorized);
}

fn grantee_update_ix(
    payer: &Pubkey,
    grantee: &Keypair,
    authorization: Pubkey,
    added: Vec<Pubkey>,
) -> solana_sdk::instruction::Instruction {
    use anchor_lang::{InstructionData, ToAccountMetas};
    solana_sdk::instruction::Instruction {
        program_id: psyche_authorizer::ID,
        accounts: psyche_authorizer::accounts::AuthorizationGranteeUpdate {
            payer: *payer,
            grantee: grantee.pubkey(),
            authorization,
            system_program: anchor_lang::system_program::ID,
        }
        .to_account_metas(None),
        data: psyche_authorizer::instruction::AuthorizationGranteeUpdate {
            params: psyche_authorizer::AuthorizationGranteeUpdateParams {
                delegates_clear: false,
                delegates_added: added,
            },
        }
        .data(),
    }
}

#[tokio::test]
async fn join_refuses_a_foreign_client_id_a_missing_signature_and_a_halted_run() {
    let mut env = Env::new().await;
    let run = env.started_run("strict").await;
    let user = Client::new(1);
    let someone = Client::new(2);
    // The client id must be the signer's.
    let ix = ix_join_run(&run, &user.wallet.pubkey(), Env::open_authorization(&run), someone.id());
    assert_err(env.send(ix, &[&user.wallet]).await, E::SignerMismatch);
    // The user must sign.
    let mut ix = ix_join_run(&run, &user.wallet.pubkey(), Env::open_authorization(&run), user.id());
    ix.accounts[0].is_signer = false;
    assert_eq!(
        custom_code(env.send(ix, &[]).await),
        anchor_code(anchor_lang::error::ErrorCode::AccountNotSigner)
    );
    // Wrong run id: this run's instance with another run's account.
    let other = env.create_run("other").await;
    let mixed = Run {
        run_id: run.run_id.clone(),
        instance: run.instance,
        account: other.account,
        authority: run.authority.insecure_clone(),
        join_authority: run.join_authority.insecure_clone(),
    };
    assert_err(env.join(&mixed, &user).await, E::CoordinatorAccountMismatch);
    // Paused: a join would be voided by the resume, so it is refused.
    env.send(ix_set_paused(&run, true), &[&run.authority]).await.unwrap();
    assert_err(env.join(&run, &user).await, E::Halted);
    assert!(env.coordinator(&run).await.state.clients_state.clients().is_empty());
}

#[tokio::test]
async fn at_most_global_batch_size_end_clients_join_an_epoch() {
    let mut env = Env::new().await;
    let run = env.create_run("batches").await;
    let mut config = tiny_config();
    config.global_batch_size_start = 3;
    config.global_batch_size_end = 3;
    env.configure(&run, config, tiny_model()).await;
    env.send(ix_set_paused(&run, false), &[&run.authority]).await.unwrap();
    env.permissionless_authorization(&run).await;
    let clients: Vec<Client> = (0..4).map(Client::new).collect();
    for c in &clients[..3] {
        env.join(&run, c).await.unwrap();
    }
    assert_err(env.join(&run, &clients[3]).await, E::MoreClientsThanBatches);
    // A pending client re-joining is not a new one.
    env.join(&run, &clients[0]).await.unwrap();
}

/// The registered list fills up, but not forever: entries stale for a whole generation are
/// reused (the reference refused every new wallet once 256 had ever joined).
#[tokio::test]
async fn a_full_registered_list_reuses_stale_entries() {
    let mut env = Env::new().await;
    let run = env.create_run("crowded").await;
    let mut config = tiny_config();
    config.global_batch_size_start = 256;
    config.global_batch_size_end = 256;
    config.init_min_clients = 256;
    config.waiting_for_members_extra_time = 255;
    env.configure(&run, config, tiny_model()).await;
    env.send(ix_set_paused(&run, false), &[&run.authority]).await.unwrap();
    env.permissionless_authorization(&run).await;
    let clients: Vec<Client> = (0..MAX_REGISTERED_CLIENTS).map(|i| Client::new(i as u8)).collect();
    for c in &clients {
        env.join(&run, c).await.unwrap();
    }
    let newcomer = Client::new(0xee);
    // All 256 are pending for the next epoch: no batch left for a newcomer.
    assert_err(env.join(&run, &newcomer).await, E::MoreClientsThanBatches);

    // One generation later (pause + resume bumps it) nobody is pending, but all joined the
    // previous generation: not stale yet, the list is full.
    env.send(ix_set_paused(&run, true), &[&run.authority]).await.unwrap();
    env.send(ix_set_paused(&run, false), &[&run.authority]).await.unwrap();
    assert_err(env.join(&run, &newcomer).await, E::ClientsFull);

    // Another generation: they are stale; the newcomer takes the first stalest slot.
    env.send(ix_set_paused(&run, true), &[&run.authority]).await.unwrap();
    env.send(ix_set_paused(&run, false), &[&run.authority]).await.unwrap();
    env.join(&run, &clients[5]).await.unwrap(); // a returning client keeps its own slot
    env.join(&run, &newcomer).await.unwrap();
    let account = env.coordinator(&run).await;
    let cs = &account.state.clients_state;
    assert_eq!(cs.clients().len(), MAX_REGISTERED_CLIENTS);
    assert_eq!(cs.clients()[0].id, newcomer.id());
    assert_eq!(cs.clients()[0].earned, 0);
    assert_eq!(cs.clients()[5].id, clients[5].id());
    assert_eq!(cs.pending().count(), 2);
    assert_eq!(env.run_state(&run).await, RunState::WaitingForMembers);
}

/// `ClientsState::register` directly: a stale wallet still in the epoch is never replaced, and
/// the stalest entry goes first.
#[test]
fn register_never_replaces_an_epoch_client_and_picks_the_stalest() {
    let mut cs: Box<ClientsState> = bytemuck::zeroed_box();
    let epoch_empty: Box<EpochState> = bytemuck::zeroed_box();
    let wallet = |n: u64| {
        let mut signer = [0u8; 32];
        signer[..8].copy_from_slice(&(n + 1).to_le_bytes());
        // Each its own P2P key: one key may not be held by two wallets.
        NodeIdentity { signer, p2p_identity: signer }
    };
    for n in 0..MAX_REGISTERED_CLIENTS as u64 {
        let r = cs.register(wallet(n), &epoch_empty, MAX_REGISTERED_CLIENTS).unwrap();
        assert_eq!(r, Registration::Added { index: n as usize });
    }
    // Two generations later every entry is stale; entries 0 and 1 are still epoch clients.
    cs.next_active += 2;
    let mut epoch: Box<EpochState> = bytemuck::zeroed_box();
    epoch.clients[0] = EpochClient::new(wallet(0));
    epoch.clients[1] = EpochClient::new(wallet(1));
    epoch.num_clients = 2;
    match cs.register(wallet(1000), &epoch, MAX_REGISTERED_CLIENTS).unwrap() {
        Registration::Replaced { index, previous } => {
            assert_eq!(index, 2);
            assert_eq!(previous.id, wallet(2));
        }
        other => panic!("{other:?}"),
    }
    // Entry 10 joined longest ago: it goes before lower indices that joined later.
    for c in cs.clients.iter_mut() {
        c.active = c.active.max(1);
    }
    cs.clients[10].active = 0;
    match cs.register(wallet(1001), &epoch, MAX_REGISTERED_CLIENTS).unwrap() {
        Registration::Replaced { index, .. } => assert_eq!(index, 10),
        other => panic!("{other:?}"),
    }
    assert_eq!(cs.clients().len(), MAX_REGISTERED_CLIENTS);
}

/// Issue 26, finding 1: an entry whose wallet holds points (`earned > slashed`) is never reused,
/// however stale: the list is the ledger a treasury pays from. Entries without points still are.
#[test]
fn register_never_reuses_an_entry_holding_points() {
    let mut cs: Box<ClientsState> = bytemuck::zeroed_box();
    let epoch: Box<EpochState> = bytemuck::zeroed_box();
    let wallet = |n: u64| {
        let mut signer = [0u8; 32];
        signer[..8].copy_from_slice(&(n + 1).to_le_bytes());
        NodeIdentity { signer, p2p_identity: signer }
    };
    for n in 0..MAX_REGISTERED_CLIENTS as u64 {
        cs.register(wallet(n), &epoch, MAX_REGISTERED_CLIENTS).unwrap();
    }
    for c in cs.clients.iter_mut() {
        c.earned = 1;
    }
    cs.next_active += 2;
    assert!(cs.register(wallet(1000), &epoch, MAX_REGISTERED_CLIENTS).is_err());
    assert_eq!(cs.find_signer(&wallet(0).signer), Some(0));
    // Entry 7's points were all slashed: it holds nothing and is the one reused.
    cs.clients[7].slashed = 1;
    match cs.register(wallet(1000), &epoch, MAX_REGISTERED_CLIENTS).unwrap() {
        Registration::Replaced { index, previous } => {
            assert_eq!((index, previous.id), (7, wallet(7)));
        }
        other => panic!("{other:?}"),
    }
    assert!(cs.clients().iter().filter(|c| c.earned == 1).count() == MAX_REGISTERED_CLIENTS - 1);
}
