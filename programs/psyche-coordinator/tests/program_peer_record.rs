//! Peer records (`set_peer_addrs`, `close_peer_record`; docs/solana.md, "Programs"): a wallet
//! publishes its P2P addresses for a run in the PDA `["peer", coordinator_instance, wallet]`,
//! overwrites them, and closes the record for its rent. Natively and, with `PSYCHE_SBF=1`, on
//! the SBF build.

mod harness;

use anchor_lang::error::ErrorCode as AnchorError;
use anchor_lang::solana_program::system_instruction;
use anchor_lang::{AccountSerialize, Discriminator};
use harness::*;
use psyche_coordinator::constants::{MAX_PEER_ADDRS, MAX_PEER_ADDR_LEN};
use psyche_coordinator::error::CoordinatorProgramError as E;
use psyche_coordinator::{CoordinatorInstance, PeerRecord};
use solana_sdk::account::Account;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::{Keypair, Signer};

const ADDR: &str =
    "/ip4/203.0.113.7/tcp/4001/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN";
const ADDR_2: &str = "/ip6/2001:db8::7/udp/4001/quic-v1";

/// A funded wallet that is not a client of any run.
async fn wallet(env: &mut Env) -> Keypair {
    let w = Keypair::new();
    env.fund(&w.pubkey()).await;
    w
}

/// `n` addresses of exactly `MAX_PEER_ADDR_LEN` bytes (public targets: valid in any run).
fn longest_addrs(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("/ip4/203.0.113.{i}/{}", "x".repeat(usize::from(MAX_PEER_ADDR_LEN) - 17)))
        .collect()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

async fn set(env: &mut Env, instance: Pubkey, w: &Keypair, addrs: &[&str]) -> TxResult {
    env.send(ix_set_peer_addrs(instance, &w.pubkey(), addrs), &[w]).await
}

#[tokio::test]
async fn create_overwrite_and_close() {
    let mut env = Env::new().await;
    let run = env.create_run("peer-happy").await;
    let w = wallet(&mut env).await;
    let (pda, bump) = PeerRecord::find_pda(&run.instance, &w.pubkey());
    assert!(env.peer_record(pda).await.is_none());
    let before = env.lamports(w.pubkey()).await;

    // First use: created, rent paid by the signer (the fee by the transaction's payer).
    set(&mut env, run.instance, &w, &[ADDR, ADDR_2]).await.unwrap();
    let clock = env.clock().await;
    let record = env.peer_record(pda).await.expect("created");
    assert_eq!(
        record,
        PeerRecord {
            coordinator_instance: run.instance,
            signer: w.pubkey(),
            bump,
            updated_at: clock.unix_timestamp,
            updated_slot: clock.slot,
            addrs: vec![ADDR.to_string(), ADDR_2.to_string()],
        }
    );
    assert_eq!(record.updated_at, START_TIME);
    let account = env.ctx.banks_client.get_account(pda).await.unwrap().unwrap();
    assert_eq!(account.owner, psyche_coordinator::ID);
    assert_eq!(account.data.len(), PeerRecord::SPACE);
    assert_eq!(&account.data[..8], PeerRecord::DISCRIMINATOR);
    let rent = rent_exempt(PeerRecord::SPACE);
    assert_eq!(account.lamports, rent);
    assert_eq!(rent, (128 + 621) * 6960);
    assert_eq!(env.lamports(w.pubkey()).await, before - rent);

    // Overwrite with the largest content, later: the clock stamps move, the size and the
    // deposit do not, and the signer pays nothing more.
    env.warp(42).await;
    let longest = longest_addrs(usize::from(MAX_PEER_ADDRS));
    set(&mut env, run.instance, &w, &strs(&longest)).await.unwrap();
    let clock = env.clock().await;
    let record = env.peer_record(pda).await.unwrap();
    assert_eq!(record.addrs, longest);
    assert_eq!((record.updated_at, record.updated_slot), (clock.unix_timestamp, clock.slot));
    assert_eq!(record.updated_at, START_TIME + 42);
    assert!(record.updated_slot > START_SLOT);
    let account = env.ctx.banks_client.get_account(pda).await.unwrap().unwrap();
    assert_eq!((account.data.len(), account.lamports), (PeerRecord::SPACE, rent));
    assert_eq!(env.lamports(w.pubkey()).await, before - rent);

    // Zero addresses: "no address right now".
    env.warp(1).await;
    set(&mut env, run.instance, &w, &[]).await.unwrap();
    let record = env.peer_record(pda).await.unwrap();
    assert!(record.addrs.is_empty());
    assert_eq!(record.updated_at, START_TIME + 43);

    // Close: the deposit goes back to the signer, the account is gone.
    env.send(ix_close_peer_record(&w.pubkey(), pda), &[&w]).await.unwrap();
    assert!(env.ctx.banks_client.get_account(pda).await.unwrap().is_none());
    assert_eq!(env.lamports(w.pubkey()).await, before);

    // And it can be created again.
    set(&mut env, run.instance, &w, &[ADDR]).await.unwrap();
    assert_eq!(env.peer_record(pda).await.unwrap().addrs, [ADDR]);
}

