//! The mining pool's instructions through the real Solana runtime (solana-program-test with the
//! bundled SPL Token program): every happy path, and every refusal with its exact error code.
//! `PSYCHE_SBF=1` runs the same tests on the SBF build.

mod harness;

use anchor_lang::error::ErrorCode as AnchorError;
use anchor_lang::solana_program::system_instruction;
use anchor_spl::token::spl_token;
use harness::*;
use psyche_mining_pool::error::MiningPoolError as E;
use psyche_mining_pool::{Lender, Pool};
use solana_sdk::instruction::InstructionError;
use solana_sdk::signature::Signer;
use solana_sdk::transaction::TransactionError;

const CAP: u64 = 1_000_000;

/// A pool with a cap of `CAP` and lenders that deposited `deposits` (and hold `extra` more
/// collateral each), earnings of `redeemable` in the authority's account.
async fn setup(
    env: &mut Env,
    label: &str,
    deposits: &[u64],
    extra: u64,
    redeemable: u64,
) -> (PoolKeys, Vec<LenderKeys>) {
    let pool = env.create_pool(label, 7, CAP, redeemable).await;
    let mut lenders = Vec::new();
    for (i, &d) in deposits.iter().enumerate() {
        let l = env.create_lender(&pool, &format!("{label}/lender{i}"), d + extra).await;
        if d > 0 {
            env.deposit(&pool, &l, d).await.expect("deposit");
        }
        lenders.push(l);
    }
    (pool, lenders)
}

/// `lender`'s user's lender account in another pool.
async fn lender_in(env: &mut Env, pool: &PoolKeys, lender: &LenderKeys) -> LenderKeys {
    let user = lender.user.insecure_clone();
    let address = Lender::find_pda(&pool.pool, &user.pubkey()).0;
    let ix = ix_lender_create(&env.payer().pubkey(), &user.pubkey(), pool.pool, address);
    env.send(ix, &[&user]).await.expect("lender_create");
    LenderKeys {
        user,
        lender: address,
        collateral: lender.collateral,
        redeemable: lender.redeemable,
    }
}

#[tokio::test]
async fn pool_create_makes_the_pool_and_its_token_accounts() {
    let mut env = Env::new().await;
    let pool = env.create_pool("create", 42, CAP, 0).await;
    let (address, bump) = Pool::find_pda(42);
    assert_eq!(pool.pool, address);
    let state = env.pool(pool.pool).await;
    assert_eq!(
        state,
        Pool {
            bump,
            index: 42,
            authority: pool.authority.pubkey(),
            collateral_mint: pool.collateral_mint,
            redeemable_mint: pool.redeemable_mint,
            max_deposit_collateral_amount: CAP,
            total_deposited_collateral_amount: 0,
            total_extracted_collateral_amount: 0,
            total_deposited_redeemable_amount: 0,
            total_claimed_redeemable_amount: 0,
            frozen: false,
        }
    );
    assert_eq!(env.account_data(pool.pool).await.unwrap().len(), Pool::SPACE);
    for (account, mint) in
        [(pool.pool_collateral, pool.collateral_mint), (pool.pool_redeemable, pool.redeemable_mint)]
    {
        let token = env.token_account(account).await;
        assert_eq!(token.mint, mint);
        assert_eq!(token.owner, pool.pool, "the pool PDA is the token authority");
        assert_eq!(token.amount, 0);
        assert_eq!(token.delegate, None.into());
        let info = env.ctx.banks_client.get_account(account).await.unwrap().unwrap();
        assert_eq!(info.owner, spl_token::ID);
        assert_eq!(info.lamports, rent_exempt(165));
    }

    // The same index again is refused (the system program finds the PDA in use).
    let again = env.pool_keys("create/again", 42).await;
    let ix = ix_pool_create(&env.payer().pubkey(), &again, CAP);
    let result = env.send(ix, &[&again.authority]).await;
    assert_eq!(custom_code(result), 0, "SystemError::AccountAlreadyInUse");
}

