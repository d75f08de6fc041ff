pub mod lender_claim;
pub mod lender_create;
pub mod lender_deposit;
pub mod pool_create;
pub mod pool_extract;
pub mod pool_redeemable_deposit;
pub mod pool_update;
mod transfer;

pub use lender_claim::*;
pub use lender_create::*;
pub use lender_deposit::*;
pub use pool_create::*;
pub use pool_extract::*;
pub use pool_redeemable_deposit::*;
pub use pool_update::*;
