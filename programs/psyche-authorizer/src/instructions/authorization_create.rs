use anchor_lang::prelude::*;

use crate::state::Authorization;

/// Creates the (inactive, delegate-less) authorization of `(grantor, grantee, scope)`.
///
/// Accounts:
/// 0. `[writable, signer]` payer: pays the rent.
/// 1. `[signer]` grantor: the granting key.
/// 2. `[writable]` authorization: the PDA `["Authorization", grantor, params.grantee, params.scope]`, created here.
/// 3. `[]` system_program.
#[derive(Accounts)]
#[instruction(params: AuthorizationCreateParams)]
pub struct AuthorizationCreate<'info> {
    /// Pays rent.
    #[account(mut)]
    pub payer: Signer<'info>,

    /// The granting key.
    pub grantor: Signer<'info>,

    /// The authorization PDA `["Authorization", grantor, grantee, scope]`.
    #[account(
        init,
        payer = payer,
        space = Authorization::space_with_discriminator(params.scope.len(), 0),
        seeds = [
            Authorization::SEEDS_PREFIX,
            grantor.key().as_ref(),
            params.grantee.as_ref(),
            // Checked here, not in the processor: Anchor derives the PDA before any
            // processor code runs, and an over-long seed would abort with an opaque panic.
            Authorization::scope_seed(&params.scope)?,
        ],
        bump,
    )]
    pub authorization: Account<'info, Authorization>,

    /// The system program.
    pub system_program: Program<'info, System>,
}

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct AuthorizationCreateParams {
    /// Who is granted; `Pubkey::default()` grants everyone.
    pub grantee: Pubkey,
    /// What is granted (≤ 32 bytes).
    pub scope: Vec<u8>,
}

pub fn authorization_create_processor(
    ctx: Context<AuthorizationCreate>,
    params: AuthorizationCreateParams,
) -> Result<()> {
    let authorization = &mut ctx.accounts.authorization;
    authorization.bump = ctx.bumps.authorization;
    authorization.grantor = ctx.accounts.grantor.key();
    authorization.grantee = params.grantee;
    authorization.scope = params.scope;
    authorization.active = false;
    authorization.delegates = Vec::new();
    authorization.grantor_update_unix_timestamp = 0;
    Ok(())
}
