use anchor_lang::prelude::*;

use crate::constants::LENDER_SEEDS_PREFIX;
use crate::state::{Lender, Pool};

/// Creates the user's (empty) lender account in a pool.
///
/// Accounts:
/// 0. `[writable, signer]` payer: pays the rent.
/// 1. `[signer]` user: the lending wallet.
/// 2. `[]` pool.
/// 3. `[writable]` lender: the PDA `["Lender", pool, user]`, created here.
/// 4. `[]` system_program.
#[derive(Accounts)]
pub struct LenderCreate<'info> {
    /// Pays rent.
    #[account(mut)]
    pub payer: Signer<'info>,

    /// The lending wallet.
    pub user: Signer<'info>,

    /// The pool PDA `["Pool", index LE]`.
    pub pool: Account<'info, Pool>,

    /// The lender PDA `["Lender", pool, user]`.
    #[account(
        init,
        payer = payer,
        space = Lender::SPACE,
        seeds = [LENDER_SEEDS_PREFIX, pool.key().as_ref(), user.key().as_ref()],
        bump,
    )]
    pub lender: Account<'info, Lender>,

    /// The system program.
    pub system_program: Program<'info, System>,
}

pub fn lender_create_processor(ctx: Context<LenderCreate>) -> Result<()> {
    let lender = &mut ctx.accounts.lender;
    lender.bump = ctx.bumps.lender;
    lender.pool = ctx.accounts.pool.key();
    lender.user = ctx.accounts.user.key();
    lender.deposited_collateral_amount = 0;
    lender.claimed_redeemable_amount = 0;
    Ok(())
}
