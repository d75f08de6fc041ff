pub mod authorization;

pub use authorization::*;
