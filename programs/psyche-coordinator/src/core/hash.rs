//! SHA-256 helpers (`client/psyche/protocol/commitment.py`).

/// SHA-256 of `data`.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    solana_sha256_hasher::hashv(&[data]).to_bytes()
}

/// SHA-256 over the concatenation of `parts` (no separators, no length prefixes).
pub fn sha256v(parts: &[&[u8]]) -> [u8; 32] {
    solana_sha256_hasher::hashv(parts).to_bytes()
}
