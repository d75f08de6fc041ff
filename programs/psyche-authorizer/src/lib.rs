//! psyche authorizer program: a grantor lets a grantee, and the grantee's delegates, act in a
//! scope. The coordinator's `join_run` requires an authorization from the run's `join_authority`
//! with scope `b"CoordinatorJoinRun"`; a grantee of `Pubkey::default()` makes a run open to all.
//!
//! Each instruction lives in its own file under `instructions/` with its accounts (documented
//! there with `[signer]` / `[writable]`), params and processor; this file only dispatches.

use anchor_lang::prelude::*;
// Links the libcalls of solana-compiler-builtins (see Cargo.toml) into the SBF build.
#[cfg(target_os = "solana")]
use solana_compiler_builtins as _;

pub mod constants;
pub mod error;
pub mod instructions;
pub mod state;

pub use instructions::*;
pub use state::*;

declare_id!("F11W4iAJNnDaf7E2QmrRe5cxvPUEJ9gEux2DMrZGd4hU");

#[program]
pub mod psyche_authorizer {
    use super::*;

    /// Creates the inactive authorization PDA `["Authorization", grantor, grantee, scope]`.
    pub fn authorization_create(
        ctx: Context<AuthorizationCreate>,
        params: AuthorizationCreateParams,
    ) -> Result<()> {
        authorization_create_processor(ctx, params)
    }

    /// The grantor (de)activates the authorization.
    pub fn authorization_grantor_update(
        ctx: Context<AuthorizationGrantorUpdate>,
        params: AuthorizationGrantorUpdateParams,
    ) -> Result<()> {
        authorization_grantor_update_processor(ctx, params)
    }

    /// The grantee clears and/or adds delegates (at most 64).
    pub fn authorization_grantee_update(
        ctx: Context<AuthorizationGranteeUpdate>,
        params: AuthorizationGranteeUpdateParams,
    ) -> Result<()> {
        authorization_grantee_update_processor(ctx, params)
    }

    /// The grantor closes an inactive authorization (30 days after its last update if it has
    /// delegates); the rent goes to `spill`.
    pub fn authorization_close(
        ctx: Context<AuthorizationClose>,
        params: AuthorizationCloseParams,
    ) -> Result<()> {
        authorization_close_processor(ctx, params)
    }
}
