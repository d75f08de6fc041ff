//! `CoordinatorInstance`: the small PDA that names a run and points at its big zero-copy account.

use anchor_lang::prelude::*;

use crate::constants::COORDINATOR_INSTANCE_SEEDS_PREFIX;
use crate::core::RUN_ID_MAX_LEN;

/// PDA `["coordinator", run_id]`: who owns the run, who authorizes joins, and which account
/// holds its state (that account is not a PDA: it is ~140 KB, beyond the 10 KiB a program may
/// allocate by CPI, so the creator allocates it in the `init_coordinator` transaction).
#[account]
#[derive(Debug, PartialEq, Eq)]
pub struct CoordinatorInstance {
    pub bump: u8,
    /// Signs `update`, `set_paused`, `set_future_epoch_rates`, `update_client_version`,
    /// `free_coordinator`.
    pub main_authority: Pubkey,
    /// Grantor of the authorizer `Authorization` (scope `CoordinatorJoinRun`) that `join_run`
    /// requires.
    pub join_authority: Pubkey,
    /// The run's `CoordinatorAccount`.
    pub coordinator_account: Pubkey,
    /// 1–32 bytes; also the PDA seed and `state.coordinator.run_id`.
    pub run_id: String,
    /// Set by the creator at `init_coordinator`, never changed: the run's clients are on one
    /// machine or LAN, so peer records may name loopback, private and DNS targets
    /// (`core::check_peer_addrs`; readers follow the same flag).
    pub local_run: bool,
}

impl CoordinatorInstance {
    /// Account size (discriminator included) with room for the longest run id.
    pub const SPACE: usize = 8 + 1 + 32 + 32 + 32 + 4 + RUN_ID_MAX_LEN + 1;

    pub fn find_pda(run_id: &str) -> (Pubkey, u8) {
        Pubkey::find_program_address(
            &[COORDINATOR_INSTANCE_SEEDS_PREFIX, run_id.as_bytes()],
            &crate::ID,
        )
    }

    /// True for a run id that fits the PDA seed and the state's fixed string.
    pub fn run_id_ok(run_id: &str) -> bool {
        !run_id.is_empty() && run_id.len() <= RUN_ID_MAX_LEN && !run_id.as_bytes().contains(&0)
    }
}
