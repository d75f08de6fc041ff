//! One P2P key per wallet (issue 12, finding 4): `join_run` refuses a P2P key that another
//! wallet holds, pending or in the running epoch, unless the joiner proves the key is its own
//! (`p2p_identity == signer`). Peers attribute gossip by P2P key, so before this an authorized
//! wallet that registered a victim's key got the victim's results dropped and the victim ejected.

mod harness;

use harness::*;
use psyche_coordinator::constants::MAX_REGISTERED_CLIENTS;
use psyche_coordinator::core::{Client as EpochClient, EpochState, NodeIdentity};
use psyche_coordinator::error::CoordinatorProgramError as E;
use psyche_coordinator::{ClientsState, Registration};
use solana_sdk::signature::{Keypair, Signer};

/// A client whose P2P key is its wallet key, as the project's clients join.
fn self_keyed() -> Client {
    let wallet = Keypair::new();
    let p2p = wallet.pubkey().to_bytes();
    Client { wallet, p2p }
}

fn pending_signers(cs: &ClientsState) -> Vec<[u8; 32]> {
    cs.pending().map(|c| c.signer).collect()
}

#[tokio::test]
async fn a_second_wallet_cannot_claim_a_pending_clients_p2p_key() {
    let mut env = Env::new().await;
    let run = env.started_run("p2p-pending").await;
    let victim = Client::new(1);
    let attacker = Client::new(1); // another wallet, the victim's P2P key
    env.join(&run, &victim).await.unwrap();
    assert_err(env.join(&run, &attacker).await, E::P2PIdentityTaken);
    let account = env.coordinator(&run).await;
    assert_eq!(pending_signers(&account.state.clients_state), [victim.wallet.pubkey().to_bytes()]);

    // The holder re-joining with its key is no conflict; with its own key the attacker joins.
    env.join(&run, &victim).await.unwrap();
    let honest = Client { wallet: attacker.wallet.insecure_clone(), p2p: [2; 32] };
    env.join(&run, &honest).await.unwrap();
    // A holder that changes its key releases the old one.
    let moved = Client { wallet: victim.wallet.insecure_clone(), p2p: [3; 32] };
    env.join(&run, &moved).await.unwrap();
    let third = Client::new(1);
    env.join(&run, &third).await.unwrap();
    assert_eq!(env.coordinator(&run).await.state.clients_state.pending().count(), 3);
}

#[tokio::test]
async fn a_p2p_key_of_the_running_epoch_cannot_be_claimed() {
    let mut env = Env::new().await;
    let run = env.started_run("p2p-epoch").await;
    let members: Vec<Client> = (0..3).map(Client::new).collect();
    env.start_training(&run, &members).await;
    // Training bumped the join generation: the members are epoch clients, no longer pending,
    // and the attack is a join for the next epoch with a member's key.
    let account = env.coordinator(&run).await;
    assert_eq!(account.state.clients_state.pending().count(), 0);
    let attacker = Client::new(1);
    assert_err(env.join(&run, &attacker).await, E::P2PIdentityTaken);
    // The member itself joins the next epoch with its key.
    env.join(&run, &members[1]).await.unwrap();
}

#[tokio::test]
async fn a_wallet_takes_its_own_key_back_from_a_squatter() {
    let mut env = Env::new().await;
    let run = env.started_run("p2p-squat").await;
    let victim = self_keyed();
    // The victim's wallet key is public (its authorization names it): a squatter registers it
    // as its P2P key before the victim joins.
    let squatter = Client { wallet: Keypair::new(), p2p: victim.p2p };
    env.join(&run, &squatter).await.unwrap();
    env.join(&run, &victim).await.unwrap();
    let account = env.coordinator(&run).await;
    let cs = &account.state.clients_state;
    assert_eq!(pending_signers(cs), [victim.wallet.pubkey().to_bytes()]);
    assert_eq!(cs.clients().len(), 2);
    // Now the squatter is the one refused.
    assert_err(env.join(&run, &squatter).await, E::P2PIdentityTaken);
}

/// `ClientsState::register` directly: a proven join frees the places of the rivals it removes,
/// so squatters cannot fill the pending list to keep the owner out.
#[test]
fn a_proven_join_counts_the_place_its_rival_leaves() {
    let mut cs: Box<ClientsState> = bytemuck::zeroed_box();
    cs.next_active = 1;
    let epoch: Box<EpochState> = bytemuck::zeroed_box();
    let owner = NodeIdentity { signer: [7; 32], p2p_identity: [7; 32] };
    let squatter = NodeIdentity { signer: [8; 32], p2p_identity: [7; 32] };
    let other = NodeIdentity { signer: [9; 32], p2p_identity: [9; 32] };
    cs.register(squatter, &epoch, 2).unwrap();
    cs.register(other, &epoch, 2).unwrap();
    // Two of two places taken, one by the squatter of the owner's key.
    assert_eq!(cs.register(owner, &epoch, 2).unwrap(), Registration::Added { index: 2 });
    assert_eq!(cs.pending().map(|c| c.signer).collect::<Vec<_>>(), [[9; 32], [7; 32]]);
    // The squatter counts as having joined the previous generation: not pending, not stale.
    assert_eq!(cs.clients()[0].active, 0);
    // An unproven key clashing with an epoch client is refused even with nobody pending.
    let mut cs: Box<ClientsState> = bytemuck::zeroed_box();
    let mut epoch: Box<EpochState> = bytemuck::zeroed_box();
    epoch.clients[0] = EpochClient::new(NodeIdentity { signer: [1; 32], p2p_identity: [5; 32] });
    epoch.num_clients = 1;
    let clash = NodeIdentity { signer: [2; 32], p2p_identity: [5; 32] };
    let err = cs.register(clash, &epoch, MAX_REGISTERED_CLIENTS).unwrap_err();
    assert_eq!(err, E::P2PIdentityTaken.into());
}
