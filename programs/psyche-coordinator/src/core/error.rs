//! Outcomes of the coordinator's entry points (`client/psyche/coordinator/types.py`).

use core::fmt;

/// Why a tick or message was rejected. The order (and so the discriminant) is the Python
/// enum's, which is also the order of the program's Anchor error codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum CoordinatorError {
    NoActiveRound = 0,
    InvalidWitness = 1,
    InvalidRunState = 2,
    DuplicateWitness = 3,
    InvalidHealthCheck = 4,
    Halted = 5,
    InvalidCheckpoint = 6,
    WitnessesFull = 7,
    CannotResume = 8,
    InvalidWithdraw = 9,
    InvalidCommitteeSelection = 10,
    InvalidCommitteeProof = 11,
}

impl CoordinatorError {
    pub const ALL: [CoordinatorError; 12] = [
        Self::NoActiveRound,
        Self::InvalidWitness,
        Self::InvalidRunState,
        Self::DuplicateWitness,
        Self::InvalidHealthCheck,
        Self::Halted,
        Self::InvalidCheckpoint,
        Self::WitnessesFull,
        Self::CannotResume,
        Self::InvalidWithdraw,
        Self::InvalidCommitteeSelection,
        Self::InvalidCommitteeProof,
    ];

    /// The variant's name, as the shared vectors and the Python enum spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::NoActiveRound => "NoActiveRound",
            Self::InvalidWitness => "InvalidWitness",
            Self::InvalidRunState => "InvalidRunState",
            Self::DuplicateWitness => "DuplicateWitness",
            Self::InvalidHealthCheck => "InvalidHealthCheck",
            Self::Halted => "Halted",
            Self::InvalidCheckpoint => "InvalidCheckpoint",
            Self::WitnessesFull => "WitnessesFull",
            Self::CannotResume => "CannotResume",
            Self::InvalidWithdraw => "InvalidWithdraw",
            Self::InvalidCommitteeSelection => "InvalidCommitteeSelection",
            Self::InvalidCommitteeProof => "InvalidCommitteeProof",
        }
    }
}

impl fmt::Display for CoordinatorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a successful `tick` (or an accepted `checkpoint`) did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TickResult {
    Ticked,
    /// The epoch ended: `true` at the end of Cooldown, `false` when Warmup lost its clients.
    EpochEnd(bool),
}
