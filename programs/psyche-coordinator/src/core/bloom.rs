//! The witness bloom filter (`client/psyche/protocol/bloom.py`): 3072 bits, 8 keys derived from
//! one u64 seed by splitmix64, items hashed with FNV-1a 64 seeded by the key.

use anchor_lang::prelude::*;
use bytemuck::{Pod, Zeroable};

pub const BLOOM_BITS: u64 = 3072;
pub const BLOOM_WORDS: usize = 48;
pub const BLOOM_KEYS: usize = 8;
/// Encoded size: the seed then the words, all u64 little-endian (= borsh = bytemuck layout).
pub const BLOOM_BYTES: usize = 8 + 8 * BLOOM_WORDS;

const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// The first `BLOOM_KEYS` outputs of splitmix64 with its state starting at `seed`.
pub fn splitmix64_keys(seed: u64) -> [u64; BLOOM_KEYS] {
    let mut state = seed;
    let mut keys = [0u64; BLOOM_KEYS];
    for key in keys.iter_mut() {
        // splitmix64 is defined modulo 2^64: wrapping here is the algorithm, not an overflow.
        state = state.wrapping_add(GOLDEN_GAMMA);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        *key = z ^ (z >> 31);
    }
    keys
}

/// FNV-1a 64 over `item` with `key` in place of the offset basis (arithmetic modulo 2^64).
pub fn fnv1a64(key: u64, item: &[u8]) -> u64 {
    item.iter().fold(key, |h, &b| (h ^ u64::from(b)).wrapping_mul(FNV_PRIME))
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, Pod, Zeroable, AnchorSerialize, AnchorDeserialize)]
#[repr(C)]
pub struct Bloom {
    pub seed: u64,
    pub words: [u64; BLOOM_WORDS],
}

impl Bloom {
    pub fn empty(seed: u64) -> Self {
        Self { seed, words: [0; BLOOM_WORDS] }
    }

    pub fn keys(&self) -> [u64; BLOOM_KEYS] {
        splitmix64_keys(self.seed)
    }

    /// The bit positions `item` maps to, one per key (may repeat).
    pub fn positions(&self, item: &[u8]) -> [u64; BLOOM_KEYS] {
        self.keys().map(|k| fnv1a64(k, item) % BLOOM_BITS)
    }

    pub fn add(&mut self, item: &[u8]) {
        for pos in self.positions(item) {
            self.words[(pos >> 6) as usize] |= 1 << (pos & 63);
        }
    }

    pub fn contains(&self, item: &[u8]) -> bool {
        // Hash lazily: most absent items miss on the first or second key.
        self.keys().iter().all(|&k| {
            let pos = fnv1a64(k, item) % BLOOM_BITS;
            (self.words[(pos >> 6) as usize] >> (pos & 63)) & 1 == 1
        })
    }

    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    pub fn to_bytes(&self) -> [u8; BLOOM_BYTES] {
        let mut out = [0u8; BLOOM_BYTES];
        out[..8].copy_from_slice(&self.seed.to_le_bytes());
        for (chunk, w) in out[8..].chunks_exact_mut(8).zip(self.words.iter()) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// Strict: exactly `BLOOM_BYTES` bytes, since filters arrive from untrusted peers.
    pub fn from_bytes(data: &[u8]) -> Option<Self> {
        if data.len() != BLOOM_BYTES {
            return None;
        }
        let mut values = data.chunks_exact(8).map(|c| {
            let mut le = [0u8; 8];
            le.copy_from_slice(c);
            u64::from_le_bytes(le)
        });
        let seed = values.next()?;
        let mut words = [0u64; BLOOM_WORDS];
        for (w, v) in words.iter_mut().zip(values) {
            *w = v;
        }
        Some(Self { seed, words })
    }
}