#[tokio::test]
async fn pool_create_copes_with_prefunded_token_account_addresses() {
    let mut env = Env::new().await;
    let keys = env.pool_keys("prefunded", 3).await;
    // Anyone can send lamports to the PDAs before the pool exists; that must not block it.
    let payer = env.payer().pubkey();
    let ixs = [
        system_instruction::transfer(&payer, &keys.pool_collateral, rent_exempt(0)),
        system_instruction::transfer(&payer, &keys.pool_redeemable, rent_exempt(165) + 5),
    ];
    env.send_many(&ixs, &[]).await.unwrap();
    let ix = ix_pool_create(&payer, &keys, CAP);
    env.send(ix, &[&keys.authority]).await.expect("pool_create over prefunded addresses");
    let token = env.token_account(keys.pool_collateral).await;
    assert_eq!((token.mint, token.owner), (keys.collateral_mint, keys.pool));
    let info = env.ctx.banks_client.get_account(keys.pool_collateral).await.unwrap().unwrap();
    assert_eq!(info.lamports, rent_exempt(165), "topped up to the rent");
    let info = env.ctx.banks_client.get_account(keys.pool_redeemable).await.unwrap().unwrap();
    assert_eq!(info.lamports, rent_exempt(165) + 5, "nothing taken from a richer account");
    assert_eq!(env.token_account(keys.pool_redeemable).await.owner, keys.pool);
}

#[tokio::test]
async fn pool_create_refuses_wrong_token_account_addresses() {
    let mut env = Env::new().await;
    let keys = env.pool_keys("create-wrong", 4).await;
    let mut swapped = PoolKeys::new(
        4,
        keys.authority.insecure_clone(),
        keys.collateral_mint,
        keys.redeemable_mint,
        keys.authority_collateral,
        keys.authority_redeemable,
    );
    swapped.pool_collateral = keys.pool_redeemable;
    swapped.pool_redeemable = keys.pool_collateral;
    let ix = ix_pool_create(&env.payer().pubkey(), &swapped, CAP);
    assert_anchor_err(env.send(ix, &[&keys.authority]).await, AnchorError::ConstraintSeeds);
    // A token account is not a mint.
    let mut not_mint = PoolKeys::new(
        4,
        keys.authority.insecure_clone(),
        keys.authority_collateral,
        keys.redeemable_mint,
        keys.authority_collateral,
        keys.authority_redeemable,
    );
    not_mint.index = 4;
    let ix = ix_pool_create(&env.payer().pubkey(), &not_mint, CAP);
    let result = env.send(ix, &[&keys.authority]).await;
    // anchor-spl's `Mint` unpacks with SPL Token's own check, a plain InvalidAccountData.
    assert_eq!(
        result.unwrap_err().unwrap(),
        TransactionError::InstructionError(1, InstructionError::InvalidAccountData)
    );
    assert!(env.account_data(keys.pool).await.is_none(), "nothing was created");
}

#[tokio::test]
async fn pool_update_sets_the_cap_and_freezes_one_way() {
    let mut env = Env::new().await;
    let (pool, _) = setup(&mut env, "update", &[300, 200], 0, 0).await;
    let stranger = seeded_keypair("update/stranger");

    // Only the authority.
    let ix = ix_pool_update(&stranger.pubkey(), pool.pool, Some(600), None);
    assert_err(env.send(ix, &[&stranger]).await, E::NotPoolAuthority);
    let ix = ix_pool_update(&stranger.pubkey(), pool.pool, None, Some(true));
    assert_err(env.send(ix, &[&stranger]).await, E::NotPoolAuthority);

    // The cap: down to the deposits, not below.
    env.update(&pool, Some(500), None).await.unwrap();
    assert_eq!(env.pool(pool.pool).await.max_deposit_collateral_amount, 500);
    assert_err(env.update(&pool, Some(499), None).await, E::PoolCapBelowDeposits);
    env.update(&pool, Some(2_000), None).await.unwrap();
    assert_eq!(env.pool(pool.pool).await.max_deposit_collateral_amount, 2_000);

    // `freeze: Some(false)` on an unfrozen pool changes nothing; an empty update neither.
    env.update(&pool, None, Some(false)).await.unwrap();
    env.update(&pool, None, None).await.unwrap();
    let before = env.pool(pool.pool).await;
    assert!(!before.frozen);

    // A cap change and a freeze together: the cap applies, then the freeze.
    env.update(&pool, Some(1_500), Some(true)).await.unwrap();
    let state = env.pool(pool.pool).await;
    assert!(state.frozen);
    assert_eq!(state.max_deposit_collateral_amount, 1_500);

    // Frozen: no unfreeze, no cap change (not even to the same value); freezing again is fine.
    assert_err(env.update(&pool, None, Some(false)).await, E::PoolUnfreezeRefused);
    assert_err(env.update(&pool, Some(1_600), None).await, E::PoolFrozen);
    assert_err(env.update(&pool, Some(1_500), Some(true)).await, E::PoolFrozen);
    env.update(&pool, None, Some(true)).await.unwrap();
    assert_eq!(env.pool(pool.pool).await, state);
}

