use anchor_lang::prelude::*;

use crate::constants::{COORDINATOR_ACCOUNT_VERSION, COORDINATOR_INSTANCE_SEEDS_PREFIX};
use crate::core::{FixedString32, FixedString96};
use crate::error::CoordinatorProgramError;
use crate::state::{CoordinatorAccount, CoordinatorInstance};

/// Creates a run: the `CoordinatorInstance` PDA, and initializes the zero-copy account that the
/// caller created in the same transaction (`system_program::create_account`, owner = this
/// program, `CoordinatorAccount::SPACE` bytes, all zero). The run stays `Uninitialized` until
/// `update` gives it a config and model and `set_paused(false)` starts it.
///
/// Accounts:
/// 0. `[writable, signer]` payer: pays the instance's rent.
/// 1. `[writable]` coordinator_instance: PDA `["coordinator", params.run_id]`, created here.
/// 2. `[writable]` coordinator_account: the fresh zero-filled account; Anchor's `zero` checks
///    owner, zero discriminator and rent exemption (the reference left it unchecked).
/// 3. `[]` system_program.
#[derive(Accounts)]
#[instruction(params: InitCoordinatorParams)]
pub struct InitCoordinator<'info> {
    /// Pays the instance's rent.
    #[account(mut)]
    pub payer: Signer<'info>,

    /// The run's PDA `["coordinator", run_id]`.
    #[account(
        init,
        payer = payer,
        space = CoordinatorInstance::SPACE,
        seeds = [
            COORDINATOR_INSTANCE_SEEDS_PREFIX,
            // Validated in the seed itself: Anchor derives the PDA before any processor code
            // runs, and an over-long seed would abort with an opaque panic.
            init_run_id_seed(&params.run_id)?,
        ],
        bump,
    )]
    pub coordinator_instance: Account<'info, CoordinatorInstance>,

    /// The run's zero-copy state account.
    #[account(
        zero,
        constraint = coordinator_account.as_ref().data_len() == CoordinatorAccount::SPACE
            @ CoordinatorProgramError::CoordinatorAccountIncorrectSize,
    )]
    pub coordinator_account: AccountLoader<'info, CoordinatorAccount>,

    /// The system program.
    pub system_program: Program<'info, System>,
}

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct InitCoordinatorParams {
    pub main_authority: Pubkey,
    pub join_authority: Pubkey,
    /// 1–32 bytes, no NUL.
    pub run_id: String,
    /// ≤ 96 bytes; clients refuse to train unless their version equals it (or it is "test").
    pub client_version: String,
    /// A local run (one machine or LAN): peer records may name loopback, private and DNS
    /// targets. Fixed for the run's life (`CoordinatorInstance::local_run`).
    pub local_run: bool,
}

fn init_run_id_seed(run_id: &str) -> Result<&[u8]> {
    require!(CoordinatorInstance::run_id_ok(run_id), CoordinatorProgramError::RunIdInvalidLength);
    Ok(run_id.as_bytes())
}

pub fn init_coordinator_processor(
    ctx: Context<InitCoordinator>,
    params: InitCoordinatorParams,
) -> Result<()> {
    let run_id =
        FixedString32::new(&params.run_id).ok_or(CoordinatorProgramError::RunIdInvalidLength)?;
    let client_version = FixedString96::new(&params.client_version)
        .ok_or(CoordinatorProgramError::ClientVersionInvalid)?;

    let mut account = ctx.accounts.coordinator_account.load_init()?;
    account.version = COORDINATOR_ACCOUNT_VERSION;
    account.nonce = 0;
    account.state.coordinator.run_id = run_id;
    account.state.client_version = client_version;
    // Everything else stays zero: run_state Uninitialized, no model, no clients.

    let instance = &mut ctx.accounts.coordinator_instance;
    instance.bump = ctx.bumps.coordinator_instance;
    instance.main_authority = params.main_authority;
    instance.join_authority = params.join_authority;
    instance.coordinator_account = ctx.accounts.coordinator_account.key();
    instance.run_id = params.run_id;
    instance.local_run = params.local_run;
    Ok(())
}
