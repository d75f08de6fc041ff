//! Seeds of the treasurer's PDAs. `#[constant]` puts them in the IDL, where the Python client's
//! copies are checked against them.

/// First seed of the `Run` PDA `["Run", index u64 LE]`.
#[anchor_lang::constant]
pub const RUN_SEEDS_PREFIX: &[u8] = b"Run";

/// First seed of the run's collateral token account PDA `["RunCollateral", run]`.
#[anchor_lang::constant]
pub const RUN_COLLATERAL_SEEDS_PREFIX: &[u8] = b"RunCollateral";

/// First seed of the `Participant` PDA `["Participant", run, user]`.
#[anchor_lang::constant]
pub const PARTICIPANT_SEEDS_PREFIX: &[u8] = b"Participant";

/// Seconds between `run_wind_down` and the first `run_close` (7 days): participants claim what
/// they earned in the meantime; what is left afterwards goes to the run's main authority.
#[anchor_lang::constant]
pub const RUN_CLOSE_GRACE_SECONDS: i64 = 7 * 24 * 3600;
