//! Seeds of the mining pool's PDAs. `#[constant]` puts them in the IDL's `constants`, where a
//! client derives the same addresses from.

use anchor_lang::prelude::*;

/// First seed of the `Pool` PDA `["Pool", index: u64 LE]`.
#[constant]
pub const POOL_SEEDS_PREFIX: &[u8] = b"Pool";

/// First seed of the pool's collateral token account `["PoolCollateral", pool]`.
#[constant]
pub const POOL_COLLATERAL_SEEDS_PREFIX: &[u8] = b"PoolCollateral";

/// First seed of the pool's redeemable token account `["PoolRedeemable", pool]`.
#[constant]
pub const POOL_REDEEMABLE_SEEDS_PREFIX: &[u8] = b"PoolRedeemable";

/// First seed of the `Lender` PDA `["Lender", pool, user]`.
#[constant]
pub const LENDER_SEEDS_PREFIX: &[u8] = b"Lender";