#[tokio::test]
async fn invalid_addresses_are_refused_and_change_nothing() {
    let mut env = Env::new().await;
    let run = env.create_run("peer-errors").await;
    let w = wallet(&mut env).await;
    let (pda, _) = PeerRecord::find_pda(&run.instance, &w.pubkey());
    let too_long = format!("/{}", "a".repeat(usize::from(MAX_PEER_ADDR_LEN)));
    let five = longest_addrs(usize::from(MAX_PEER_ADDRS) + 1);
    let cases: Vec<(Vec<&str>, E)> = vec![
        (strs(&five), E::TooManyPeerAddrs),
        (vec![ADDR, ADDR, ADDR, ADDR, ""], E::TooManyPeerAddrs),
        (vec![""], E::PeerAddrBadLength),
        (vec![ADDR, too_long.as_str()], E::PeerAddrBadLength),
        (vec!["/ip4/1.2.3.4 /tcp/1"], E::PeerAddrNotPrintable),
        (vec!["/ip4/1.2.3.4/tcp/1\n"], E::PeerAddrNotPrintable),
        (vec!["/a\u{7f}"], E::PeerAddrNotPrintable),
        (vec!["/dns/exämple.org"], E::PeerAddrNotPrintable),
        (vec!["ip4/1.2.3.4/tcp/1"], E::PeerAddrNoLeadingSlash),
        (vec![ADDR, "p2p"], E::PeerAddrNoLeadingSlash),
        // Issue 26, finding 5: targets no peer can be at, in any run (a relay's included).
        (vec!["/ip4/169.254.169.254/tcp/80"], E::PeerAddrUnroutable),
        (vec![ADDR, "/ip4/255.255.255.255/udp/9"], E::PeerAddrUnroutable),
        (vec!["/ip4/0.0.0.0/tcp/4001"], E::PeerAddrUnroutable),
        (vec!["/ip6/fe80::1/tcp/4001"], E::PeerAddrUnroutable),
        (vec!["/ip4/169.254.1.1/tcp/1/p2p/x/p2p-circuit"], E::PeerAddrUnroutable),
        (vec!["/ip4/not-an-ip/tcp/1"], E::PeerAddrUnroutable),
    ];
    // Refused before the record exists: it is not created.
    for (addrs, e) in &cases {
        assert_err(set(&mut env, run.instance, &w, addrs).await, *e);
        assert!(env.peer_record(pda).await.is_none(), "{addrs:?}");
    }
    // Refused once it exists: it keeps its content and stamps.
    set(&mut env, run.instance, &w, &[ADDR]).await.unwrap();
    let kept = env.peer_record(pda).await.unwrap();
    env.warp(5).await;
    for (addrs, e) in &cases {
        assert_err(set(&mut env, run.instance, &w, addrs).await, *e);
        assert_eq!(env.peer_record(pda).await.unwrap(), kept, "{addrs:?}");
    }
    // The bounds themselves are accepted.
    let longest = longest_addrs(usize::from(MAX_PEER_ADDRS));
    set(&mut env, run.instance, &w, &strs(&longest)).await.unwrap();
    set(&mut env, run.instance, &w, &["/", "/!~"]).await.unwrap();
}

