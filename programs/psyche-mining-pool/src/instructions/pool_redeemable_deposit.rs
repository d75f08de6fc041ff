use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};

use crate::constants::POOL_REDEEMABLE_SEEDS_PREFIX;
use crate::error::MiningPoolError;
use crate::instructions::transfer::transfer_signed_by;
use crate::state::Pool;

/// The authority deposits earnings (redeemable tokens) for the lenders to claim. Frozen pools
/// only: the shares must be fixed before any earnings exist, or a late deposit could take part of
/// what earlier lenders earned.
///
/// Accounts:
/// 0. `[signer]` authority: must be `pool.authority` (and control `authority_redeemable`).
/// 1. `[writable]` authority_redeemable: a token account of the redeemable mint (pays).
/// 2. `[writable]` pool.
/// 3. `[writable]` pool_redeemable: the PDA `["PoolRedeemable", pool]`.
/// 4. `[]` token_program.
#[derive(Accounts)]
pub struct PoolRedeemableDeposit<'info> {
    /// The pool's authority.
    pub authority: Signer<'info>,

    /// Where the earnings come from; the token program checks that `authority` may spend it.
    #[account(
        mut,
        constraint = authority_redeemable.mint == pool.redeemable_mint
            @ MiningPoolError::WrongRedeemableMint,
    )]
    pub authority_redeemable: Box<Account<'info, TokenAccount>>,

    /// The pool PDA `["Pool", index LE]`.
    #[account(
        mut,
        has_one = authority @ MiningPoolError::NotPoolAuthority,
        constraint = pool.frozen @ MiningPoolError::PoolNotFrozen,
    )]
    pub pool: Box<Account<'info, Pool>>,

    /// The pool's redeemable token account.
    #[account(mut, seeds = [POOL_REDEEMABLE_SEEDS_PREFIX, pool.key().as_ref()], bump)]
    pub pool_redeemable: Box<Account<'info, TokenAccount>>,

    /// The SPL Token program.
    pub token_program: Program<'info, Token>,
}

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct PoolRedeemableDepositParams {
    /// Base units of the redeemable token deposited (> 0).
    pub redeemable_amount: u64,
}

pub fn pool_redeemable_deposit_processor(
    ctx: Context<PoolRedeemableDeposit>,
    params: PoolRedeemableDepositParams,
) -> Result<()> {
    let amount = params.redeemable_amount;
    require!(amount > 0, MiningPoolError::AmountZero);
    let accounts = ctx.accounts;
    accounts.pool.total_deposited_redeemable_amount = accounts
        .pool
        .total_deposited_redeemable_amount
        .checked_add(amount)
        .ok_or(MiningPoolError::ArithmeticOverflow)?;
    transfer_signed_by(
        accounts.token_program.to_account_info(),
        accounts.authority.to_account_info(),
        accounts.authority_redeemable.to_account_info(),
        accounts.pool_redeemable.to_account_info(),
        amount,
    )
}