#[tokio::test]
async fn lender_create_and_deposit() {
    let mut env = Env::new().await;
    let pool = env.create_pool("deposit", 1, CAP, 0).await;
    let lender = env.create_lender(&pool, "deposit/alice", 1_000).await;
    let bump = Lender::find_pda(&pool.pool, &lender.user.pubkey()).1;
    let fresh = Lender {
        bump,
        pool: pool.pool,
        user: lender.user.pubkey(),
        deposited_collateral_amount: 0,
        claimed_redeemable_amount: 0,
    };
    assert_eq!(env.lender(lender.lender).await, fresh);
    assert_eq!(env.account_data(lender.lender).await.unwrap().len(), Lender::SPACE);

    // Twice is refused (the PDA exists).
    let ix =
        ix_lender_create(&env.payer().pubkey(), &lender.user.pubkey(), pool.pool, lender.lender);
    assert_eq!(custom_code(env.send(ix, &[&lender.user]).await), 0, "AccountAlreadyInUse");

    env.deposit(&pool, &lender, 400).await.unwrap();
    env.deposit(&pool, &lender, 250).await.unwrap();
    assert_eq!(env.balance(lender.collateral).await, 350);
    assert_eq!(env.balance(pool.pool_collateral).await, 650);
    assert_eq!(
        env.lender(lender.lender).await,
        Lender { deposited_collateral_amount: 650, ..fresh }
    );
    assert_eq!(env.pool(pool.pool).await.total_deposited_collateral_amount, 650);
    assert_err(env.deposit(&pool, &lender, 0).await, E::AmountZero);
    // More than the user holds: the token program refuses the transfer.
    assert_token_err(
        env.deposit(&pool, &lender, 351).await,
        spl_token::error::TokenError::InsufficientFunds,
    );
}

#[tokio::test]
async fn deposits_stop_at_the_cap_and_at_the_freeze() {
    let mut env = Env::new().await;
    let pool = env.create_pool("cap", 2, 1_000, 0).await;
    let a = env.create_lender(&pool, "cap/a", 2_000).await;
    let b = env.create_lender(&pool, "cap/b", 2_000).await;
    env.deposit(&pool, &a, 600).await.unwrap();
    assert_err(env.deposit(&pool, &b, 401).await, E::PoolCapExceeded);
    env.deposit(&pool, &b, 400).await.unwrap();
    assert_err(env.deposit(&pool, &a, 1).await, E::PoolCapExceeded);
    env.update(&pool, Some(1_100), None).await.unwrap();
    env.deposit(&pool, &a, 50).await.unwrap();
    env.freeze(&pool).await;
    assert_err(env.deposit(&pool, &b, 10).await, E::PoolFrozen);
    let state = env.pool(pool.pool).await;
    assert_eq!(state.total_deposited_collateral_amount, 1_050);
    assert_eq!(env.lender(a.lender).await.deposited_collateral_amount, 650);
    assert_eq!(env.lender(b.lender).await.deposited_collateral_amount, 400);
    assert_eq!(env.balance(pool.pool_collateral).await, 1_050);
    assert_eq!(env.balance(b.collateral).await, 1_600);
}

