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
    Some(swap_or_not(index, n, seed, 0..SHUFFLE_ROUNDS))
}

/// The inverse of `compute_shuffled_index`: the `index` whose position is `position`. Each
/// swap-or-not round is an involution (from `flip` the round finds the same pivot, the same
/// `pos` and the same bit, and swaps back), so the rounds in reverse order undo the shuffle. The
/// program uses it to find which sampled slot holds a given client with one shuffle instead of
/// one per slot.
pub fn compute_unshuffled_index(position: u64, n: u64, seed: &[u8; 32]) -> Option<u64> {
    if position >= n {
        return None;
    }
    Some(swap_or_not(position, n, seed, (0..SHUFFLE_ROUNDS).rev()))
}

fn swap_or_not(index: u64, n: u64, seed: &[u8; 32], rounds: impl Iterator<Item = u8>) -> u64 {
    let mut index = index;
    for r in rounds {
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
    index
}

/// One swap-or-not permutation evaluated at many indices: each round's two hashes (the pivot, and
/// the bit block of positions below 256, the only block while a round has at most 256 clients)
/// are computed once instead of once per index, so `k` indices cost about one shuffle's hashes,
/// not `k` (16 verdict slots at ~30k CU per shuffle on SBF would not fit a tick's budget).
pub struct SwapOrNot {
    n: u64,
    seed: [u8; 32],
    pivots: Vec<u64>,
    low_block: Vec<[u8; 32]>,
}

impl SwapOrNot {
    pub fn new(n: u64, seed: &[u8; 32]) -> Self {
        let rounds = || 0..SHUFFLE_ROUNDS;
        let pivots = rounds()
            .map(|r| {
                let h = sha256v(&[seed, &[r]]);
                let mut le = [0u8; 8];
                le.copy_from_slice(&h[..8]);
                if n == 0 {
                    0
                } else {
                    u64::from_le_bytes(le) % n
                }
            })
            .collect();
        let low_block = rounds().map(|r| sha256v(&[seed, &[r], &0u32.to_le_bytes()])).collect();
        Self { n, seed: *seed, pivots, low_block }
    }

    /// `compute_shuffled_index(index, n, seed)`, bit for bit.
    pub fn shuffled(&self, index: u64) -> Option<u64> {
        let n = self.n;
        if index >= n {
            return None;
        }
        let mut index = index;
        for (r, &pivot) in (0..SHUFFLE_ROUNDS).zip(&self.pivots) {
            let flip = if pivot >= index { pivot - index } else { n - (index - pivot) };
            let pos = index.max(flip);
            let block = ((pos / 256) & 0xffff_ffff) as u32;
            let byte = if block == 0 {
                self.low_block[usize::from(r)][((pos % 256) / 8) as usize]
            } else {
                sha256v(&[&self.seed, &[r], &block.to_le_bytes()])[((pos % 256) / 8) as usize]
            };
            if (byte >> (pos % 8)) & 1 == 1 {
                index = flip;
            }
        }
        Some(index)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unshuffling_undoes_the_shuffle() {
        for (n, s) in [(1u64, 1u8), (2, 2), (7, 3), (256, 4), (1000, 5)] {
            let seed = [s; 32];
            let mut seen = vec![false; n as usize];
            for i in 0..n {
                let p = compute_shuffled_index(i, n, &seed).unwrap();
                assert_eq!(compute_unshuffled_index(p, n, &seed), Some(i), "n {n}, index {i}");
                seen[p as usize] = true;
            }
            assert!(seen.iter().all(|&b| b), "a permutation of 0..{n}");
            assert_eq!(compute_unshuffled_index(n, n, &seed), None);
            let batch = SwapOrNot::new(n, &seed);
            for i in 0..=n {
                assert_eq!(batch.shuffled(i), compute_shuffled_index(i, n, &seed), "n {n} {i}");
            }
        }
    }
}
