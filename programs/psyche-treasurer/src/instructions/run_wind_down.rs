use anchor_lang::prelude::*;
use psyche_coordinator::program::PsycheCoordinator;
use psyche_coordinator::CoordinatorAccount;

use crate::constants::RUN_SEEDS_PREFIX;
use crate::error::TreasurerError;
use crate::state::Run;

/// The run's main authority starts winding the run down (docs/rewards.md, "Winding a run
/// down"): the coordinator is paused (CPI `set_paused(true)`, signed by the `Run` PDA, unless it
/// is halted already; an epoch in progress finishes first), `run.wind_down_at` is set to the
/// cluster time, and from then on `run_update` is refused, so the run earns no new points.
/// Claims go on as before; `run_close` is allowed `RUN_CLOSE_GRACE_SECONDS` later. One-way.
///
/// Accounts:
/// 0. `[signer]` authority: must be `run.main_authority`.
/// 1. `[writable]` run.
/// 2. `[]` coordinator_instance: must be `run.coordinator_instance`.
/// 3. `[writable]` coordinator_account: must be `run.coordinator_account`.
/// 4. `[]` coordinator_program.
#[derive(Accounts)]
pub struct RunWindDown<'info> {
    /// The run's main authority.
    pub authority: Signer<'info>,

    /// The run.
    #[account(
        mut,
        constraint = run.main_authority == authority.key() @ TreasurerError::NotRunAuthority,
        has_one = coordinator_instance @ TreasurerError::CoordinatorInstanceMismatch,
        has_one = coordinator_account @ TreasurerError::CoordinatorAccountMismatch,
    )]
    pub run: Box<Account<'info, Run>>,

    /// CHECK: equal to `run.coordinator_instance`; the coordinator checks the rest.
    pub coordinator_instance: UncheckedAccount<'info>,

    /// The coordinator's state (read to see whether it is halted; paused by the CPI).
    #[account(mut)]
    pub coordinator_account: AccountLoader<'info, CoordinatorAccount>,

    /// The psyche coordinator.
    pub coordinator_program: Program<'info, PsycheCoordinator>,
}

pub fn run_wind_down_processor(ctx: Context<RunWindDown>) -> Result<()> {
    require!(ctx.accounts.run.wind_down_at == 0, TreasurerError::RunWindingDown);
    let halted = {
        let account = ctx.accounts.coordinator_account.load()?;
        account.check_version()?;
        account.state.run_state().halted()
    };
    if !halted {
        let run = &ctx.accounts.run;
        let index = run.index.to_le_bytes();
        let bump = [run.bump];
        let seeds: &[&[u8]] = &[RUN_SEEDS_PREFIX, &index, &bump];
        psyche_coordinator::cpi::set_paused(
            CpiContext::new_with_signer(
                ctx.accounts.coordinator_program.to_account_info(),
                psyche_coordinator::cpi::accounts::OwnerCoordinatorAccounts {
                    authority: ctx.accounts.run.to_account_info(),
                    coordinator_instance: ctx.accounts.coordinator_instance.to_account_info(),
                    coordinator_account: ctx.accounts.coordinator_account.to_account_info(),
                },
                &[seeds],
            ),
            true,
        )?;
    }
    // 0 means "not winding down": a cluster clock at or before the epoch still starts it.
    ctx.accounts.run.wind_down_at = Clock::get()?.unix_timestamp.max(1);
    Ok(())
}