#[tokio::test]
async fn deposits_refuse_wrong_accounts() {
    let mut env = Env::new().await;
    let pool = env.create_pool("wrong-dep", 5, CAP, 0).await;
    let other = env.create_pool("wrong-dep/other", 6, CAP, 0).await;
    let alice = env.create_lender(&pool, "wrong-dep/alice", 1_000).await;
    let bob = env.create_lender(&pool, "wrong-dep/bob", 1_000).await;
    let alice_other = lender_in(&mut env, &other, &alice).await;
    let a = alice.user.pubkey();

    // A token account of the redeemable mint as the source.
    let ix = ix_lender_deposit(&a, alice.redeemable, &pool, alice.lender, 10);
    assert_err(env.send(ix, &[&alice.user]).await, E::WrongCollateralMint);
    // Another pool's collateral account, or the pool's redeemable account, as the destination.
    for wrong in [other.pool_collateral, pool.pool_redeemable] {
        let ix = ix_lender_deposit_with(&a, alice.collateral, pool.pool, wrong, alice.lender, 10);
        assert_anchor_err(env.send(ix, &[&alice.user]).await, AnchorError::ConstraintSeeds);
    }
    // Bob's lender account, signed by Alice.
    let ix = ix_lender_deposit(&a, alice.collateral, &pool, bob.lender, 10);
    assert_err(env.send(ix, &[&alice.user]).await, E::NotLenderUser);
    // Alice's lender account of another pool.
    let ix = ix_lender_deposit(&a, alice.collateral, &pool, alice_other.lender, 10);
    assert_err(env.send(ix, &[&alice.user]).await, E::LenderPoolMismatch);
    // Bob's collateral account with Alice's lender: the token program refuses Alice.
    let ix = ix_lender_deposit(&a, bob.collateral, &pool, alice.lender, 10);
    assert_token_err(
        env.send(ix, &[&alice.user]).await,
        spl_token::error::TokenError::OwnerMismatch,
    );
    // A lender account in the pool's place.
    let ix = ix_lender_deposit_with(
        &a,
        alice.collateral,
        alice.lender,
        pool.pool_collateral,
        alice.lender,
        10,
    );
    assert_anchor_err(
        env.send(ix, &[&alice.user]).await,
        AnchorError::AccountDiscriminatorMismatch,
    );

    // Nothing moved.
    assert_eq!(env.balance(alice.collateral).await, 1_000);
    assert_eq!(env.balance(bob.collateral).await, 1_000);
    assert_eq!(env.balance(pool.pool_collateral).await, 0);
    assert_eq!(env.pool(pool.pool).await.total_deposited_collateral_amount, 0);
}

#[tokio::test]
async fn pool_extract_takes_collateral_for_the_authority_only() {
    let mut env = Env::new().await;
    let (pool, lenders) = setup(&mut env, "extract", &[700, 300], 0, 0).await;
    let other = env.create_pool("extract/other", 8, CAP, 0).await;
    let stranger = seeded_keypair("extract/stranger");
    let stranger_collateral = env
        .create_token_account(
            "extract/stranger/collateral",
            &pool.collateral_mint,
            &stranger.pubkey(),
            0,
        )
        .await;

    let ix = ix_pool_extract(&stranger.pubkey(), stranger_collateral, &pool, 100);
    assert_err(env.send(ix, &[&stranger]).await, E::NotPoolAuthority);
    let authority = pool.authority.pubkey();
    let ix = ix_pool_extract(&authority, pool.authority_redeemable, &pool, 100);
    assert_err(env.send(ix, &[&pool.authority]).await, E::WrongCollateralMint);
    for wrong in [pool.pool_redeemable, other.pool_collateral] {
        let ix = ix_pool_extract_with(&authority, pool.authority_collateral, pool.pool, wrong, 1);
        assert_anchor_err(env.send(ix, &[&pool.authority]).await, AnchorError::ConstraintSeeds);
    }
    // The pool's own collateral account as the destination.
    let ix = ix_pool_extract(&authority, pool.pool_collateral, &pool, 100);
    assert_err(env.send(ix, &[&pool.authority]).await, E::PoolAccountAsDestination);
    assert_err(env.extract(&pool, 0).await, E::AmountZero);
    assert_err(env.extract(&pool, 1_001).await, E::ExtractExceedsCollateral);

    env.extract(&pool, 600).await.unwrap();
    // Any time: also once frozen, and to any collateral account (here: a lender's).
    env.freeze(&pool).await;
    let ix = ix_pool_extract(&authority, lenders[1].collateral, &pool, 400);
    env.send(ix, &[&pool.authority]).await.unwrap();
    assert_eq!(env.balance(pool.authority_collateral).await, 600);
    assert_eq!(env.balance(lenders[1].collateral).await, 400);
    assert_eq!(env.balance(pool.pool_collateral).await, 0);
    let state = env.pool(pool.pool).await;
    assert_eq!(state.total_extracted_collateral_amount, 1_000);
    assert_eq!(state.total_deposited_collateral_amount, 1_000, "shares unchanged");
    assert_err(env.extract(&pool, 1).await, E::ExtractExceedsCollateral);
}

