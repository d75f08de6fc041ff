use anchor_lang::prelude::*;

use crate::core::RunState;
use crate::error::CoordinatorProgramError;
use crate::instructions::OwnerCoordinatorAccounts;
use crate::state::unix_now;

/// The owner pauses or resumes the run.
///
/// - `true`: the core's `pause` (in an active phase only flagged: the epoch winds down first).
/// - `false`: config, model and cold-start steps must pass their checks (progress too, except
///   from `Uninitialized`, where `resume` sets step 1 — the only way out of Uninitialized); then
///   `resume` to WaitingForMembers, `next_active` is bumped so every client joins afresh, and
///   the run ticks.
///
/// Accounts: `OwnerCoordinatorAccounts`.
pub fn set_paused_processor(ctx: Context<OwnerCoordinatorAccounts>, paused: bool) -> Result<()> {
    let clock = Clock::get()?;
    let now = unix_now(&clock)?;
    let mut account = ctx.accounts.coordinator_account.load_mut()?;
    account.check_version()?;
    let state = &mut account.state;
    if paused {
        state.coordinator.pause(now)?;
    } else {
        let coordinator = &state.coordinator;
        coordinator.config.check().map_err(|rule| {
            msg!("{}", rule);
            CoordinatorProgramError::ConfigSanityCheckFailed
        })?;
        let model = coordinator.model.load().ok_or(CoordinatorProgramError::ModelMissing)?;
        model.check().map_err(|rule| {
            msg!("{}", rule);
            CoordinatorProgramError::ModelSanityCheckFailed
        })?;
        model.check_cold_start_warmup_steps(&coordinator.config).map_err(|rule| {
            msg!("{}", rule);
            CoordinatorProgramError::ModelSanityCheckFailed
        })?;
        if coordinator.state() != RunState::Uninitialized {
            coordinator.progress.check().map_err(|rule| {
                msg!("{}", rule);
                CoordinatorProgramError::ProgressSanityCheckFailed
            })?;
        }
        state.coordinator.resume(now)?;
        state.clients_state.next_active = state
            .clients_state
            .next_active
            .checked_add(1)
            .ok_or(CoordinatorProgramError::ArithmeticOverflow)?;
        // `resume` may have finished the run (step budget spent): a halted run does not tick.
        if !state.run_state().halted() {
            state.tick(&clock)?;
        }
    }
    account.bump_nonce()
}
