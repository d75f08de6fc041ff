//! Limits of the authorizer program.

/// Longest scope, in bytes: the scope is a PDA seed, and a seed holds at most 32 bytes.
pub const MAX_SCOPE_LEN: usize = 32;

/// Most delegates one authorization can hold. Bounded so the account stays small (64 delegates
/// = 2 KiB) and a single update cannot ask for a reallocation beyond the runtime's 10 KiB per
/// instruction growth limit; a grantee needing more can use more grantee keys.
pub const MAX_DELEGATES: usize = 64;

/// Seconds after the grantor's last update before an authorization with delegates can be closed,
/// so a grantor cannot revoke and immediately reclaim an account whose delegates are still in use
/// by the grantee (it can always deactivate at once; closing only reclaims the rent).
pub const CLOSE_DELAY_WITH_DELEGATES_SECONDS: i64 = 30 * 24 * 60 * 60;
