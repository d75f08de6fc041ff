pub mod clients_state;
pub mod coordinator_account;
pub mod coordinator_instance;
pub mod peer_record;

pub use clients_state::*;
pub use coordinator_account::*;
pub use coordinator_instance::*;
pub use peer_record::*;
