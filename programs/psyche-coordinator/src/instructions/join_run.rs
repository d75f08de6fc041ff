use anchor_lang::prelude::*;
use psyche_authorizer::Authorization;

use crate::constants::{COORDINATOR_INSTANCE_SEEDS_PREFIX, JOIN_RUN_AUTHORIZATION_SCOPE};
use crate::core::NodeIdentity;
use crate::error::CoordinatorProgramError;
use crate::state::{CoordinatorAccount, CoordinatorInstance, Registration};

/// A client registers for the next epoch (its wallet and its P2P key), then the run ticks.
///
/// Accounts:
/// 0. `[signer]` user: the client's wallet; must equal `params.client_id.signer`.
/// 1. `[]` authorization: an authorizer `Authorization` (owner checked by Anchor) that
///    `is_valid_for(join_authority, user, b"CoordinatorJoinRun")`.
/// 2. `[]` coordinator_instance: the run's PDA `["coordinator", run_id]`.
/// 3. `[writable]` coordinator_account: must be `coordinator_instance.coordinator_account`.
#[derive(Accounts)]
pub struct JoinRun<'info> {
    /// The client's wallet (= `params.client_id.signer`).
    pub user: Signer<'info>,

    /// Authorizer `Authorization` valid for (join_authority, user, "CoordinatorJoinRun").
    #[account(
        constraint = authorization.is_valid_for(
            &coordinator_instance.join_authority,
            &user.key(),
            JOIN_RUN_AUTHORIZATION_SCOPE,
        ) @ CoordinatorProgramError::JoinNotAuthorized,
    )]
    pub authorization: Account<'info, Authorization>,

    /// The run's PDA `["coordinator", run_id]`.
    #[account(
        seeds = [COORDINATOR_INSTANCE_SEEDS_PREFIX, coordinator_instance.run_id.as_bytes()],
        bump = coordinator_instance.bump,
    )]
    pub coordinator_instance: Account<'info, CoordinatorInstance>,

    /// The run's zero-copy state account.
    #[account(
        mut,
        constraint = coordinator_instance.coordinator_account == coordinator_account.key()
            @ CoordinatorProgramError::CoordinatorAccountMismatch,
    )]
    pub coordinator_account: AccountLoader<'info, CoordinatorAccount>,
}

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct JoinRunParams {
    /// Wallet (must be the signer) and P2P key of the client.
    pub client_id: NodeIdentity,
}

pub fn join_run_processor(ctx: Context<JoinRun>, params: JoinRunParams) -> Result<()> {
    require!(
        params.client_id.signer == ctx.accounts.user.key().to_bytes(),
        CoordinatorProgramError::SignerMismatch
    );
    let clock = Clock::get()?;
    let mut account = ctx.accounts.coordinator_account.load_mut()?;
    account.check_version()?;
    let state = &mut account.state;
    // A halted run cannot use the join: resuming bumps `next_active`, voiding it.
    require!(!state.run_state().halted(), CoordinatorProgramError::Halted);
    let max_pending = usize::from(state.coordinator.config.global_batch_size_end);
    let registration = state.clients_state.register(
        params.client_id,
        &state.coordinator.epoch_state,
        max_pending,
    )?;
    if let Registration::Replaced { index, previous } = registration {
        msg!(
            "registered clients full: slot {} of stale wallet {} without points (earned {}, slashed {}) reused",
            index,
            Pubkey::new_from_array(previous.id.signer),
            previous.earned,
            previous.slashed
        );
    }
    state.tick(&clock)?;
    account.bump_nonce()
}
