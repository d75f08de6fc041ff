use anchor_lang::prelude::*;

use crate::instructions::PermissionlessCoordinatorAccounts;

/// Anyone advances the run's clock-driven transitions (fails with `Halted` on a halted run).
/// Accounts: `PermissionlessCoordinatorAccounts`.
pub fn tick_processor(ctx: Context<PermissionlessCoordinatorAccounts>) -> Result<()> {
    let clock = Clock::get()?;
    let mut account = ctx.accounts.coordinator_account.load_mut()?;
    account.check_version()?;
    account.state.tick(&clock)?;
    account.bump_nonce()
}
