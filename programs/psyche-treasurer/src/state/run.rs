//! `Run`: a coordinator run created through the treasurer, and its escrow's bookkeeping.

use anchor_lang::prelude::*;

use crate::constants::RUN_SEEDS_PREFIX;

/// PDA `["Run", index u64 LE]`. It is the coordinator instance's `main_authority`, so only this
/// program (when `main_authority` below signs `run_update`) can change the run; it is also the
/// token authority of the run's collateral account. After `run_close` the account stays, as a
/// record of what was paid: a new `Run` at the same index would otherwise inherit this run's
/// `Participant` records (their address depends only on the run's address and the user).
#[account]
#[derive(Debug, PartialEq, Eq)]
pub struct Run {
    pub bump: u8,
    /// The PDA's seed (the CLI derives it from the run id; any value the creator picks works).
    pub index: u64,
    /// Signs `run_update`.
    pub main_authority: Pubkey,
    /// Grantor of the authorizer `Authorization` that the coordinator's `join_run` requires.
    pub join_authority: Pubkey,
    /// The coordinator's `CoordinatorInstance` PDA of this run.
    pub coordinator_instance: Pubkey,
    /// The coordinator's zero-copy `CoordinatorAccount` (the points ledger claims read).
    pub coordinator_account: Pubkey,
    /// Mint of the run collateral account and of every payment.
    pub collateral_mint: Pubkey,
    /// Token base units paid per point (> 0, fixed at creation).
    pub collateral_per_point: u64,
    /// Sum of every participant's `claimed_points`.
    pub total_claimed_points: u64,
    /// Sum of every participant's `claimed_collateral`.
    pub total_claimed_collateral: u64,
    /// Cluster unix time of `run_wind_down` (0: the run is not winding down). From then on the
    /// coordinator stays paused and `run_update` is refused; `run_close` is allowed
    /// `RUN_CLOSE_GRACE_SECONDS` later.
    pub wind_down_at: i64,
}

impl Run {
    /// Account size, discriminator included.
    pub const SPACE: usize = 8 + 1 + 8 + 5 * 32 + 3 * 8 + 8;

    pub fn find_pda(index: u64) -> (Pubkey, u8) {
        Pubkey::find_program_address(&[RUN_SEEDS_PREFIX, &index.to_le_bytes()], &crate::ID)
    }
}
