//! Seeds, versions and limits of the coordinator program (the core's own limits live in
//! `core::types`).

/// First seed of the `CoordinatorInstance` PDA `["coordinator", run_id]`.
pub const COORDINATOR_INSTANCE_SEEDS_PREFIX: &[u8] = b"coordinator";

/// Layout version of `CoordinatorAccount`; bump it (and migrate) whenever the layout changes.
pub const COORDINATOR_ACCOUNT_VERSION: u64 = 2;

/// Scope of the authorizer's `Authorization` that `join_run` requires from the run's
/// `join_authority`.
pub const JOIN_RUN_AUTHORIZATION_SCOPE: &[u8] = b"CoordinatorJoinRun";

/// Registered wallets kept per run (points ledger + join registrations). Stale entries are
/// reused once the list is full (see `ClientsState::register`).
pub const MAX_REGISTERED_CLIENTS: usize = 256;

/// Longest `client_version` (bytes).
pub const CLIENT_VERSION_MAX_LEN: usize = 96;

/// Most entries in one `health_check`: each costs a committee-shuffle verification, and 8 keep
/// the transaction well under its size and compute limits.
pub const MAX_HEALTH_CHECKS_PER_INSTRUCTION: usize = 8;

// --- peer records (`set_peer_addrs`, `close_peer_record`) -----------------------------------
// `#[constant]` puts these three in the IDL's `constants`, where the Python client's copies are
// checked against them (tests/unit/solana/test_peer_record.py).

/// First seed of the `PeerRecord` PDA `["peer", coordinator_instance, signer]`.
#[anchor_lang::constant]
pub const PEER_RECORD_SEEDS_PREFIX: &[u8] = b"peer";

/// Most P2P addresses (libp2p multiaddrs) one peer record holds.
#[anchor_lang::constant]
pub const MAX_PEER_ADDRS: u8 = 4;

/// Longest P2P address in a peer record (bytes).
#[anchor_lang::constant]
pub const MAX_PEER_ADDR_LEN: u8 = 128;

/// Largest `earning_rate_total_shared` and `slashing_rate_per_client` `set_future_epoch_rates`
/// accepts (2^40 points per epoch). The ledger adds with checked arithmetic, so an epoch end
/// that would overflow a client's `earned` or `slashed` fails, and so would every later tick:
/// at this bound one wallet needs 2^24 (≈ 16.7 million) epochs at the full rate to get there.
#[anchor_lang::constant]
pub const MAX_EPOCH_RATE: u64 = 1_099_511_627_776_u64; // 2^40
