use anchor_lang::prelude::*;

use crate::constants::CLOSE_DELAY_WITH_DELEGATES_SECONDS;
use crate::error::AuthorizerError;
use crate::state::Authorization;

/// The grantor closes an inactive authorization and collects its rent. With delegates, only
/// `CLOSE_DELAY_WITH_DELEGATES_SECONDS` (30 days) after the grantor's last update, so the grantee
/// cannot be surprised by a vanished account it was still configuring.
///
/// Accounts:
/// 0. `[signer]` grantor: must be `authorization.grantor`.
/// 1. `[writable]` spill: receives the lamports.
/// 2. `[writable]` authorization: closed here.
#[derive(Accounts)]
pub struct AuthorizationClose<'info> {
    /// The granting key.
    pub grantor: Signer<'info>,

    /// CHECK: any account may receive the lamports.
    #[account(mut)]
    pub spill: UncheckedAccount<'info>,

    /// The authorization PDA `["Authorization", grantor, grantee, scope]`.
    #[account(
        mut,
        has_one = grantor @ AuthorizerError::NotGrantor,
        constraint = !authorization.active @ AuthorizerError::AuthorizationActiveIsTrue,
        close = spill,
    )]
    pub authorization: Account<'info, Authorization>,
}

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct AuthorizationCloseParams {}

pub fn authorization_close_processor(
    ctx: Context<AuthorizationClose>,
    _params: AuthorizationCloseParams,
) -> Result<()> {
    let authorization = &ctx.accounts.authorization;
    if !authorization.delegates.is_empty() {
        let now = Clock::get()?.unix_timestamp;
        let allowed_from = authorization
            .grantor_update_unix_timestamp
            .checked_add(CLOSE_DELAY_WITH_DELEGATES_SECONDS)
            .ok_or(AuthorizerError::ArithmeticOverflow)?;
        require!(now >= allowed_from, AuthorizerError::AuthorizationClosingConditionsNotReachedYet);
    }
    Ok(())
}
