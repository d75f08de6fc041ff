use anchor_lang::prelude::*;
use anchor_lang::system_program;

use crate::error::AuthorizerError;
use crate::state::Authorization;

/// The grantee edits its delegates: optionally clears them, then appends `delegates_added`.
/// The account is resized to fit; the payer pays for growth and gets back the rent of a shrink.
///
/// Accounts:
/// 0. `[writable, signer]` payer.
/// 1. `[signer]` grantee: must be `authorization.grantee`.
/// 2. `[writable]` authorization.
/// 3. `[]` system_program.
#[derive(Accounts)]
pub struct AuthorizationGranteeUpdate<'info> {
    /// Pays rent.
    #[account(mut)]
    pub payer: Signer<'info>,

    /// The granted key.
    pub grantee: Signer<'info>,

    /// The authorization PDA `["Authorization", grantor, grantee, scope]`.
    // Resized by hand in the processor rather than with Anchor's `realloc` constraint, because
    // that constraint runs before any check and would turn an oversized request into an opaque
    // runtime reallocation error instead of `TooManyDelegates`.
    #[account(mut, has_one = grantee @ AuthorizerError::NotGrantee)]
    pub authorization: Account<'info, Authorization>,

    /// The system program.
    pub system_program: Program<'info, System>,
}

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct AuthorizationGranteeUpdateParams {
    /// Remove every current delegate before adding.
    pub delegates_clear: bool,
    /// Delegates appended (after the optional clear).
    pub delegates_added: Vec<Pubkey>,
}

pub fn authorization_grantee_update_processor(
    ctx: Context<AuthorizationGranteeUpdate>,
    params: AuthorizationGranteeUpdateParams,
) -> Result<()> {
    let kept = if params.delegates_clear { 0 } else { ctx.accounts.authorization.delegates.len() };
    let new_len = kept
        .checked_add(params.delegates_added.len())
        .ok_or(AuthorizerError::ArithmeticOverflow)?;
    require!(Authorization::delegates_len_ok(new_len), AuthorizerError::TooManyDelegates);

    let new_space =
        Authorization::space_with_discriminator(ctx.accounts.authorization.scope.len(), new_len);
    resize(&ctx, new_space)?;

    let authorization = &mut ctx.accounts.authorization;
    if params.delegates_clear {
        authorization.delegates.clear();
    }
    authorization.delegates.extend(params.delegates_added);
    Ok(())
}

/// Resizes the authorization to `new_space` bytes keeping it rent exempt: the payer funds growth,
/// and receives the excess lamports of a shrink.
fn resize(ctx: &Context<AuthorizationGranteeUpdate>, new_space: usize) -> Result<()> {
    let info = ctx.accounts.authorization.to_account_info();
    if new_space == info.data_len() {
        return Ok(());
    }
    let needed = Rent::get()?.minimum_balance(new_space);
    let current = info.lamports();
    if needed > current {
        let missing = needed - current;
        system_program::transfer(
            CpiContext::new(
                ctx.accounts.system_program.to_account_info(),
                system_program::Transfer {
                    from: ctx.accounts.payer.to_account_info(),
                    to: info.clone(),
                },
            ),
            missing,
        )?;
    } else if current > needed {
        // This program owns the authorization, so it can debit it directly.
        let excess = current - needed;
        let payer = ctx.accounts.payer.to_account_info();
        **info.try_borrow_mut_lamports()? = needed;
        let payer_lamports =
            payer.lamports().checked_add(excess).ok_or(AuthorizerError::ArithmeticOverflow)?;
        **payer.try_borrow_mut_lamports()? = payer_lamports;
    }
    info.resize(new_space)?;
    Ok(())
}
