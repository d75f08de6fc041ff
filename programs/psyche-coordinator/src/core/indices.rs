//! `Indices`: up to 256 `u16` indices in a fixed array, the core's replacement for `Vec<u16>`
//! wherever the length follows a client list. On SBF the heap is a 32 KB bump allocator that
//! never frees, so an instruction must not allocate in proportion to the client lists
//! (`tests/program_costs.rs` checks it); 514 bytes of stack fit the 4 KB frame.

use super::types::MAX_CLIENTS;

#[derive(Clone)]
pub struct Indices {
    items: [u16; MAX_CLIENTS],
    len: usize,
}

impl Indices {
    pub const CAPACITY: usize = MAX_CLIENTS;

    pub fn new() -> Self {
        Self { items: [0; MAX_CLIENTS], len: 0 }
    }

    /// `0..n` (at most `CAPACITY`).
    pub fn range(n: usize) -> Self {
        let mut out = Self::new();
        out.len = n.min(MAX_CLIENTS);
        for (i, x) in out.items[..out.len].iter_mut().enumerate() {
            *x = i as u16;
        }
        out
    }

    /// `n` copies of `value` (at most `CAPACITY`).
    pub fn filled(n: usize, value: u16) -> Self {
        let mut out = Self::new();
        out.len = n.min(MAX_CLIENTS);
        out.items[..out.len].fill(value);
        out
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_slice(&self) -> &[u16] {
        &self.items[..self.len]
    }

    pub fn as_mut_slice(&mut self) -> &mut [u16] {
        &mut self.items[..self.len]
    }

    pub fn get(&self, i: usize) -> Option<u16> {
        self.as_slice().get(i).copied()
    }

    pub fn truncate(&mut self, n: usize) {
        self.len = self.len.min(n);
    }

    /// Inserts `value` at `at` (clamped to the length), shifting the tail; `false` when full.
    pub fn insert(&mut self, at: usize, value: u16) -> bool {
        if self.len == MAX_CLIENTS {
            return false;
        }
        let at = at.min(self.len);
        self.items.copy_within(at..self.len, at + 1);
        self.items[at] = value;
        self.len += 1;
        true
    }
}

impl Default for Indices {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_shifts_like_vec_insert() {
        let mut a = Indices::range(4);
        let mut v: Vec<u16> = (0..4).collect();
        for (at, x) in [(1, 9), (0, 8), (99, 7), (3, 6)] {
            assert!(a.insert(at, x));
            v.insert(at.min(v.len()), x);
            assert_eq!(a.as_slice(), &v[..]);
        }
        let mut full = Indices::range(MAX_CLIENTS);
        assert!(!full.insert(0, 1));
        full.truncate(2);
        assert_eq!(full.as_slice(), &[0, 1]);
    }
}
