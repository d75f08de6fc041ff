//! psyche mining pool: lenders deposit collateral into a pool; its authority extracts it to buy
//! compute, freezes the pool, and deposits what the compute earned (the redeemable token); each
//! lender claims `floor(total redeemable × its deposit / total deposits)`. Design and account
//! layout: docs/rewards.md, "Mining Pool".
//!
//! Each instruction lives in its own file under `instructions/` with its accounts (documented
//! there with `[signer]` / `[writable]`), params and processor; the share arithmetic is the pure
//! `shares` module; this file only dispatches.

use anchor_lang::prelude::*;
// Links the libcalls of solana-compiler-builtins (see Cargo.toml) into the SBF build.
#[cfg(target_os = "solana")]
use solana_compiler_builtins as _;

pub mod constants;
pub mod error;
pub mod instructions;
pub mod shares;
pub mod state;

pub use instructions::*;
pub use state::*;

declare_id!("3t2pGdtAW3UPetWp5aQhBQa8iZ7vokYP6mJGsbHVAYGR");

#[program]
pub mod psyche_mining_pool {
    use super::*;

    /// Creates the pool PDA `["Pool", index]` and its collateral and redeemable token accounts.
    pub fn pool_create(ctx: Context<PoolCreate>, params: PoolCreateParams) -> Result<()> {
        pool_create_processor(ctx, params)
    }

    /// The authority changes the cap and/or freezes the pool (one-way).
    pub fn pool_update(ctx: Context<PoolUpdate>, params: PoolUpdateParams) -> Result<()> {
        pool_update_processor(ctx, params)
    }

    /// The authority takes collateral out of the pool.
    pub fn pool_extract(ctx: Context<PoolExtract>, params: PoolExtractParams) -> Result<()> {
        pool_extract_processor(ctx, params)
    }

    /// The authority deposits earnings into a frozen pool.
    pub fn pool_redeemable_deposit(
        ctx: Context<PoolRedeemableDeposit>,
        params: PoolRedeemableDepositParams,
    ) -> Result<()> {
        pool_redeemable_deposit_processor(ctx, params)
    }

    /// Creates the user's lender account `["Lender", pool, user]`.
    pub fn lender_create(ctx: Context<LenderCreate>) -> Result<()> {
        lender_create_processor(ctx)
    }

    /// A lender deposits collateral into an unfrozen pool, within its cap.
    pub fn lender_deposit(ctx: Context<LenderDeposit>, params: LenderDepositParams) -> Result<()> {
        lender_deposit_processor(ctx, params)
    }

    /// A lender claims part or all of what is left of its share of a frozen pool's earnings.
    pub fn lender_claim(ctx: Context<LenderClaim>, params: LenderClaimParams) -> Result<()> {
        lender_claim_processor(ctx, params)
    }
}
