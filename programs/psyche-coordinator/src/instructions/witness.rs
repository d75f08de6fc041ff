use anchor_lang::prelude::*;

use crate::core::{Bloom, Verdict, WitnessMetadata, WitnessProofArg};
use crate::error::CoordinatorProgramError;
use crate::instructions::{stored_witness, PermissionlessCoordinatorAccounts};
use crate::state::unix_now;

/// An elected witness reports what it received in the previous round (blooms), its verification
/// verdict on the results it was sampled to recompute (`verdict`: empty unless it is one of a
/// sampled slot's verifiers; the core refuses one that breaks the rules with `InvalidWitness`)
/// plus statistics (`metadata`, not stored: indexers read it from the transaction), then the run
/// ticks. The
/// arguments are the compact layout the client builds from the IDL
/// (`client/psyche/solana/instructions.py`); the largest such transaction fits the
/// 1232-byte limit (tests/program_tx_size.rs, tests/unit/solana/test_witness_budget.py). Accounts:
/// `PermissionlessCoordinatorAccounts` (`user` must be a registered client).
pub fn witness_processor(
    ctx: Context<PermissionlessCoordinatorAccounts>,
    proof: WitnessProofArg,
    participant_bloom: Box<Bloom>,
    broadcast_bloom: Box<Bloom>,
    verdict: Verdict,
    metadata: WitnessMetadata,
) -> Result<()> {
    require!(metadata.check(), CoordinatorProgramError::WitnessMetadataInvalid);
    let clock = Clock::get()?;
    let now = unix_now(&clock)?;
    let mut account = ctx.accounts.coordinator_account.load_mut()?;
    account.check_version()?;
    let state = &mut account.state;
    let from = state.registered_id(&ctx.accounts.user.key())?;
    let witness = stored_witness(&proof, &participant_bloom, &broadcast_bloom, verdict);
    state.coordinator.witness(&from, &witness, now)?;
    state.tick(&clock)?;
    account.bump_nonce()
}
