//! `Participant`: what one wallet has been paid from one run's escrow.

use anchor_lang::prelude::*;

use crate::constants::PARTICIPANT_SEEDS_PREFIX;

/// PDA `["Participant", run, user]`. `claimed_points` only grows: together with the
/// coordinator's `earned − slashed` it is what makes a point payable at most once.
#[account]
#[derive(Debug, PartialEq, Eq)]
pub struct Participant {
    pub bump: u8,
    pub run: Pubkey,
    pub user: Pubkey,
    /// Points paid so far.
    pub claimed_points: u64,
    /// Token base units paid so far (`claimed_points × run.collateral_per_point`).
    pub claimed_collateral: u64,
}

impl Participant {
    /// Account size, discriminator included.
    pub const SPACE: usize = 8 + 1 + 32 + 32 + 8 + 8;

    pub fn find_pda(run: &Pubkey, user: &Pubkey) -> (Pubkey, u8) {
        Pubkey::find_program_address(
            &[PARTICIPANT_SEEDS_PREFIX, run.as_ref(), user.as_ref()],
            &crate::ID,
        )
    }
}
