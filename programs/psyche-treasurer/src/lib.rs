//! psyche treasurer (scaffold; being built).

use anchor_lang::prelude::*;
use anchor_spl::token::{self, Token, TokenAccount, Transfer};
#[cfg(target_os = "solana")]
use solana_compiler_builtins as _;

declare_id!("3scS2tudP7vEQrbAA9yXKgNATr9WMVCHHfTrHtRcJD35");

#[program]
pub mod psyche_treasurer {
    use super::*;

    pub fn probe(ctx: Context<Probe>, amount: u64) -> Result<()> {
        token::transfer(
            CpiContext::new(
                ctx.accounts.token_program.to_account_info(),
                Transfer {
                    from: ctx.accounts.from.to_account_info(),
                    to: ctx.accounts.to.to_account_info(),
                    authority: ctx.accounts.user.to_account_info(),
                },
            ),
            amount,
        )
    }
}

#[derive(Accounts)]
pub struct Probe<'info> {
    pub user: Signer<'info>,
    #[account(mut)]
    pub from: Account<'info, TokenAccount>,
    #[account(mut)]
    pub to: Account<'info, TokenAccount>,
    pub token_program: Program<'info, Token>,
}
