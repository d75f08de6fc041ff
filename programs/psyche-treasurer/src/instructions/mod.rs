//! One file per instruction: its accounts (documented `[signer]` / `[writable]`), its arguments
//! and its processor.

pub mod participant_claim;
pub mod participant_create;
pub mod run_close;
pub mod run_create;
pub mod run_update;
pub mod run_wind_down;

pub use participant_claim::*;
pub use participant_create::*;
pub use run_close::*;
pub use run_create::*;
pub use run_update::*;
pub use run_wind_down::*;
