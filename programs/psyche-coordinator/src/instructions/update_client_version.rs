use anchor_lang::prelude::*;

use crate::core::FixedString96;
use crate::error::CoordinatorProgramError;
use crate::instructions::OwnerCoordinatorAccounts;

/// The owner sets the client version the run requires (only while halted, so no epoch changes
/// version midway). Unlike the reference this bumps the nonce, so subscribers see the change.
/// Accounts: `OwnerCoordinatorAccounts`.
pub fn update_client_version_processor(
    ctx: Context<OwnerCoordinatorAccounts>,
    new_version: String,
) -> Result<()> {
    let mut account = ctx.accounts.coordinator_account.load_mut()?;
    account.check_version()?;
    require!(account.state.run_state().halted(), CoordinatorProgramError::UpdateConfigNotHalted);
    account.state.client_version =
        FixedString96::new(&new_version).ok_or(CoordinatorProgramError::ClientVersionInvalid)?;
    account.bump_nonce()
}
