use anchor_lang::prelude::*;

use crate::core::{Bloom, Verdict, WitnessProofArg};
use crate::instructions::{stored_witness, PermissionlessCoordinatorAccounts};
use crate::state::{random_seed, unix_now};

/// An epoch client says it has loaded the model; once enough did, training starts before
/// `warmup_time`. The core checks that the sender is the healthy client at `proof.index`
/// (the reference trusted the index). Then the run ticks.
/// Accounts: `PermissionlessCoordinatorAccounts` (`user` must be a registered client).
pub fn warmup_witness_processor(
    ctx: Context<PermissionlessCoordinatorAccounts>,
    proof: WitnessProofArg,
    participant_bloom: Box<Bloom>,
    broadcast_bloom: Box<Bloom>,
) -> Result<()> {
    let clock = Clock::get()?;
    let now = unix_now(&clock)?;
    let mut account = ctx.accounts.coordinator_account.load_mut()?;
    account.check_version()?;
    let state = &mut account.state;
    let from = state.registered_id(&ctx.accounts.user.key())?;
    let witness = stored_witness(&proof, &participant_bloom, &broadcast_bloom, Verdict::default());
    state.coordinator.warmup_witness(&from, &witness, now, random_seed(&clock))?;
    state.tick(&clock)?;
    account.bump_nonce()
}
