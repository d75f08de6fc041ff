use anchor_lang::prelude::*;

use crate::constants::COORDINATOR_INSTANCE_SEEDS_PREFIX;
use crate::error::CoordinatorProgramError;
use crate::state::{CoordinatorAccount, CoordinatorInstance};

/// Closes a halted run's two accounts and sends their rent to `spill`.
///
/// Accounts:
/// 0. `[signer]` authority: must be `coordinator_instance.main_authority`.
/// 1. `[writable]` spill: receives the lamports.
/// 2. `[writable]` coordinator_instance: closed.
/// 3. `[writable]` coordinator_account: closed.
#[derive(Accounts)]
pub struct FreeCoordinator<'info> {
    /// The run's main authority.
    pub authority: Signer<'info>,

    /// CHECK: any account may receive the lamports.
    #[account(mut)]
    pub spill: UncheckedAccount<'info>,

    /// The run's PDA `["coordinator", run_id]`.
    #[account(
        mut,
        seeds = [COORDINATOR_INSTANCE_SEEDS_PREFIX, coordinator_instance.run_id.as_bytes()],
        bump = coordinator_instance.bump,
        constraint = coordinator_instance.main_authority == authority.key()
            @ CoordinatorProgramError::NotMainAuthority,
        close = spill,
    )]
    pub coordinator_instance: Account<'info, CoordinatorInstance>,

    /// The run's zero-copy state account.
    #[account(
        mut,
        constraint = coordinator_instance.coordinator_account == coordinator_account.key()
            @ CoordinatorProgramError::CoordinatorAccountMismatch,
        close = spill,
    )]
    pub coordinator_account: AccountLoader<'info, CoordinatorAccount>,
}

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct FreeCoordinatorParams {}

pub fn free_coordinator_processor(
    ctx: Context<FreeCoordinator>,
    _params: FreeCoordinatorParams,
) -> Result<()> {
    let account = ctx.accounts.coordinator_account.load()?;
    account.check_version()?;
    require!(
        account.state.run_state().halted(),
        CoordinatorProgramError::CloseCoordinatorNotHalted
    );
    Ok(())
}