#[tokio::test]
async fn pool_redeemable_deposit_needs_a_frozen_pool_and_the_authority() {
    let mut env = Env::new().await;
    let (pool, lenders) = setup(&mut env, "earn", &[10], 0, 5_000).await;
    let other = env.create_pool("earn/other", 9, CAP, 0).await;
    assert_err(env.redeemable_deposit(&pool, 100).await, E::PoolNotFrozen);
    env.freeze(&pool).await;

    let stranger = seeded_keypair("earn/stranger");
    let stranger_redeemable = env
        .create_token_account(
            "earn/stranger/redeemable",
            &pool.redeemable_mint,
            &stranger.pubkey(),
            100,
        )
        .await;
    let ix = ix_pool_redeemable_deposit(&stranger.pubkey(), stranger_redeemable, &pool, 100);
    assert_err(env.send(ix, &[&stranger]).await, E::NotPoolAuthority);
    let authority = pool.authority.pubkey();
    let ix = ix_pool_redeemable_deposit(&authority, pool.authority_collateral, &pool, 100);
    assert_err(env.send(ix, &[&pool.authority]).await, E::WrongRedeemableMint);
    for wrong in [pool.pool_collateral, other.pool_redeemable] {
        let ix = ix_pool_redeemable_deposit_with(
            &authority,
            pool.authority_redeemable,
            pool.pool,
            wrong,
            1,
        );
        assert_anchor_err(env.send(ix, &[&pool.authority]).await, AnchorError::ConstraintSeeds);
    }
    // The authority cannot spend someone else's tokens.
    env.mint_to(&pool.redeemable_mint, &lenders[0].redeemable, 1).await;
    let ix = ix_pool_redeemable_deposit(&authority, lenders[0].redeemable, &pool, 1);
    assert_token_err(
        env.send(ix, &[&pool.authority]).await,
        spl_token::error::TokenError::OwnerMismatch,
    );
    assert_err(env.redeemable_deposit(&pool, 0).await, E::AmountZero);

    env.redeemable_deposit(&pool, 3_000).await.unwrap();
    env.redeemable_deposit(&pool, 1_500).await.unwrap();
    assert_eq!(env.balance(pool.pool_redeemable).await, 4_500);
    assert_eq!(env.balance(pool.authority_redeemable).await, 500);
    assert_eq!(env.pool(pool.pool).await.total_deposited_redeemable_amount, 4_500);
}

