use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};

use crate::constants::POOL_REDEEMABLE_SEEDS_PREFIX;
use crate::error::MiningPoolError;
use crate::instructions::transfer::transfer_from_pool;
use crate::shares;
use crate::state::{Lender, Pool};

/// A lender claims redeemable tokens: any amount from 1 to what is left of its share,
/// `floor(total_deposited_redeemable × deposited / total_deposited_collateral) − claimed`.
/// Frozen pools only, so the shares cannot move under a claim.
///
/// Accounts:
/// 0. `[signer]` user: must be `lender.user`.
/// 1. `[writable]` user_redeemable: any token account of the redeemable mint but the pool's own
///    (receives).
/// 2. `[writable]` pool.
/// 3. `[writable]` pool_redeemable: the PDA `["PoolRedeemable", pool]`.
/// 4. `[writable]` lender: the user's lender account in this pool.
/// 5. `[]` token_program.
#[derive(Accounts)]
pub struct LenderClaim<'info> {
    /// The lending wallet.
    pub user: Signer<'info>,

    /// Where the payment goes (the user chooses).
    #[account(
        mut,
        constraint = user_redeemable.mint == pool.redeemable_mint
            @ MiningPoolError::WrongRedeemableMint,
        constraint = user_redeemable.key() != pool_redeemable.key()
            @ MiningPoolError::PoolAccountAsDestination,
    )]
    pub user_redeemable: Box<Account<'info, TokenAccount>>,

    /// The pool PDA `["Pool", index LE]`.
    #[account(mut, constraint = pool.frozen @ MiningPoolError::PoolNotFrozen)]
    pub pool: Box<Account<'info, Pool>>,

    /// The pool's redeemable token account.
    #[account(mut, seeds = [POOL_REDEEMABLE_SEEDS_PREFIX, pool.key().as_ref()], bump)]
    pub pool_redeemable: Box<Account<'info, TokenAccount>>,

    /// The lender PDA `["Lender", pool, user]` (see `LenderDeposit::lender`).
    #[account(
        mut,
        has_one = pool @ MiningPoolError::LenderPoolMismatch,
        has_one = user @ MiningPoolError::NotLenderUser,
    )]
    pub lender: Box<Account<'info, Lender>>,

    /// The SPL Token program.
    pub token_program: Program<'info, Token>,
}

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct LenderClaimParams {
    /// Base units of the redeemable token claimed (1..=claimable).
    pub redeemable_amount: u64,
}

pub fn lender_claim_processor(ctx: Context<LenderClaim>, params: LenderClaimParams) -> Result<()> {
    let amount = params.redeemable_amount;
    let accounts = ctx.accounts;
    let pool = &mut accounts.pool;
    let lender = &mut accounts.lender;
    lender.claimed_redeemable_amount = shares::claim(
        pool.total_deposited_redeemable_amount,
        lender.deposited_collateral_amount,
        pool.total_deposited_collateral_amount,
        lender.claimed_redeemable_amount,
        amount,
    )?;
    pool.total_claimed_redeemable_amount = pool
        .total_claimed_redeemable_amount
        .checked_add(amount)
        .ok_or(MiningPoolError::ArithmeticOverflow)?;
    transfer_from_pool(
        accounts.token_program.to_account_info(),
        &accounts.pool,
        accounts.pool_redeemable.to_account_info(),
        accounts.user_redeemable.to_account_info(),
        amount,
    )
}