/// Issue 26, finding 5: loopback, private, CGNAT, unique-local and DNS targets (a relay's
/// included) only in a run its creator made local at `init_coordinator`; link-local and the
/// other targets no peer can be at in neither.
#[tokio::test]
async fn local_targets_only_in_a_local_run() {
    let mut env = Env::new().await;
    let public = env.create_run("peer-public").await;
    let local = env.create_run_with("peer-local", true).await;
    assert!(!env.instance(&public).await.unwrap().local_run);
    assert!(env.instance(&local).await.unwrap().local_run);
    let w = wallet(&mut env).await;
    let relay = "/tcp/4001/p2p/12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN/p2p-circuit";
    let loopback_relay = format!("/ip4/127.0.0.1{relay}");
    let dns_relay = format!("/dns4/relay.example.com{relay}");
    let local_only = [
        "/ip4/127.0.0.1/tcp/4001",
        "/ip4/10.1.2.3/udp/4001/quic-v1",
        "/ip4/172.16.5.4/tcp/1",
        "/ip4/192.168.1.20/tcp/1",
        "/ip4/100.64.0.1/tcp/1",
        "/ip6/::1/tcp/1",
        "/ip6/fd00::7/tcp/1",
        "/ip6/::ffff:192.168.0.1/tcp/1",
        "/dns/peer.example.com/tcp/1",
        "/dns4/peer.example.com/tcp/1",
        "/dns6/peer.example.com/tcp/1",
        "/dnsaddr/peers.example.com",
        loopback_relay.as_str(),
        dns_relay.as_str(),
    ];
    let public_pda = PeerRecord::find_pda(&public.instance, &w.pubkey()).0;
    let local_pda = PeerRecord::find_pda(&local.instance, &w.pubkey()).0;
    for addr in local_only {
        assert_err(set(&mut env, public.instance, &w, &[ADDR, addr]).await, E::PeerAddrUnroutable);
        assert!(env.peer_record(public_pda).await.is_none(), "{addr}");
        set(&mut env, local.instance, &w, &[ADDR, addr]).await.unwrap();
        assert_eq!(env.peer_record(local_pda).await.unwrap().addrs, [ADDR, addr]);
    }
    // Never, even in a local run.
    for addr in ["/ip4/169.254.169.254/tcp/80", "/ip4/255.255.255.255/udp/9", "/ip6/ff02::1/udp/1"]
    {
        assert_err(set(&mut env, local.instance, &w, &[addr]).await, E::PeerAddrUnroutable);
    }
    // Public targets in both.
    set(&mut env, public.instance, &w, &[ADDR, ADDR_2]).await.unwrap();
    set(&mut env, local.instance, &w, &[ADDR, ADDR_2]).await.unwrap();
}

#[tokio::test]
async fn error_codes_are_appended_after_the_existing_ones() {
    assert_eq!(code(E::P2PIdentityTaken), 6035);
    assert_eq!(code(E::TooManyPeerAddrs), 6036);
    assert_eq!(code(E::PeerAddrBadLength), 6037);
    assert_eq!(code(E::PeerAddrNotPrintable), 6038);
    assert_eq!(code(E::PeerAddrNoLeadingSlash), 6039);
    assert_eq!(code(E::PeerAddrUnroutable), 6040);
    assert_eq!(code(E::EpochRateTooLarge), 6041);
}

