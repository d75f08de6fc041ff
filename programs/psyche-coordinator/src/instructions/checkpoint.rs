use anchor_lang::prelude::*;

use crate::core::Checkpoint;
use crate::error::CoordinatorProgramError;
use crate::instructions::PermissionlessCoordinatorAccounts;
use crate::state::unix_now;

/// An elected checkpointer of the epoch that is cooling down reports where it stored the
/// model. The core accepts it only in Cooldown, only from an elected checkpointer (the reference
/// accepted any client in any phase); the first accepted one ends Cooldown at once, which may
/// end the epoch (points are credited then). Then the run ticks unless it is halted.
/// Accounts: `PermissionlessCoordinatorAccounts` (`user` must be a client of the epoch).
pub fn checkpoint_processor(
    ctx: Context<PermissionlessCoordinatorAccounts>,
    checkpoint: Checkpoint,
) -> Result<()> {
    let clock = Clock::get()?;
    let now = unix_now(&clock)?;
    let mut account = ctx.accounts.coordinator_account.load_mut()?;
    account.check_version()?;
    let state = &mut account.state;
    let from = state.registered_id(&ctx.accounts.user.key())?;
    let index =
        state.coordinator.index_of(&from).ok_or(CoordinatorProgramError::SignerNotAClient)?;
    let result = state.coordinator.checkpoint(&from, index as u64, &checkpoint, now)?;
    state.after_transition(result)?;
    if !state.run_state().halted() {
        state.tick(&clock)?;
    }
    account.bump_nonce()
}
