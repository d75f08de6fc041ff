pub mod authorization_close;
pub mod authorization_create;
pub mod authorization_grantee_update;
pub mod authorization_grantor_update;

pub use authorization_close::*;
pub use authorization_create::*;
pub use authorization_grantee_update::*;
pub use authorization_grantor_update::*;
