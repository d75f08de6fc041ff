//! The account sets shared by several instructions.

use anchor_lang::prelude::*;

use crate::constants::COORDINATOR_INSTANCE_SEEDS_PREFIX;
use crate::core::{Bloom, Verdict, Witness, WitnessProof, WitnessProofArg};
use crate::error::CoordinatorProgramError;
use crate::state::{CoordinatorAccount, CoordinatorInstance};

/// The run owner's instructions (`update`, `update_client_version`, `set_future_epoch_rates`,
/// `set_paused`).
///
/// Accounts:
/// 0. `[signer]` authority: must be `coordinator_instance.main_authority`.
/// 1. `[]` coordinator_instance: the run's PDA `["coordinator", run_id]`.
/// 2. `[writable]` coordinator_account: must be `coordinator_instance.coordinator_account`.
#[derive(Accounts)]
pub struct OwnerCoordinatorAccounts<'info> {
    /// The run's main authority.
    pub authority: Signer<'info>,

    /// The run's PDA `["coordinator", run_id]`.
    #[account(
        seeds = [COORDINATOR_INSTANCE_SEEDS_PREFIX, coordinator_instance.run_id.as_bytes()],
        bump = coordinator_instance.bump,
        constraint = coordinator_instance.main_authority == authority.key()
            @ CoordinatorProgramError::NotMainAuthority,
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

/// Instructions any signer may send (`tick`) or that map the signer to a registered client
/// (`witness`, `warmup_witness`, `health_check`, `checkpoint`).
///
/// Accounts:
/// 0. `[signer]` user: any wallet (for the client instructions: a registered client's wallet).
/// 1. `[]` coordinator_instance: the run's PDA `["coordinator", run_id]`.
/// 2. `[writable]` coordinator_account: must be `coordinator_instance.coordinator_account`.
#[derive(Accounts)]
pub struct PermissionlessCoordinatorAccounts<'info> {
    /// Any wallet; for client instructions a registered client.
    pub user: Signer<'info>,

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

/// The stored form of a witness built on the heap: a witness is ~800 bytes and SBF stack frames
/// are 4 KiB, so neither the arguments (boxed in the instruction signatures; same borsh bytes)
/// nor this copy live on the stack.
pub fn stored_witness(
    proof: &WitnessProofArg,
    participant: &Bloom,
    broadcast: &Bloom,
    verdict: Verdict,
) -> Box<Witness> {
    let mut witness: Box<Witness> = bytemuck::zeroed_box();
    witness.proof = WitnessProof::new(proof.position, proof.index, proof.witness, verdict);
    witness.participant_bloom = *participant;
    witness.broadcast_bloom = *broadcast;
    witness
}
