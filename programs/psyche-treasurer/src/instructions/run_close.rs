use anchor_lang::prelude::*;
use anchor_spl::token::{self, CloseAccount, Token, TokenAccount, Transfer};
use psyche_coordinator::program::PsycheCoordinator;

use crate::constants::{RUN_CLOSE_GRACE_SECONDS, RUN_COLLATERAL_SEEDS_PREFIX, RUN_SEEDS_PREFIX};
use crate::error::TreasurerError;
use crate::state::Run;

/// Ends a run that has been winding down for `RUN_CLOSE_GRACE_SECONDS` (docs/rewards.md,
/// "Winding a run down"): what the escrow still holds goes to a token account of the run's main
/// authority, the escrow is closed, and the coordinator's two accounts are freed (CPI
/// `free_coordinator`, signed by the `Run` PDA; the coordinator must be halted, which the pause
/// of `run_wind_down` reaches once an epoch in progress has ended). The rent of all three goes
/// to the main authority. Points not claimed by then are no longer payable. The `Run` stays as
/// the record of what was paid (see `Run`).
///
/// Accounts:
/// 0. `[writable, signer]` authority: must be `run.main_authority`; receives the rent.
/// 1. `[writable]` authority_collateral: a token account of `run.collateral_mint` owned by the
///    main authority; receives the escrow's remainder.
/// 2. `[]` run.
/// 3. `[writable]` run_collateral: PDA `["RunCollateral", run]`, emptied and closed.
/// 4. `[writable]` coordinator_instance: must be `run.coordinator_instance`; closed.
/// 5. `[writable]` coordinator_account: must be `run.coordinator_account`; closed.
/// 6. `[]` coordinator_program.
/// 7. `[]` token_program: classic SPL Token.
#[derive(Accounts)]
pub struct RunClose<'info> {
    /// The run's main authority.
    #[account(mut)]
    pub authority: Signer<'info>,

    /// Where the escrow's remainder goes.
    #[account(
        mut,
        constraint = authority_collateral.mint == run.collateral_mint
            @ TreasurerError::WrongCollateralMint,
        constraint = authority_collateral.owner == run.main_authority
            @ TreasurerError::RecipientNotRunAuthority,
    )]
    pub authority_collateral: Box<Account<'info, TokenAccount>>,

    /// The run.
    #[account(
        constraint = run.main_authority == authority.key() @ TreasurerError::NotRunAuthority,
        has_one = coordinator_instance @ TreasurerError::CoordinatorInstanceMismatch,
        has_one = coordinator_account @ TreasurerError::CoordinatorAccountMismatch,
    )]
    pub run: Box<Account<'info, Run>>,

    /// The run's escrow.
    #[account(
        mut,
        seeds = [RUN_COLLATERAL_SEEDS_PREFIX, run.key().as_ref()],
        bump,
    )]
    pub run_collateral: Box<Account<'info, TokenAccount>>,

    /// CHECK: equal to `run.coordinator_instance`; the coordinator checks the rest.
    #[account(mut)]
    pub coordinator_instance: UncheckedAccount<'info>,

    /// CHECK: equal to `run.coordinator_account`; the coordinator checks the rest.
    #[account(mut)]
    pub coordinator_account: UncheckedAccount<'info>,

    /// The psyche coordinator.
    pub coordinator_program: Program<'info, PsycheCoordinator>,

    /// Classic SPL Token.
    pub token_program: Program<'info, Token>,
}

pub fn run_close_processor(ctx: Context<RunClose>) -> Result<()> {
    let run = &ctx.accounts.run;
    require!(run.wind_down_at != 0, TreasurerError::RunNotWindingDown);
    let open_at = run
        .wind_down_at
        .checked_add(RUN_CLOSE_GRACE_SECONDS)
        .ok_or(TreasurerError::ArithmeticOverflow)?;
    require!(Clock::get()?.unix_timestamp >= open_at, TreasurerError::RunCloseTooEarly);

    let index = run.index.to_le_bytes();
    let bump = [run.bump];
    let seeds: &[&[u8]] = &[RUN_SEEDS_PREFIX, &index, &bump];
    let signer = &[seeds];
    let accounts = &ctx.accounts;
    let token_program = accounts.token_program.to_account_info();
    let remainder = accounts.run_collateral.amount;
    if remainder > 0 {
        token::transfer(
            CpiContext::new_with_signer(
                token_program.clone(),
                Transfer {
                    from: accounts.run_collateral.to_account_info(),
                    to: accounts.authority_collateral.to_account_info(),
                    authority: accounts.run.to_account_info(),
                },
                signer,
            ),
            remainder,
        )?;
    }
    token::close_account(CpiContext::new_with_signer(
        token_program,
        CloseAccount {
            account: accounts.run_collateral.to_account_info(),
            destination: accounts.authority.to_account_info(),
            authority: accounts.run.to_account_info(),
        },
        signer,
    ))?;
    msg!("run closed: {} base units of remainder to the main authority", remainder);
    psyche_coordinator::cpi::free_coordinator(
        CpiContext::new_with_signer(
            accounts.coordinator_program.to_account_info(),
            psyche_coordinator::cpi::accounts::FreeCoordinator {
                authority: accounts.run.to_account_info(),
                spill: accounts.authority.to_account_info(),
                coordinator_instance: accounts.coordinator_instance.to_account_info(),
                coordinator_account: accounts.coordinator_account.to_account_info(),
            },
            signer,
        ),
        psyche_coordinator::FreeCoordinatorParams {},
    )
}
