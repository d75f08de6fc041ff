//! The `Pool` account: one pool of lenders' collateral, its cap, and the earnings to share.
//! Only this program creates it, at the PDA of its index, so its fields can be trusted once Anchor
//! has checked the owner and discriminator.

use anchor_lang::prelude::*;

use crate::constants::{
    POOL_COLLATERAL_SEEDS_PREFIX, POOL_REDEEMABLE_SEEDS_PREFIX, POOL_SEEDS_PREFIX,
};

#[account]
#[derive(Debug, PartialEq, Eq)]
pub struct Pool {
    /// Bump of the PDA `["Pool", index: u64 LE]`: the pool signs its token transfers with it.
    pub bump: u8,
    /// Chosen by the creator; the PDA's second seed.
    pub index: u64,
    /// Who sets the cap, freezes, extracts collateral and deposits earnings.
    pub authority: Pubkey,
    /// Mint of what lenders deposit.
    pub collateral_mint: Pubkey,
    /// Mint of what lenders are paid.
    pub redeemable_mint: Pubkey,
    /// Deposits stop at this total.
    pub max_deposit_collateral_amount: u64,
    /// Sum of every lender's deposits (the denominator of the shares).
    pub total_deposited_collateral_amount: u64,
    /// Collateral the authority took out to buy compute.
    pub total_extracted_collateral_amount: u64,
    /// Earnings deposited by the authority (what the shares divide).
    pub total_deposited_redeemable_amount: u64,
    /// Earnings paid out to lenders so far.
    pub total_claimed_redeemable_amount: u64,
    /// One-way: set before earnings arrive, so every share is fixed before the first claim.
    pub frozen: bool,
}

impl Pool {
    /// Account size, discriminator included.
    pub const SPACE: usize = 8 // discriminator
        + 1 // bump
        + 8 // index
        + 3 * 32 // authority, collateral_mint, redeemable_mint
        + 5 * 8 // the amounts
        + 1; // frozen

    pub fn find_pda(index: u64) -> (Pubkey, u8) {
        Pubkey::find_program_address(&[POOL_SEEDS_PREFIX, &index.to_le_bytes()], &crate::ID)
    }

    pub fn find_collateral_pda(pool: &Pubkey) -> (Pubkey, u8) {
        Pubkey::find_program_address(&[POOL_COLLATERAL_SEEDS_PREFIX, pool.as_ref()], &crate::ID)
    }

    pub fn find_redeemable_pda(pool: &Pubkey) -> (Pubkey, u8) {
        Pubkey::find_program_address(&[POOL_REDEEMABLE_SEEDS_PREFIX, pool.as_ref()], &crate::ID)
    }

    /// The pool PDA's seeds without the bump (the bump is appended by the caller, which owns the
    /// buffers the slices point into).
    pub fn index_seed(&self) -> [u8; 8] {
        self.index.to_le_bytes()
    }
}
