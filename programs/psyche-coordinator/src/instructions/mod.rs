//! One file per instruction: its accounts (documented `[signer]` / `[writable]`), its arguments
//! and its processor. `accounts.rs` holds the two account sets most instructions share.

pub mod accounts;
pub mod checkpoint;
pub mod close_peer_record;
pub mod free_coordinator;
pub mod health_check;
pub mod init_coordinator;
pub mod join_run;
pub mod set_future_epoch_rates;
pub mod set_paused;
pub mod set_peer_addrs;
pub mod tick;
pub mod update;
pub mod update_client_version;
pub mod warmup_witness;
pub mod witness;

pub use accounts::*;
pub use checkpoint::*;
pub use close_peer_record::*;
pub use free_coordinator::*;
pub use health_check::*;
pub use init_coordinator::*;
pub use join_run::*;
pub use set_future_epoch_rates::*;
pub use set_paused::*;
pub use set_peer_addrs::*;
pub use tick::*;
pub use update::*;
pub use update_client_version::*;
pub use warmup_witness::*;
pub use witness::*;