#[tokio::test]
async fn claims_pay_the_floor_share_in_pieces_and_never_more() {
    let mut env = Env::new().await;
    // Shares 1/3 and 2/3 of 1,000: entitlements 333 and 666, 1 base unit stays in the pool.
    let (pool, l) = setup(&mut env, "claim", &[100, 200, 0], 0, 1_000).await;
    assert_err(env.claim(&pool, &l[0], 1).await, E::PoolNotFrozen);
    env.freeze(&pool).await;
    assert_err(env.claim(&pool, &l[0], 1).await, E::ClaimExceedsShare);
    env.redeemable_deposit(&pool, 1_000).await.unwrap();

    assert_err(env.claim(&pool, &l[0], 334).await, E::ClaimExceedsShare);
    assert_err(env.claim(&pool, &l[0], 0).await, E::AmountZero);
    // In pieces: 100 + 200 + 33.
    for piece in [100, 200, 33] {
        env.claim(&pool, &l[0], piece).await.unwrap();
    }
    assert_eq!(env.balance(l[0].redeemable).await, 333);
    // Nothing left: a second claim of anything is refused.
    assert_err(env.claim(&pool, &l[0], 1).await, E::ClaimExceedsShare);
    env.claim(&pool, &l[1], 666).await.unwrap();
    assert_err(env.claim(&pool, &l[1], 666).await, E::ClaimExceedsShare);
    // A lender that deposited nothing has no share.
    assert_err(env.claim(&pool, &l[2], 1).await, E::ClaimExceedsShare);

    let lender0 = env.lender(l[0].lender).await;
    assert_eq!(
        (lender0.deposited_collateral_amount, lender0.claimed_redeemable_amount),
        (100, 333)
    );
    assert_eq!(env.lender(l[1].lender).await.claimed_redeemable_amount, 666);
    let state = env.pool(pool.pool).await;
    assert_eq!(state.total_claimed_redeemable_amount, 999);
    assert_eq!(env.balance(pool.pool_redeemable).await, 1);

    // More earnings later: each lender's entitlement grows, nobody else's claim changes it.
    env.mint_to(&pool.redeemable_mint, &pool.authority_redeemable, 2).await;
    env.redeemable_deposit(&pool, 2).await.unwrap();
    // floor(1,002 / 3) = 334, floor(2,004 / 3) = 668.
    assert_err(env.claim(&pool, &l[0], 2).await, E::ClaimExceedsShare);
    env.claim(&pool, &l[0], 1).await.unwrap();
    env.claim(&pool, &l[1], 2).await.unwrap();
    assert_eq!(env.balance(l[0].redeemable).await, 334);
    assert_eq!(env.balance(l[1].redeemable).await, 668);
    assert_eq!(env.balance(pool.pool_redeemable).await, 0);
}

#[tokio::test]
async fn claims_refuse_wrong_accounts() {
    let mut env = Env::new().await;
    let (pool, l) = setup(&mut env, "wrong-claim", &[100, 100], 0, 1_000).await;
    let other = env.create_pool("wrong-claim/other", 11, CAP, 0).await;
    let alice_other = lender_in(&mut env, &other, &l[0]).await;
    env.freeze(&pool).await;
    env.redeemable_deposit(&pool, 1_000).await.unwrap();
    let a = l[0].user.pubkey();

    // Bob's lender account, signed by Alice, paid to Alice.
    let ix = ix_lender_claim(&a, l[0].redeemable, &pool, l[1].lender, 10);
    assert_err(env.send(ix, &[&l[0].user]).await, E::NotLenderUser);
    let ix = ix_lender_claim(&a, l[0].redeemable, &pool, alice_other.lender, 10);
    assert_err(env.send(ix, &[&l[0].user]).await, E::LenderPoolMismatch);
    let ix = ix_lender_claim(&a, l[0].collateral, &pool, l[0].lender, 10);
    assert_err(env.send(ix, &[&l[0].user]).await, E::WrongRedeemableMint);
    for wrong in [pool.pool_collateral, other.pool_redeemable] {
        let ix = ix_lender_claim_with(&a, l[0].redeemable, pool.pool, wrong, l[0].lender, 10);
        assert_anchor_err(env.send(ix, &[&l[0].user]).await, AnchorError::ConstraintSeeds);
    }
    // Another pool with this pool's accounts: the payment account's mint is not the other
    // pool's redeemable mint (the first account checked).
    let ix = ix_lender_claim_with(
        &a,
        l[0].redeemable,
        other.pool,
        pool.pool_redeemable,
        l[0].lender,
        10,
    );
    assert_err(env.send(ix, &[&l[0].user]).await, E::WrongRedeemableMint);

    // The pool's own redeemable account as the destination.
    let ix = ix_lender_claim(&a, pool.pool_redeemable, &pool, l[0].lender, 10);
    assert_err(env.send(ix, &[&l[0].user]).await, E::PoolAccountAsDestination);

    assert_eq!(env.balance(pool.pool_redeemable).await, 1_000);
    assert_eq!(env.balance(l[0].redeemable).await, 0);
    assert_eq!(env.lender(l[0].lender).await.claimed_redeemable_amount, 0);
    // The payment may go to any account of the redeemable mint (here: Bob's).
    let ix = ix_lender_claim(&a, l[1].redeemable, &pool, l[0].lender, 500);
    env.send(ix, &[&l[0].user]).await.unwrap();
    assert_eq!(env.balance(l[1].redeemable).await, 500);
    assert_eq!(env.lender(l[0].lender).await.claimed_redeemable_amount, 500);
    assert_eq!(env.lender(l[1].lender).await.claimed_redeemable_amount, 0);
}

