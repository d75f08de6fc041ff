use anchor_lang::prelude::*;
use anchor_spl::token::{Token, TokenAccount};

use crate::constants::POOL_COLLATERAL_SEEDS_PREFIX;
use crate::error::MiningPoolError;
use crate::instructions::transfer::transfer_from_pool;
use crate::state::Pool;

/// The authority takes collateral out of the pool (to buy compute), at any time; recorded in
/// `total_extracted_collateral_amount`. Lenders' shares are unaffected: they are measured in
/// deposits, not in what the collateral account still holds.
///
/// Accounts:
/// 0. `[signer]` authority: must be `pool.authority`.
/// 1. `[writable]` authority_collateral: any token account of the collateral mint but the pool's
///    own (receives).
/// 2. `[writable]` pool.
/// 3. `[writable]` pool_collateral: the PDA `["PoolCollateral", pool]`.
/// 4. `[]` token_program.
#[derive(Accounts)]
pub struct PoolExtract<'info> {
    /// The pool's authority.
    pub authority: Signer<'info>,

    /// Where the collateral goes.
    #[account(
        mut,
        constraint = authority_collateral.mint == pool.collateral_mint
            @ MiningPoolError::WrongCollateralMint,
        constraint = authority_collateral.key() != pool_collateral.key()
            @ MiningPoolError::PoolAccountAsDestination,
    )]
    pub authority_collateral: Box<Account<'info, TokenAccount>>,

    /// The pool PDA `["Pool", index LE]`.
    #[account(mut, has_one = authority @ MiningPoolError::NotPoolAuthority)]
    pub pool: Box<Account<'info, Pool>>,

    /// The pool's collateral token account.
    #[account(mut, seeds = [POOL_COLLATERAL_SEEDS_PREFIX, pool.key().as_ref()], bump)]
    pub pool_collateral: Box<Account<'info, TokenAccount>>,

    /// The SPL Token program.
    pub token_program: Program<'info, Token>,
}

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct PoolExtractParams {
    /// Base units of collateral to take out (> 0, at most what the pool holds).
    pub collateral_amount: u64,
}

pub fn pool_extract_processor(ctx: Context<PoolExtract>, params: PoolExtractParams) -> Result<()> {
    let amount = params.collateral_amount;
    require!(amount > 0, MiningPoolError::AmountZero);
    require!(
        amount <= ctx.accounts.pool_collateral.amount,
        MiningPoolError::ExtractExceedsCollateral
    );
    let accounts = ctx.accounts;
    accounts.pool.total_extracted_collateral_amount = accounts
        .pool
        .total_extracted_collateral_amount
        .checked_add(amount)
        .ok_or(MiningPoolError::ArithmeticOverflow)?;
    transfer_from_pool(
        accounts.token_program.to_account_info(),
        &accounts.pool,
        accounts.pool_collateral.to_account_info(),
        accounts.authority_collateral.to_account_info(),
        amount,
    )
}
