use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};

use crate::constants::POOL_COLLATERAL_SEEDS_PREFIX;
use crate::error::MiningPoolError;
use crate::instructions::transfer::transfer_signed_by;
use crate::shares;
use crate::state::{Lender, Pool};

/// A lender deposits collateral. Unfrozen pools only (shares are fixed at the freeze), and the
/// pool's total may not pass its cap.
///
/// Accounts:
/// 0. `[signer]` user: must be `lender.user` (and control `user_collateral`).
/// 1. `[writable]` user_collateral: a token account of the collateral mint (pays).
/// 2. `[writable]` pool.
/// 3. `[writable]` pool_collateral: the PDA `["PoolCollateral", pool]`.
/// 4. `[writable]` lender: the user's lender account in this pool.
/// 5. `[]` token_program.
#[derive(Accounts)]
pub struct LenderDeposit<'info> {
    /// The lending wallet.
    pub user: Signer<'info>,

    /// Where the collateral comes from; the token program checks that `user` may spend it.
    #[account(
        mut,
        constraint = user_collateral.mint == pool.collateral_mint
            @ MiningPoolError::WrongCollateralMint,
    )]
    pub user_collateral: Box<Account<'info, TokenAccount>>,

    /// The pool PDA `["Pool", index LE]`.
    #[account(mut, constraint = !pool.frozen @ MiningPoolError::PoolFrozen)]
    pub pool: Box<Account<'info, Pool>>,

    /// The pool's collateral token account.
    #[account(mut, seeds = [POOL_COLLATERAL_SEEDS_PREFIX, pool.key().as_ref()], bump)]
    pub pool_collateral: Box<Account<'info, TokenAccount>>,

    /// The lender PDA `["Lender", pool, user]`: this program creates lenders only at that
    /// address, so matching the stored pool and user is the same check as the seeds.
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
pub struct LenderDepositParams {
    /// Base units of collateral deposited (> 0; the pool's total stays within its cap).
    pub collateral_amount: u64,
}

pub fn lender_deposit_processor(
    ctx: Context<LenderDeposit>,
    params: LenderDepositParams,
) -> Result<()> {
    let amount = params.collateral_amount;
    let accounts = ctx.accounts;
    let pool = &mut accounts.pool;
    pool.total_deposited_collateral_amount = shares::deposit_total(
        pool.total_deposited_collateral_amount,
        amount,
        pool.max_deposit_collateral_amount,
    )?;
    let lender = &mut accounts.lender;
    lender.deposited_collateral_amount = lender
        .deposited_collateral_amount
        .checked_add(amount)
        .ok_or(MiningPoolError::ArithmeticOverflow)?;
    transfer_signed_by(
        accounts.token_program.to_account_info(),
        accounts.user.to_account_info(),
        accounts.user_collateral.to_account_info(),
        accounts.pool_collateral.to_account_info(),
        amount,
    )
}