#[tokio::test]
async fn another_wallet_cannot_write_or_close_a_record() {
    let mut env = Env::new().await;
    let run = env.create_run("peer-owner").await;
    let alice = wallet(&mut env).await;
    let mallory = wallet(&mut env).await;
    let (alice_pda, _) = PeerRecord::find_pda(&run.instance, &alice.pubkey());
    set(&mut env, run.instance, &alice, &[ADDR]).await.unwrap();
    let kept = env.peer_record(alice_pda).await.unwrap();

    // Writing: the PDA is derived from the signer, so Alice's address is the wrong PDA for
    // Mallory (whether it exists or not).
    let ix = ix_set_peer_addrs_at(run.instance, &mallory.pubkey(), alice_pda, &[ADDR_2]);
    assert_eq!(
        custom_code(env.send(ix, &[&mallory]).await),
        anchor_code(AnchorError::ConstraintSeeds)
    );
    let (mallory_pda, _) = PeerRecord::find_pda(&run.instance, &mallory.pubkey());
    let stranger = PeerRecord::find_pda(&run.instance, &Pubkey::new_unique()).0;
    let ix = ix_set_peer_addrs_at(run.instance, &mallory.pubkey(), stranger, &[ADDR_2]);
    assert_eq!(
        custom_code(env.send(ix, &[&mallory]).await),
        anchor_code(AnchorError::ConstraintSeeds)
    );
    assert!(env.peer_record(stranger).await.is_none());

    // Closing Alice's record as Mallory: it is not hers (the seeds, with Mallory's key, are
    // checked before `has_one`; either refuses it).
    let ix = ix_close_peer_record(&mallory.pubkey(), alice_pda);
    assert_eq!(
        custom_code(env.send(ix, &[&mallory]).await),
        anchor_code(AnchorError::ConstraintSeeds)
    );
    // Mallory's own (not yet existing) record cannot be closed either.
    let ix = ix_close_peer_record(&mallory.pubkey(), mallory_pda);
    assert_eq!(
        custom_code(env.send(ix, &[&mallory]).await),
        anchor_code(AnchorError::AccountNotInitialized)
    );
    assert_eq!(env.peer_record(alice_pda).await.unwrap(), kept);

    // Mallory's own record is hers alone and separate from Alice's.
    set(&mut env, run.instance, &mallory, &[ADDR_2]).await.unwrap();
    assert_eq!(env.peer_record(mallory_pda).await.unwrap().addrs, [ADDR_2]);
    assert_eq!(env.peer_record(alice_pda).await.unwrap(), kept);
    // Nor can Alice close Mallory's.
    let ix = ix_close_peer_record(&alice.pubkey(), mallory_pda);
    assert_eq!(
        custom_code(env.send(ix, &[&alice]).await),
        anchor_code(AnchorError::ConstraintSeeds)
    );
    env.send(ix_close_peer_record(&alice.pubkey(), alice_pda), &[&alice]).await.unwrap();
    assert_eq!(env.peer_record(mallory_pda).await.unwrap().addrs, [ADDR_2]);
}

