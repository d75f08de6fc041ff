//! The `Lender` account: one user's deposits in one pool and what it was paid.

use anchor_lang::prelude::*;

use crate::constants::LENDER_SEEDS_PREFIX;

#[account]
#[derive(Debug, PartialEq, Eq)]
pub struct Lender {
    /// Bump of the PDA `["Lender", pool, user]`.
    pub bump: u8,
    /// The pool lent to.
    pub pool: Pubkey,
    /// The lending wallet: only it deposits and claims.
    pub user: Pubkey,
    /// Collateral this lender deposited (its share's numerator).
    pub deposited_collateral_amount: u64,
    /// Redeemable tokens this lender was paid.
    pub claimed_redeemable_amount: u64,
}

impl Lender {
    /// Account size, discriminator included.
    pub const SPACE: usize = 8 // discriminator
        + 1 // bump
        + 2 * 32 // pool, user
        + 2 * 8; // the amounts

    pub fn find_pda(pool: &Pubkey, user: &Pubkey) -> (Pubkey, u8) {
        Pubkey::find_program_address(
            &[LENDER_SEEDS_PREFIX, pool.as_ref(), user.as_ref()],
            &crate::ID,
        )
    }
}
