//! psyche coordinator program.
//!
//! `core` is the pure coordinator state machine (a port of `client/psyche/coordinator`), kept
//! byte-identical to the Python implementation by `tests/vectors_*.rs`. `state` holds the
//! accounts (`CoordinatorInstance` PDA, zero-copy `CoordinatorAccount`, per-wallet
//! `PeerRecord` PDAs) and the program-side bookkeeping around the core (pending list, seed,
//! epoch rates, points); `instructions` has one file per instruction with its documented
//! accounts. This file only dispatches.

use anchor_lang::prelude::*;
// Links the libcalls of solana-compiler-builtins (see Cargo.toml) into the SBF build.
#[cfg(target_os = "solana")]
use solana_compiler_builtins as _;

pub mod constants;
pub mod core;
pub mod error;
pub mod instructions;
pub mod state;

pub use instructions::*;
pub use state::*;

// `Checkpoint` and `HealthCheck` are spelled with their full paths in the handlers below:
// Anchor generates instruction structs named after the instructions (`instruction::Checkpoint`,
// `instruction::HealthCheck`), which would shadow the argument types.
use crate::core::{
    Bloom, CoordinatorConfig, Model, Progress, RunMetadata, Verdict, WitnessMetadata,
    WitnessProofArg,
};

declare_id!("9jg3qZJhRk3LRFtgFPCKAm9ZnGcYqG2cLPny5681vyff");

#[program]
pub mod psyche_coordinator {
    use super::*;

    /// Creates a run (instance PDA + the zero-copy account created in the same transaction).
    pub fn init_coordinator(
        ctx: Context<InitCoordinator>,
        params: InitCoordinatorParams,
    ) -> Result<()> {
        init_coordinator_processor(ctx, params)
    }

    /// Closes a halted run; rent to `spill`.
    pub fn free_coordinator(
        ctx: Context<FreeCoordinator>,
        params: FreeCoordinatorParams,
    ) -> Result<()> {
        free_coordinator_processor(ctx, params)
    }

    /// Owner: metadata (any time); config, model, progress (halted only).
    pub fn update(
        ctx: Context<OwnerCoordinatorAccounts>,
        metadata: Option<RunMetadata>,
        config: Option<CoordinatorConfig>,
        model: Option<Model>,
        progress: Option<Progress>,
    ) -> Result<()> {
        update_processor(ctx, metadata, config, model, progress)
    }

    /// Owner: the required client version (halted only; bumps the nonce).
    pub fn update_client_version(
        ctx: Context<OwnerCoordinatorAccounts>,
        new_version: String,
    ) -> Result<()> {
        update_client_version_processor(ctx, new_version)
    }

    /// Owner: points of future epochs.
    pub fn set_future_epoch_rates(
        ctx: Context<OwnerCoordinatorAccounts>,
        earning_rate_total_shared: Option<u64>,
        slashing_rate_per_client: Option<u64>,
    ) -> Result<()> {
        set_future_epoch_rates_processor(ctx, earning_rate_total_shared, slashing_rate_per_client)
    }

    /// Owner: pause, or resume (and start from Uninitialized).
    pub fn set_paused(ctx: Context<OwnerCoordinatorAccounts>, paused: bool) -> Result<()> {
        set_paused_processor(ctx, paused)
    }

    /// Client: register for the next epoch (requires an authorizer `Authorization`).
    pub fn join_run(ctx: Context<JoinRun>, params: JoinRunParams) -> Result<()> {
        join_run_processor(ctx, params)
    }

    /// Anyone: advance time-driven transitions.
    pub fn tick(ctx: Context<PermissionlessCoordinatorAccounts>) -> Result<()> {
        tick_processor(ctx)
    }

    /// Client: a round witness.
    pub fn witness(
        ctx: Context<PermissionlessCoordinatorAccounts>,
        proof: WitnessProofArg,
        participant_bloom: Box<Bloom>,
        broadcast_bloom: Box<Bloom>,
        verdict: Verdict,
        metadata: WitnessMetadata,
    ) -> Result<()> {
        witness_processor(ctx, proof, participant_bloom, broadcast_bloom, verdict, metadata)
    }

    /// Client: model loaded during Warmup.
    pub fn warmup_witness(
        ctx: Context<PermissionlessCoordinatorAccounts>,
        proof: WitnessProofArg,
        participant_bloom: Box<Bloom>,
        broadcast_bloom: Box<Bloom>,
    ) -> Result<()> {
        warmup_witness_processor(ctx, proof, participant_bloom, broadcast_bloom)
    }

    /// Client: report unhealthy clients of the previous round.
    pub fn health_check(
        ctx: Context<PermissionlessCoordinatorAccounts>,
        checks: Vec<crate::core::HealthCheck>,
    ) -> Result<()> {
        health_check_processor(ctx, checks)
    }

    /// Elected checkpointer: where the model was stored (Cooldown only).
    pub fn checkpoint(
        ctx: Context<PermissionlessCoordinatorAccounts>,
        checkpoint: crate::core::Checkpoint,
    ) -> Result<()> {
        checkpoint_processor(ctx, checkpoint)
    }

    /// Any wallet: publish its P2P addresses for the run (creates its `PeerRecord` on first use).
    pub fn set_peer_addrs(ctx: Context<SetPeerAddrs>, params: SetPeerAddrsParams) -> Result<()> {
        set_peer_addrs_processor(ctx, params)
    }

    /// The record's signer: close its `PeerRecord`; rent back to the signer.
    pub fn close_peer_record(ctx: Context<ClosePeerRecord>) -> Result<()> {
        close_peer_record_processor(ctx)
    }
}
