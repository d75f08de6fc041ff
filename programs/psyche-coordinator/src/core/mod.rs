//! The coordinator core: a pure, deterministic port of `client/psyche/coordinator` (and the
//! primitives it uses from `client/psyche/protocol`). Python is the contract; the shared vectors
//! in `tests/vectors/` prove the two agree. `peer_addrs` is the program's own: the rules of a
//! peer record's addresses (`set_peer_addrs`).
//!
//! Everything the program stores lives in `repr(C)` Pod types without implicit padding, enums or
//! bools (docs/solana.md), and the state machine mutates them in place: the account is ~165 KB
//! while SBF has a 4 KB stack frame and a 32 KB heap. Every public handler validates before it
//! mutates, so an `Err` leaves the state untouched.

pub mod bloom;
pub mod committee;
pub mod config;
pub mod consensus;
pub mod coordinator;
pub mod data_selection;
pub mod error;
pub mod handlers;
pub mod hash;
pub mod indices;
pub mod lost_work;
pub mod model;
pub mod peer_addrs;
pub mod queries;
pub mod rewards;
pub mod shuffle;
pub mod types;
pub mod verification;

pub use bloom::Bloom;
pub use committee::{
    Committee, CommitteeProof, CommitteeSelection, CommitteeSelectionError, HealthCheck,
};
pub use config::{CoordinatorConfig, Progress};
pub use error::{CoordinatorError, TickResult};
pub use model::{Checkpoint, Model, ModelBlob};
pub use peer_addrs::{check_peer_addrs, PeerAddrsError};
pub use queries::{PrevClients, RoundClients};
pub use rewards::{epoch_points, EpochPoints};
pub use types::*;

/// Anchor's `#[program]` expands `custom_panic_default!` on SBF (`target_os = "solana"`), and its
/// `core::panic::PanicInfo` resolves from the crate root, where this module shadows the `core`
/// crate. A module rather than `pub use ::core::panic`: that would also re-export the `panic!`
/// macro and make `panic!` ambiguous wherever `psyche_coordinator::core::*` is glob-imported.
#[doc(hidden)]
pub mod panic {
    pub use ::core::panic::PanicInfo;
}
