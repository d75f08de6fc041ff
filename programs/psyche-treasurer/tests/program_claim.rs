//! `participant_create` and `participant_claim` through the real runtime. Points are earned by
//! driving the coordinator through a whole epoch (three clients join through the authorizer,
//! Warmup, rounds, Cooldown, EpochEnd(true): 600 points shared, 200 each), except where a test
//! says it writes the ledger directly.

mod harness;

use anchor_lang::error::ErrorCode as AnchorError;
use harness::*;
use psyche_treasurer::error::TreasurerError as E;
use solana_sdk::pubkey::Pubkey;
use solana_sdk::signature::{Keypair, Signer};

const PER_POINT: u64 = 25;
const EARNING: u64 = 600;
const EACH: u64 = EARNING / 3;

struct Fixture {
    env: Env,
    run: TRun,
    clients: Vec<Client>,
    /// Each client's payout token account (of the run's mint, empty).
    payout: Vec<Pubkey>,
}

/// A run whose three clients earned 200 points each in a real epoch, an escrow funded with
/// `escrow` base units, and a `Participant` for each client.
async fn earned(name: &str, escrow: u64) -> Fixture {
    let mut env = Env::new().await;
    let run = env.new_run(name, 100, PER_POINT).await;
    env.start_run(&run, EARNING, 0).await;
    let clients: Vec<Client> =
        (0..3).map(|i| Client::seeded(&format!("{name}/client-{i}"), 0xa0 + i as u8)).collect();
    env.run_epoch(&run, &clients).await;
    let account = env.coordinator(&run).await;
    for c in account.state.clients_state.clients() {
        assert_eq!((c.earned, c.slashed), (EACH, 0));
    }
    if escrow > 0 {
        env.mint_to(&run.mint, &run.collateral, escrow).await;
    }
    let mut payout = Vec::new();
    for c in &clients {
        env.participant_create(&run, &c.wallet).await.expect("participant_create");
        let owner = c.wallet.pubkey();
        payout.push(env.funded_token_account(&run.mint, &owner, 0).await);
    }
    Fixture { env, run, clients, payout }
}

impl Fixture {
    async fn claim(&mut self, i: usize, points: u64) -> TxResult {
        let wallet = self.clients[i].wallet.insecure_clone();
        let to = self.payout[i];
        self.env.claim(&self.run, &wallet, &to, points).await
    }

    async fn claimed(&mut self, i: usize) -> (u64, u64) {
        let p = self.env.participant(self.run.participant(&self.clients[i].wallet.pubkey())).await;
        (p.claimed_points, p.claimed_collateral)
    }

    async fn totals(&mut self) -> (u64, u64) {
        let r = self.env.run(self.run.address).await;
        (r.total_claimed_points, r.total_claimed_collateral)
    }
}

#[tokio::test]
async fn participant_create_records_the_user_once() {
    let mut env = Env::new().await;
    let run = env.new_run("participants", 1, PER_POINT).await;
    let user = Keypair::new();
    let payer = env.payer().pubkey();
    let payer_before = env.lamports(payer).await;
    env.participant_create(&run, &user).await.unwrap();
    let address = run.participant(&user.pubkey());
    let p = env.participant(address).await;
    assert_eq!(p.bump, psyche_treasurer::Participant::find_pda(&run.address, &user.pubkey()).1);
    assert_eq!(p.run, run.address);
    assert_eq!(p.user, user.pubkey());
    assert_eq!((p.claimed_points, p.claimed_collateral), (0, 0));
    let rent = rent_exempt(psyche_treasurer::Participant::SPACE);
    assert_eq!(env.lamports(address).await, rent);
    // The payer paid the rent (and the fees).
    assert!(payer_before - env.lamports(payer).await >= rent);

    // A second create fails in the system program (AccountAlreadyInUse = 0).
    env.warp(1).await;
    assert_eq!(custom_code(env.participant_create(&run, &user).await), 0);
    // The user must sign.
    let other = Keypair::new();
    let mut ix = ix_participant_create(&env.payer().pubkey(), &other.pubkey(), &run);
    ix.accounts[1].is_signer = false;
    assert_anchor_err(env.send(ix, &[]).await, 1, AnchorError::AccountNotSigner);
}

