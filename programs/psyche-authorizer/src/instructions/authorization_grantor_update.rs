use anchor_lang::prelude::*;

use crate::error::AuthorizerError;
use crate::state::Authorization;

/// The grantor activates or deactivates its authorization; the time is recorded (it starts the
/// close delay of an authorization with delegates).
///
/// Accounts:
/// 0. `[signer]` grantor: must be `authorization.grantor`.
/// 1. `[writable]` authorization.
#[derive(Accounts)]
pub struct AuthorizationGrantorUpdate<'info> {
    /// The granting key.
    pub grantor: Signer<'info>,

    /// The authorization PDA `["Authorization", grantor, grantee, scope]`.
    #[account(mut, has_one = grantor @ AuthorizerError::NotGrantor)]
    pub authorization: Account<'info, Authorization>,
}

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct AuthorizationGrantorUpdateParams {
    pub active: bool,
}

pub fn authorization_grantor_update_processor(
    ctx: Context<AuthorizationGrantorUpdate>,
    params: AuthorizationGrantorUpdateParams,
) -> Result<()> {
    let authorization = &mut ctx.accounts.authorization;
    authorization.active = params.active;
    authorization.grantor_update_unix_timestamp = Clock::get()?.unix_timestamp;
    Ok(())
}