#[tokio::test]
async fn a_wrong_coordinator_instance_is_refused() {
    let mut env = Env::new().await;
    let run = env.create_run("peer-instance").await;
    let other = env.create_run("peer-other").await;
    let w = wallet(&mut env).await;

    // The run's zero-copy account is the program's, but not a CoordinatorInstance.
    let ix = ix_set_peer_addrs(run.account, &w.pubkey(), &[ADDR]);
    assert_eq!(
        custom_code(env.send(ix, &[&w]).await),
        anchor_code(AnchorError::AccountDiscriminatorMismatch)
    );
    // No account at all there.
    let nothing = Pubkey::new_unique();
    let ix = ix_set_peer_addrs(nothing, &w.pubkey(), &[ADDR]);
    assert_eq!(
        custom_code(env.send(ix, &[&w]).await),
        anchor_code(AnchorError::AccountNotInitialized)
    );
    // A well-formed CoordinatorInstance owned by the program, but not at its PDA.
    let forged = Pubkey::new_unique();
    let instance = env.instance(&run).await.unwrap();
    let mut data = Vec::new();
    instance.try_serialize(&mut data).unwrap();
    data.resize(CoordinatorInstance::SPACE, 0);
    env.ctx.set_account(
        &forged,
        &Account {
            lamports: rent_exempt(data.len()),
            data,
            owner: psyche_coordinator::ID,
            executable: false,
            rent_epoch: 0,
        }
        .into(),
    );
    let ix = ix_set_peer_addrs(forged, &w.pubkey(), &[ADDR]);
    assert_eq!(custom_code(env.send(ix, &[&w]).await), anchor_code(AnchorError::ConstraintSeeds));
    // The real instance of one run with the record address of another.
    let of_other = PeerRecord::find_pda(&other.instance, &w.pubkey()).0;
    let ix = ix_set_peer_addrs_at(run.instance, &w.pubkey(), of_other, &[ADDR]);
    assert_eq!(custom_code(env.send(ix, &[&w]).await), anchor_code(AnchorError::ConstraintSeeds));

    // One record per run: the same wallet's records of two runs are independent.
    set(&mut env, run.instance, &w, &[ADDR]).await.unwrap();
    set(&mut env, other.instance, &w, &[ADDR_2]).await.unwrap();
    let mine = PeerRecord::find_pda(&run.instance, &w.pubkey()).0;
    assert_eq!(env.peer_record(mine).await.unwrap().addrs, [ADDR]);
    assert_eq!(env.peer_record(of_other).await.unwrap().addrs, [ADDR_2]);
    assert_eq!(env.peer_record(of_other).await.unwrap().coordinator_instance, other.instance);
}

#[tokio::test]
async fn a_record_outlives_its_run_and_can_still_be_closed() {
    let mut env = Env::new().await;
    let run = env.create_run("peer-freed").await; // Uninitialized: halted, may be freed
    let w = wallet(&mut env).await;
    let (pda, _) = PeerRecord::find_pda(&run.instance, &w.pubkey());
    set(&mut env, run.instance, &w, &[ADDR]).await.unwrap();
    let spill = Pubkey::new_unique();
    let ix = ix_free_coordinator(&run, &run.authority.pubkey(), &spill);
    env.send(ix, &[&run.authority]).await.unwrap();
    assert!(env.instance(&run).await.is_none());

    // No instance: no new writes.
    assert_eq!(
        custom_code(set(&mut env, run.instance, &w, &[ADDR_2]).await),
        anchor_code(AnchorError::AccountNotInitialized)
    );
    // The record is still closable for its rent.
    let before = env.lamports(w.pubkey()).await;
    env.send(ix_close_peer_record(&w.pubkey(), pda), &[&w]).await.unwrap();
    assert_eq!(env.lamports(w.pubkey()).await, before + rent_exempt(PeerRecord::SPACE));
}

#[tokio::test]
async fn a_prefunded_record_address_does_not_block_creation() {
    // Anyone can send lamports to the PDA before its owner first publishes; the record is still
    // created (what `init_if_needed` does where a plain create_account would fail).
    let mut env = Env::new().await;
    let run = env.create_run("peer-prefunded").await;
    let w = wallet(&mut env).await;
    let (pda, _) = PeerRecord::find_pda(&run.instance, &w.pubkey());
    let payer = env.payer();
    env.send(system_instruction::transfer(&payer.pubkey(), &pda, 1_000_000), &[]).await.unwrap();
    let before = env.lamports(w.pubkey()).await;
    set(&mut env, run.instance, &w, &[ADDR]).await.unwrap();
    assert_eq!(env.peer_record(pda).await.unwrap().addrs, [ADDR]);
    let rent = rent_exempt(PeerRecord::SPACE);
    assert_eq!(env.lamports(pda).await, rent);
    assert_eq!(env.lamports(w.pubkey()).await, before - (rent - 1_000_000));
}