#[tokio::test]
async fn partial_claims_then_the_rest_then_nothing_more() {
    let mut f = earned("partial", EARNING * PER_POINT).await;
    let escrow = f.run.collateral;

    f.claim(0, 50).await.unwrap();
    assert_eq!(f.env.balance(f.payout[0]).await, 50 * PER_POINT);
    assert_eq!(f.env.balance(escrow).await, (EARNING - 50) * PER_POINT);
    assert_eq!(f.claimed(0).await, (50, 50 * PER_POINT));
    assert_eq!(f.totals().await, (50, 50 * PER_POINT));

    f.claim(0, EACH - 50).await.unwrap();
    assert_eq!(f.env.balance(f.payout[0]).await, EACH * PER_POINT);
    assert_eq!(f.claimed(0).await, (EACH, EACH * PER_POINT));

    // Everything was paid: even one more point is refused, and nothing moves.
    f.env.warp(1).await;
    assert_err(f.claim(0, 1).await, E::ClaimExceedsEarned);
    assert_eq!(f.env.balance(f.payout[0]).await, EACH * PER_POINT);

    // Another client claims all at once; the run's totals add up.
    f.claim(1, EACH).await.unwrap();
    assert_eq!(f.env.balance(f.payout[1]).await, EACH * PER_POINT);
    assert_eq!(f.totals().await, (2 * EACH, 2 * EACH * PER_POINT));
    assert_eq!(f.env.balance(escrow).await, EACH * PER_POINT);
}

#[tokio::test]
async fn over_claims_and_zero_claims_are_refused() {
    let mut f = earned("over", EARNING * PER_POINT).await;
    assert_err(f.claim(0, EACH + 1).await, E::ClaimExceedsEarned);
    assert_err(f.claim(0, u64::MAX).await, E::ClaimExceedsEarned);
    assert_err(f.claim(0, 0).await, E::ClaimZero);
    assert_eq!(f.claimed(0).await, (0, 0));
    assert_eq!(f.env.balance(f.payout[0]).await, 0);
    assert_eq!(f.env.balance(f.run.collateral).await, EARNING * PER_POINT);
    f.claim(0, EACH).await.unwrap();
}

#[tokio::test]
async fn slashed_points_lower_what_can_still_be_claimed() {
    let mut f = earned("slashed", EARNING * PER_POINT).await;
    f.claim(0, 120).await.unwrap();
    // Ejections cannot be staged cheaply here, so the ledger's `slashed` is written directly
    // (set_account) on the run the real epoch produced: 200 earned, 50 slashed.
    let signer = f.clients[0].wallet.pubkey().to_bytes();
    f.env
        .edit_coordinator(&f.run, |a| {
            let c = a.state.clients_state.clients_mut().iter_mut().find(|c| c.id.signer == signer);
            c.unwrap().slashed = 50;
        })
        .await;
    // 200 − 50 − 120 = 30 left.
    assert_err(f.claim(0, 31).await, E::ClaimExceedsEarned);
    f.claim(0, 30).await.unwrap();
    assert_eq!(f.claimed(0).await, (150, 150 * PER_POINT));
    // A slash beyond what is left never takes back what was paid: nothing is claimable.
    f.env
        .edit_coordinator(&f.run, |a| {
            let c = a.state.clients_state.clients_mut().iter_mut().find(|c| c.id.signer == signer);
            c.unwrap().slashed = 190;
        })
        .await;
    f.env.warp(1).await;
    assert_err(f.claim(0, 1).await, E::ClaimExceedsEarned);
    assert_eq!(f.env.balance(f.payout[0]).await, 150 * PER_POINT);
}

#[tokio::test]
async fn a_short_escrow_refuses_until_anyone_tops_it_up() {
    // The escrow holds 100 points' worth.
    let mut f = earned("short", 100 * PER_POINT).await;
    let escrow = f.run.collateral;
    assert_err(f.claim(0, 101).await, E::EscrowShort);
    assert_eq!(f.claimed(0).await, (0, 0));
    assert_eq!(f.totals().await, (0, 0));
    assert_eq!(f.env.balance(escrow).await, 100 * PER_POINT);
    assert_eq!(f.env.balance(f.payout[0]).await, 0);

    // Anyone tops it up with a plain SPL transfer.
    let donor = Keypair::new();
    let donor_tokens =
        f.env.funded_token_account(&f.run.mint, &donor.pubkey(), 500 * PER_POINT).await;
    f.env.fund(&donor.pubkey()).await;
    f.env.transfer(&donor_tokens, &escrow, &donor, PER_POINT).await.unwrap();
    assert_eq!(f.env.balance(escrow).await, 101 * PER_POINT);

    f.claim(0, 101).await.unwrap();
    assert_eq!(f.env.balance(f.payout[0]).await, 101 * PER_POINT);
    assert_eq!(f.env.balance(escrow).await, 0);
    assert_eq!(f.claimed(0).await, (101, 101 * PER_POINT));
    // Empty now: the next claim waits for the next top-up.
    assert_err(f.claim(1, 1).await, E::EscrowShort);
}

