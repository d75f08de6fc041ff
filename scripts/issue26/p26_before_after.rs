//! Issue 26 before/after proof (coordinator): the same file runs against the code before each fix
//! and after it (scripts/issue26_before_after.sh). It uses only what existed before the fixes,
//! so an assertion, not a missing name, is what fails on the old code.

mod harness;

use harness::*;
use psyche_coordinator::constants::MAX_REGISTERED_CLIENTS;
use psyche_coordinator::core::{EpochState, NodeIdentity};
use psyche_coordinator::ClientsState;
use solana_sdk::signature::{Keypair, Signer};

/// Finding 1: an entry whose wallet holds points is never reused for a stranger.
#[test]
fn f1_a_full_list_never_reuses_an_entry_holding_points() {
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
    let stranger = cs.register(wallet(1000), &epoch, MAX_REGISTERED_CLIENTS);
    assert!(stranger.is_err(), "a stranger took an entry holding points: {stranger:?}");
    assert_eq!(cs.find_signer(&wallet(0).signer), Some(0));
}

async fn publish(env: &mut Env, run: &Run, addr: &str) -> TxResult {
    let w = Keypair::new();
    env.fund(&w.pubkey()).await;
    env.send(ix_set_peer_addrs(run.instance, &w.pubkey(), &[addr]), &[&w]).await
}

/// Finding 5 (first part): targets no peer can be at, in any run.
#[tokio::test]
async fn f5_link_local_and_broadcast_targets_are_refused() {
    let mut env = Env::new().await;
    let run = env.create_run("p26-unroutable").await;
    for addr in [
        "/ip4/169.254.169.254/tcp/80",
        "/ip4/255.255.255.255/udp/9",
        "/ip4/169.254.1.1/tcp/1/p2p/x/p2p-circuit",
    ] {
        assert!(publish(&mut env, &run, addr).await.is_err(), "{addr} was accepted");
    }
}

/// Finding 5 (on chain): loopback, private and DNS targets in a run not made local.
#[tokio::test]
async fn f5_loopback_private_and_dns_targets_are_refused_in_a_public_run() {
    let mut env = Env::new().await;
    let run = env.create_run("p26-public").await;
    for addr in [
        "/ip4/127.0.0.1/tcp/4001",
        "/ip4/10.0.0.1/tcp/4001",
        "/ip4/192.168.1.2/tcp/4001",
        "/ip4/100.64.0.1/tcp/4001",
        "/ip6/fd00::7/tcp/4001",
        "/dns4/metadata.google.internal/tcp/80",
        "/ip4/10.0.0.8/tcp/5/p2p/x/p2p-circuit",
    ] {
        assert!(publish(&mut env, &run, addr).await.is_err(), "{addr} was accepted");
    }
}

/// Finding 7: a rate that could overflow the ledger is refused when set.
#[tokio::test]
async fn f7_an_overflowing_epoch_rate_is_refused() {
    let mut env = Env::new().await;
    let run = env.create_run("p26-rates").await;
    let owner = run.authority.pubkey();
    let ix = ix_set_future_epoch_rates(&run, &owner, Some(u64::MAX), None);
    let r = env.send(ix, &[&run.authority]).await;
    assert!(r.is_err(), "an earning rate of u64::MAX was accepted");
}
