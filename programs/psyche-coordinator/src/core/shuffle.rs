//! Deterministic shuffles (`client/psyche/protocol/shuffle.py`): the Ethereum-2 swap-or-not
//! shuffle for committee/witness proofs, and an LCG-driven Fisher–Yates for data assignment.

use super::hash::sha256v;

pub const SHUFFLE_ROUNDS: u8 = 90;
pub const LCG_MULTIPLIER: u64 = 6364136223846793005;
pub const LCG_INCREMENT: u64 = 1442695040888963407;

/// Position of `index` in the swap-or-not permutation of `0..n` under the 32-byte `seed`;
/// `None` unless `index < n` (the Python raises there).
pub fn compute_shuffled_index(index: u64, n: u64, seed: &[u8; 32]) -> Option<u64> {
    if index >= n {
        return None;
    }
    let mut index = index;
    for r in 0..SHUFFLE_ROUNDS {
        let round = [r];
        let pivot_hash = sha256v(&[seed, &round]);
        let mut le = [0u8; 8];
        le.copy_from_slice(&pivot_hash[..8]);
        let pivot = u64::from_le_bytes(le) % n;
        // (pivot + n - index) mod n without leaving u64: both are already below n.
        let flip = if pivot >= index { pivot - index } else { n - (index - pivot) };
        let pos = index.max(flip);
        // The reference feeds pos/256 as a u64 truncated to its low 4 LE bytes.
        let block = ((pos / 256) & 0xffff_ffff) as u32;
        let source = sha256v(&[seed, &round, &block.to_le_bytes()]);
        let byte = source[((pos % 256) / 8) as usize];
        if (byte >> (pos % 8)) & 1 == 1 {
            index = flip;
        }
    }
    Some(index)
}

/// 64-bit LCG; `next()` advances and returns the new state (arithmetic modulo 2^64).
#[derive(Clone, Copy, Debug)]
pub struct Lcg {
    state: u64,
}

impl Lcg {
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    pub fn state(&self) -> u64 {
        self.state
    }

    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_mul(LCG_MULTIPLIER).wrapping_add(LCG_INCREMENT);
        self.state
    }
}

/// Fisher–Yates shuffle of `items` in place, driven by `Lcg(seed)`: from the last index down to
/// 1, `j = next() mod (i + 1)`, swap.
pub fn deterministic_shuffle<T>(items: &mut [T], seed: u64) {
    let mut rng = Lcg::new(seed);
    for i in (1..items.len()).rev() {
        let j = (rng.next() % (i as u64 + 1)) as usize;
        items.swap(i, j);
    }
}