#[tokio::test]
async fn claims_with_wrong_accounts_are_refused() {
    let mut f = earned("wrong", EARNING * PER_POINT).await;
    let run = TRun::planned("wrong", 100, f.run.mint);
    let a = f.clients[0].wallet.insecure_clone();
    let b = f.clients[1].wallet.insecure_clone();

    // B signs with A's participant PDA.
    let mut accounts = claim_accounts(&b.pubkey(), &f.payout[1], &run);
    accounts.participant = run.participant(&a.pubkey());
    let r = f.env.send(ix_claim_with(accounts, 10), &[&b]).await;
    assert_anchor_err(r, 1, AnchorError::ConstraintSeeds);

    // A's key as user without A's signature.
    let mut ix = ix_participant_claim(&a.pubkey(), &f.payout[1], &run, 10);
    ix.accounts[0].is_signer = false;
    assert_anchor_err(f.env.send(ix, &[]).await, 1, AnchorError::AccountNotSigner);

    // Paid into a token account of another mint.
    let other_mint = Keypair::new();
    f.env.create_mint(&other_mint).await;
    let wrong = f.env.funded_token_account(&other_mint.pubkey(), &a.pubkey(), 0).await;
    let ix = ix_participant_claim(&a.pubkey(), &wrong, &run, 10);
    assert_err(f.env.send(ix, &[&a]).await, E::WrongCollateralMint);

    // Paid from a token account other than the run's escrow PDA (same mint, the Run as
    // authority, funded): the seeds check refuses it.
    let decoy = f.env.funded_token_account(&f.run.mint, &f.run.address, 1000 * PER_POINT).await;
    let mut accounts = claim_accounts(&a.pubkey(), &f.payout[0], &run);
    accounts.run_collateral = decoy;
    let r = f.env.send(ix_claim_with(accounts, 10), &[&a]).await;
    assert_anchor_err(r, 1, AnchorError::ConstraintSeeds);

    // Not the SPL Token program.
    let mut ix = ix_participant_claim(&a.pubkey(), &f.payout[0], &run, 10);
    ix.accounts[6].pubkey = anchor_lang::system_program::ID;
    assert_anchor_err(f.env.send(ix, &[&a]).await, 1, AnchorError::InvalidProgramId);

    assert_eq!(f.claimed(0).await, (0, 0));
    assert_eq!(f.claimed(1).await, (0, 0));
    assert_eq!(f.env.balance(f.run.collateral).await, EARNING * PER_POINT);
    f.claim(0, 10).await.unwrap();
}

#[tokio::test]
async fn the_ledger_must_be_the_runs_and_list_the_user() {
    let mut f = earned("ledger", EARNING * PER_POINT).await;
    let run = TRun::planned("ledger", 100, f.run.mint);
    let a = f.clients[0].wallet.insecure_clone();

    // Another treasurer run's coordinator account, in which A has points too (written directly,
    // set_account): refused, it is not this run's ledger.
    let other = f.env.new_run("ledger-other", 101, PER_POINT).await;
    let signer = a.pubkey().to_bytes();
    f.env
        .edit_coordinator(&other, |acc| {
            let cs = &mut acc.state.clients_state;
            cs.clients[0].id.signer = signer;
            cs.clients[0].earned = 10_000;
            cs.num_clients = 1;
        })
        .await;
    let mut accounts = claim_accounts(&a.pubkey(), &f.payout[0], &run);
    accounts.coordinator_account = other.account;
    let r = f.env.send(ix_claim_with(accounts, EACH + 1), &[&a]).await;
    assert_err(r, E::CoordinatorAccountMismatch);

    // An account that is not a coordinator account at all (the escrow): the owner check.
    let mut accounts = claim_accounts(&a.pubkey(), &f.payout[0], &run);
    accounts.coordinator_account = f.run.collateral;
    let r = f.env.send(ix_claim_with(accounts, 1), &[&a]).await;
    assert_anchor_err(r, 1, AnchorError::AccountOwnedByWrongProgram);

    // A wallet the coordinator never registered, with its own Participant.
    let stranger = Keypair::new();
    f.env.participant_create(&run, &stranger).await.unwrap();
    let to = f.env.funded_token_account(&f.run.mint, &stranger.pubkey(), 0).await;
    let ix = ix_participant_claim(&stranger.pubkey(), &to, &run, 1);
    assert_err(f.env.send(ix, &[&stranger]).await, E::ParticipantNotRegistered);

    // A registered wallet without a Participant account.
    let nobody = Keypair::new();
    let ix = ix_participant_claim(&nobody.pubkey(), &to, &run, 1);
    assert_anchor_err(f.env.send(ix, &[&nobody]).await, 1, AnchorError::AccountNotInitialized);

    assert_eq!(f.env.balance(f.run.collateral).await, EARNING * PER_POINT);
    assert_eq!(f.totals().await, (0, 0));
}

