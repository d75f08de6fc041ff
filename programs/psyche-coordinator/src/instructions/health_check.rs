use anchor_lang::prelude::*;

use crate::constants::MAX_HEALTH_CHECKS_PER_INSTRUCTION;
use crate::core::HealthCheck;
use crate::error::CoordinatorProgramError;
use crate::instructions::PermissionlessCoordinatorAccounts;

/// An epoch client reports clients the previous round's witnesses did not see (1–8 entries,
/// each with its committee proof); the core ejects them if the report holds, then the run ticks.
/// Accounts: `PermissionlessCoordinatorAccounts` (`user` must be a registered client).
pub fn health_check_processor(
    ctx: Context<PermissionlessCoordinatorAccounts>,
    checks: Vec<HealthCheck>,
) -> Result<()> {
    require!(
        checks.len() <= MAX_HEALTH_CHECKS_PER_INSTRUCTION,
        CoordinatorProgramError::HealthCheckCountInvalid
    );
    let clock = Clock::get()?;
    let mut account = ctx.accounts.coordinator_account.load_mut()?;
    account.check_version()?;
    let state = &mut account.state;
    let from = state.registered_id(&ctx.accounts.user.key())?;
    let ejected = state.coordinator.health_check(&from, &checks)?;
    msg!("health check: {} client(s) ejected", ejected);
    state.tick(&clock)?;
    account.bump_nonce()
}
