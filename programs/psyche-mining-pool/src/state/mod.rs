pub mod lender;
pub mod pool;

pub use lender::*;
pub use pool::*;
