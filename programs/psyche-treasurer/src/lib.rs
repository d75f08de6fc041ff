//! psyche treasurer program: a run created through it has the treasurer's `Run` PDA as the
//! coordinator's `main_authority`, and pays the points the coordinator credits (`earned −
//! slashed` per registered wallet) in an SPL token from the run's escrow, at a rate fixed when
//! the run is created (docs/rewards.md).
//!
//! Each instruction lives in its own file under `instructions/` with its accounts (documented
//! there with `[signer]` / `[writable]`), params and processor; the claim arithmetic is the pure
//! `claims` module; this file only dispatches.

use anchor_lang::prelude::*;
// Links the libcalls of solana-compiler-builtins (see Cargo.toml) into the SBF build.
#[cfg(target_os = "solana")]
use solana_compiler_builtins as _;

pub mod claims;
pub mod constants;
pub mod error;
pub mod instructions;
pub mod state;

pub use instructions::*;
pub use state::*;

declare_id!("3scS2tudP7vEQrbAA9yXKgNATr9WMVCHHfTrHtRcJD35");

#[program]
pub mod psyche_treasurer {
    use super::*;

    /// Creates the `Run` PDA, its collateral account and (CPI) the coordinator run it owns.
    pub fn run_create(ctx: Context<RunCreate>, params: RunCreateParams) -> Result<()> {
        run_create_processor(ctx, params)
    }

    /// The run's main authority updates, pauses or resumes the coordinator (CPIs signed by the
    /// `Run` PDA).
    pub fn run_update(ctx: Context<RunUpdate>, params: RunUpdateParams) -> Result<()> {
        run_update_processor(ctx, params)
    }

    /// Creates the user's `Participant` claim record.
    pub fn participant_create(ctx: Context<ParticipantCreate>) -> Result<()> {
        participant_create_processor(ctx)
    }

    /// Pays the user for points the coordinator credited and it has not claimed yet.
    pub fn participant_claim(
        ctx: Context<ParticipantClaim>,
        params: ParticipantClaimParams,
    ) -> Result<()> {
        participant_claim_processor(ctx, params)
    }

    /// The run's main authority starts winding the run down: the coordinator pauses for good,
    /// claims go on, `run_close` is allowed `RUN_CLOSE_GRACE_SECONDS` later.
    pub fn run_wind_down(ctx: Context<RunWindDown>) -> Result<()> {
        run_wind_down_processor(ctx)
    }

    /// After the grace period: the escrow's remainder and the rent of the escrow and the
    /// coordinator's accounts go to the run's main authority.
    pub fn run_close(ctx: Context<RunClose>) -> Result<()> {
        run_close_processor(ctx)
    }
}
