//! The program's errors. Codes are Anchor custom codes from 6000 in declaration order: the first
//! twelve are the core's `CoordinatorError`s in the core's order (so code = 6000 + the core
//! discriminant), then the program's own.

use anchor_lang::prelude::*;

use crate::core::{CoordinatorError, PeerAddrsError};

#[error_code]
pub enum CoordinatorProgramError {
    // --- the core's errors, one to one --------------------------------------------------------
    #[msg("no active round: the run is not training")]
    NoActiveRound,
    #[msg("invalid witness: the sender is not the healthy epoch client (or elected witness) at the index its proof claims")]
    InvalidWitness,
    #[msg("the run is not in a phase that accepts this message")]
    InvalidRunState,
    #[msg("this client already sent a witness for the current round")]
    DuplicateWitness,
    #[msg("invalid health check: no entries, reporter not an epoch client, round height < 2, the reporter names itself, or a reported client is not agreed missing by a quorum of witnesses")]
    InvalidHealthCheck,
    #[msg("the run is halted (uninitialized, paused or finished)")]
    Halted,
    #[msg("invalid checkpoint: the sender is not an elected checkpointer, or the checkpoint kind cannot replace the run's")]
    InvalidCheckpoint,
    #[msg("the round already holds the maximum number of witnesses (32)")]
    WitnessesFull,
    #[msg("only a paused or uninitialized run can be resumed")]
    CannotResume,
    #[msg("invalid withdraw: no healthy client at that index")]
    InvalidWithdraw,
    #[msg("invalid committee selection: the round's parameters are inconsistent")]
    InvalidCommitteeSelection,
    #[msg("invalid committee proof: the index, position or client does not match the round")]
    InvalidCommitteeProof,

    // --- the program's own ------------------------------------------------------------------
    #[msg("the run is finished and can no longer be updated")]
    UpdateConfigFinished,
    #[msg("config, model, progress and client version can only be changed while the run is halted (pause it first)")]
    UpdateConfigNotHalted,
    #[msg("the coordinator account does not have the size this program expects (CoordinatorAccount::SPACE)")]
    CoordinatorAccountIncorrectSize,
    #[msg("the coordinator account has an unknown layout version")]
    CoordinatorAccountVersionMismatch,
    #[msg("the coordinator account is not the one this run's instance points to (wrong run id?)")]
    CoordinatorAccountMismatch,
    #[msg("256 wallets are registered and none can be replaced: each is in the epoch, joined recently, or holds points")]
    ClientsFull,
    #[msg("the config fails its sanity check (see the program log for the broken rule)")]
    ConfigSanityCheckFailed,
    #[msg("the model fails its sanity check (see the program log for the broken rule)")]
    ModelSanityCheckFailed,
    #[msg("the progress fails its sanity check: step must be at least 1")]
    ProgressSanityCheckFailed,
    #[msg("the signer is not a registered client of this run (join first)")]
    SignerNotAClient,
    #[msg("client_id.signer must be the transaction's user (signer)")]
    SignerMismatch,
    #[msg("the run must be halted (paused, uninitialized or finished) before it is freed")]
    CloseCoordinatorNotHalted,
    #[msg("as many clients as the run's global_batch_size_end already joined this epoch")]
    MoreClientsThanBatches,
    #[msg("run_id must be 1 to 32 bytes without NUL")]
    RunIdInvalidLength,
    #[msg("client_version must be at most 96 bytes without NUL")]
    ClientVersionInvalid,
    #[msg("the signer is not the run's main authority")]
    NotMainAuthority,
    #[msg("the authorization does not let this user join: it must be active, granted by the run's join_authority for scope CoordinatorJoinRun, to this user, a delegate, or everyone")]
    JoinNotAuthorized,
    #[msg("witness metadata holds more than 8 evals")]
    WitnessMetadataInvalid,
    #[msg("a health check holds 1 to 8 entries")]
    HealthCheckCountInvalid,
    #[msg("the run has no valid model stored")]
    ModelMissing,
    #[msg("the model does not fit the account's model blob")]
    ModelTooLarge,
    #[msg("the cluster clock is negative")]
    InvalidClock,
    #[msg("arithmetic overflow")]
    ArithmeticOverflow,
    // Appended last so that every earlier code keeps its number.
    #[msg("client_id.p2p_identity is held by another wallet of this run (pending for the next epoch or in the current one); only a wallet joining with its own key (p2p_identity = signer) can take it over")]
    P2PIdentityTaken,
    // Peer records (`set_peer_addrs`), appended after P2PIdentityTaken for the same reason.
    #[msg("a peer record holds at most 4 addresses")]
    TooManyPeerAddrs,
    #[msg("a peer address must be 1 to 128 bytes")]
    PeerAddrBadLength,
    #[msg("a peer address may only hold printable ASCII without spaces (0x21..=0x7e)")]
    PeerAddrNotPrintable,
    #[msg("a peer address must start with '/' (a multiaddr)")]
    PeerAddrNoLeadingSlash,
    // Issue 26, appended for the same reason.
    #[msg("a peer address names a target no peer of this run can be at: an IP that is unspecified, link-local, broadcast, multicast or reserved, an /ip4 or /ip6 value that is not an IP, or, unless the run is local, a loopback, private or DNS target")]
    PeerAddrUnroutable,
    #[msg("an epoch rate may be at most MAX_EPOCH_RATE points (2^40): more could overflow the points ledger and stop every epoch end")]
    EpochRateTooLarge,
}

impl From<CoordinatorError> for CoordinatorProgramError {
    fn from(e: CoordinatorError) -> Self {
        match e {
            CoordinatorError::NoActiveRound => Self::NoActiveRound,
            CoordinatorError::InvalidWitness => Self::InvalidWitness,
            CoordinatorError::InvalidRunState => Self::InvalidRunState,
            CoordinatorError::DuplicateWitness => Self::DuplicateWitness,
            CoordinatorError::InvalidHealthCheck => Self::InvalidHealthCheck,
            CoordinatorError::Halted => Self::Halted,
            CoordinatorError::InvalidCheckpoint => Self::InvalidCheckpoint,
            CoordinatorError::WitnessesFull => Self::WitnessesFull,
            CoordinatorError::CannotResume => Self::CannotResume,
            CoordinatorError::InvalidWithdraw => Self::InvalidWithdraw,
            CoordinatorError::InvalidCommitteeSelection => Self::InvalidCommitteeSelection,
            CoordinatorError::InvalidCommitteeProof => Self::InvalidCommitteeProof,
        }
    }
}

impl From<PeerAddrsError> for CoordinatorProgramError {
    fn from(e: PeerAddrsError) -> Self {
        match e {
            PeerAddrsError::TooMany => Self::TooManyPeerAddrs,
            PeerAddrsError::BadLength => Self::PeerAddrBadLength,
            PeerAddrsError::NotPrintable => Self::PeerAddrNotPrintable,
            PeerAddrsError::NoLeadingSlash => Self::PeerAddrNoLeadingSlash,
            PeerAddrsError::Unroutable => Self::PeerAddrUnroutable,
        }
    }
}

impl From<PeerAddrsError> for anchor_lang::error::Error {
    fn from(e: PeerAddrsError) -> Self {
        CoordinatorProgramError::from(e).into()
    }
}

impl From<CoordinatorError> for anchor_lang::error::Error {
    fn from(e: CoordinatorError) -> Self {
        CoordinatorProgramError::from(e).into()
    }
}