#[tokio::test]
async fn a_pool_without_deposits_has_no_shares() {
    let mut env = Env::new().await;
    let (pool, l) = setup(&mut env, "empty", &[0], 0, 100).await;
    env.freeze(&pool).await;
    env.redeemable_deposit(&pool, 100).await.unwrap();
    assert_err(env.claim(&pool, &l[0], 1).await, E::NothingDeposited);
}

/// Seven lenders with awkward deposits, two earnings deposits, claims in a mixed order and in
/// pieces: each lender ends with exactly its floor share, and the claims plus what stays in the
/// pool add up to the earnings (no token lost or created), the remainder under one per lender.
#[tokio::test]
async fn many_lenders_each_get_their_floor_share_whatever_the_order() {
    let mut env = Env::new().await;
    let deposits: [u64; 7] = [1, 3, 7, 10_007, 99_991, 123_457, 2];
    let (pool, l) = setup(&mut env, "many", &deposits, 0, 1_000_003 + 654_321).await;
    let total: u64 = deposits.iter().sum();
    env.freeze(&pool).await;
    env.extract(&pool, total / 2).await.unwrap();
    env.redeemable_deposit(&pool, 1_000_003).await.unwrap();

    let share = |d: u64, r: u64| (u128::from(r) * u128::from(d) / u128::from(total)) as u64;
    // Some claim early (in pieces), before the second deposit.
    for &(i, fraction) in &[(5usize, 2u64), (3, 1), (1, 1), (5, 1)] {
        let left =
            share(deposits[i], 1_000_003) - env.lender(l[i].lender).await.claimed_redeemable_amount;
        if left > 0 {
            env.claim(&pool, &l[i], (left / fraction).max(1)).await.unwrap();
        }
    }
    env.redeemable_deposit(&pool, 654_321).await.unwrap();
    let earnings = 1_000_003 + 654_321;
    for &i in &[6usize, 4, 0, 2, 5, 3, 1] {
        let lender = env.lender(l[i].lender).await;
        let left = share(deposits[i], earnings) - lender.claimed_redeemable_amount;
        assert_err(env.claim(&pool, &l[i], left + 1).await, E::ClaimExceedsShare);
        if left > 0 {
            let first = left.div_ceil(3);
            env.claim(&pool, &l[i], first).await.unwrap();
            if left > first {
                env.claim(&pool, &l[i], left - first).await.unwrap();
            }
        }
        assert_err(env.claim(&pool, &l[i], 1).await, E::ClaimExceedsShare);
    }
    let mut paid = 0;
    for (i, lender) in l.iter().enumerate() {
        let balance = env.balance(lender.redeemable).await;
        assert_eq!(balance, share(deposits[i], earnings), "lender {i}");
        assert_eq!(env.lender(lender.lender).await.claimed_redeemable_amount, balance);
        paid += balance;
    }
    let remainder = env.balance(pool.pool_redeemable).await;
    assert_eq!(paid + remainder, earnings, "no token lost or created");
    assert!(remainder < deposits.len() as u64, "remainder {remainder}");
    let state = env.pool(pool.pool).await;
    assert_eq!(state.total_claimed_redeemable_amount, paid);
    assert_eq!(state.total_deposited_redeemable_amount, earnings);
    assert_eq!(state.total_deposited_collateral_amount, total);
    assert_eq!(state.total_extracted_collateral_amount, total / 2);
    assert_eq!(env.balance(pool.pool_collateral).await, total - total / 2);
    // Lenders with tiny deposits got nothing or almost nothing, and that is their floor share.
    assert_eq!(env.balance(l[0].redeemable).await, share(1, earnings));
}