#[tokio::test]
async fn points_of_a_second_epoch_are_claimable_on_top() {
    let mut f = earned("epochs", 2 * EARNING * PER_POINT).await;
    f.claim(2, EACH).await.unwrap();
    assert_err(f.claim(2, 1).await, E::ClaimExceedsEarned);
    // A second real epoch: another 200 points each.
    let clients = std::mem::take(&mut f.clients);
    f.env.run_epoch(&f.run, &clients).await;
    f.clients = clients;
    f.claim(2, EACH).await.unwrap();
    assert_eq!(f.claimed(2).await, (2 * EACH, 2 * EACH * PER_POINT));
    assert_eq!(f.env.balance(f.payout[2]).await, 2 * EACH * PER_POINT);
    f.claim(0, 2 * EACH).await.unwrap();
    assert_eq!(f.totals().await, (4 * EACH, 4 * EACH * PER_POINT));
}

/// Issue 26, finding 4: the escrow itself as the payment's destination would move nothing yet
/// mark the points paid.
#[tokio::test]
async fn a_claim_paid_into_the_escrow_itself_is_refused() {
    let mut f = earned("self-pay", EARNING * PER_POINT).await;
    let a = f.clients[0].wallet.insecure_clone();
    let ix = ix_participant_claim(&a.pubkey(), &f.run.collateral, &f.run, EACH);
    assert_err(f.env.send(ix, &[&a]).await, E::RunCollateralAsDestination);
    assert_eq!(f.claimed(0).await, (0, 0));
    assert_eq!(f.totals().await, (0, 0));
    assert_eq!(f.env.balance(f.run.collateral).await, EARNING * PER_POINT);
    f.claim(0, EACH).await.unwrap();
}

/// Issue 26, finding 1: once the 256-entry list is full, a stranger's `join_run` may reuse only
/// an entry without points; a wallet whose points are unpaid keeps its entry and can claim. The
/// list is written directly (set_account: 256 real joins cost minutes here): three real clients
/// with 200 points each, a victim with 1,000, and 252 more wallets with 1 point each, all
/// stale (joined two generations ago, not in the epoch).
#[tokio::test]
async fn a_strangers_join_never_erases_unpaid_points() {
    let victim = Keypair::new();
    let mut f = earned("evict", (EARNING + 1000) * PER_POINT).await;
    f.env.participant_create(&f.run, &victim).await.unwrap();
    let to = f.env.funded_token_account(&f.run.mint, &victim.pubkey(), 0).await;
    let victim_key = victim.pubkey().to_bytes();
    let fill = |a: &mut psyche_coordinator::CoordinatorAccount, spare: Option<usize>| {
        let cs = &mut a.state.clients_state;
        cs.next_active += 5;
        for i in 0..psyche_coordinator::constants::MAX_REGISTERED_CLIENTS {
            let c = &mut cs.clients[i];
            if i == 3 {
                c.id.signer = victim_key;
                c.id.p2p_identity = victim_key;
                c.earned = 1000;
            } else if i > 3 {
                let mut key = [0x77u8; 32];
                key[..8].copy_from_slice(&(i as u64).to_le_bytes());
                c.id.signer = key;
                c.id.p2p_identity = key;
                c.earned = 1;
            }
            // The victim joined longest ago: today's rule reused its entry first.
            c.active = u64::from(i != 3);
            c.slashed = if spare == Some(i) { c.earned } else { 0 };
        }
        cs.num_clients = cs.clients.len() as u64;
        a.state.coordinator.epoch_state.num_clients = 0;
    };
    f.env.edit_coordinator(&f.run, |a| fill(a, None)).await;

    // Every entry holds points: the stranger is refused, nothing is erased.
    let stranger = Client::seeded("evict/stranger", 0xee);
    let r = f.env.join(&f.run, &stranger).await;
    let full = u32::from(psyche_coordinator::error::CoordinatorProgramError::ClientsFull);
    assert_eq!(custom_code(r), full);
    let ix = ix_participant_claim(&victim.pubkey(), &to, &f.run, 1000);
    f.env.send(ix, &[&victim]).await.expect("the victim's points are still claimable");
    assert_eq!(f.env.balance(to).await, 1000 * PER_POINT);

    // An entry whose points were all slashed holds nothing: that one is reused.
    f.env.edit_coordinator(&f.run, |a| fill(a, Some(200))).await;
    f.env.warp(1).await;
    f.env.join(&f.run, &stranger).await.expect("a pointless entry is reused");
    let account = f.env.coordinator(&f.run).await;
    let cs = &account.state.clients_state;
    assert_eq!(cs.clients()[200].id, stranger.id());
    assert_eq!(cs.clients()[3].id.signer, victim_key);
    assert_eq!((cs.clients()[3].earned, cs.clients()[0].earned), (1000, EACH));
}
