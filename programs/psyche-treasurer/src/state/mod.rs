pub mod participant;
pub mod run;

pub use participant::*;
pub use run::*;
