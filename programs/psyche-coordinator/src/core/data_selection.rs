//! Which samples each trainer trains in a round (`client/psyche/protocol/data_selection.py`;
//! docs/protocol.md, "Data assignment"), including the round's retried lost intervals
//! (docs/protocol.md, "no lost work").
//! Clients and data servers use the whole assignment (here: the shared vectors and off-chain
//! Rust tools); the program itself only needs one trainer's interval (`trainer_order`,
//! `interval_for_slot`) when it queues lost work, without the committee checks.

use super::committee::{Committee, CommitteeSelection};
use super::indices::Indices;
use super::shuffle::deterministic_shuffle;
use super::types::NodeIdentity;

/// A closed interval `[start, end]` of global sample indices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct BatchId {
    pub start: u64,
    pub end: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataSelectionError {
    /// The round's samples run past `u64::MAX`.
    Overflow,
    /// A client was drawn as tie-breaker or verifier, which is not implemented.
    UnsupportedCommittee(Committee),
    /// An index outside the selection's `total_nodes`.
    IndexOutOfRange,
    /// The retries break a precondition: more of them than trainers, more retried samples
    /// than the batch size, or one per trainer while fresh samples remain.
    InvalidRetries,
}

impl BatchId {
    /// Number of samples (u128: `[0, u64::MAX]` holds 2^64; 0 for a malformed `end < start`).
    pub fn size(&self) -> u128 {
        (u128::from(self.end) + 1).saturating_sub(u128::from(self.start))
    }
}

/// New samples of a round with `retries` (`batch_size` minus the retried samples), after
/// checking the preconditions (Python's `fresh_size`).
pub fn fresh_size(
    batch_size: u64,
    n_trainers: usize,
    retries: &[BatchId],
) -> Result<u64, DataSelectionError> {
    let k = retries.len();
    let retried: u128 = retries.iter().map(BatchId::size).sum();
    if k > n_trainers || retried > u128::from(batch_size) {
        return Err(DataSelectionError::InvalidRetries);
    }
    // retried <= batch_size, so this fits.
    let fresh = batch_size - retried as u64;
    if k > 0 && k == n_trainers && fresh > 0 {
        return Err(DataSelectionError::InvalidRetries);
    }
    Ok(fresh)
}

fn check_overflow(data_index: u64, fresh: u64) -> Result<(), DataSelectionError> {
    if fresh > 0 && data_index.checked_add(fresh - 1).is_none() {
        return Err(DataSelectionError::Overflow);
    }
    Ok(())
}

/// The fresh interval of slot `j` of `m` fresh slots sharing `fresh` samples from
/// `data_index` (sizes differ by at most one, larger first); `None` for an empty slot.
/// The caller has checked `check_overflow(data_index, fresh)`.
fn fresh_interval(data_index: u64, fresh: u64, m: u64, j: u64) -> Option<BatchId> {
    let (base, rem) = (fresh / m, fresh % m);
    let size = base + u64::from(j < rem);
    if size == 0 {
        return None;
    }
    // start + size - 1 <= data_index + fresh - 1, checked by the caller.
    let start = data_index + j * base + j.min(rem);
    Some(BatchId { start, end: start + (size - 1) })
}

/// One entry per shuffled trainer slot (sizes differ by at most one); `None` for empty slots.
fn intervals(
    data_index: u64,
    batch_size: u64,
    n_trainers: usize,
) -> Result<Vec<Option<BatchId>>, DataSelectionError> {
    check_overflow(data_index, batch_size)?;
    let m = n_trainers as u64;
    Ok((0..m).map(|j| fresh_interval(data_index, batch_size, m, j)).collect())
}

/// The round's intervals (retries and fresh ones) in ascending order of start, without saying
/// who trains them.
pub fn get_batch_ids_for_round(
    data_index: u64,
    batch_size: u64,
    n_trainers: usize,
    retries: &[BatchId],
) -> Result<Vec<BatchId>, DataSelectionError> {
    let fresh = fresh_size(batch_size, n_trainers, retries)?;
    let mut out = retries.to_vec();
    out.extend(intervals(data_index, fresh, n_trainers - retries.len())?.into_iter().flatten());
    // Unstable: equal intervals are indistinguishable, and std's stable sort keeps a 4 KB
    // scratch buffer on the stack, over SBF's frame limit.
    out.sort_unstable();
    Ok(out)
}

/// Trainer indices (into the round's client list) in slot order: the LCG Fisher–Yates shuffle
/// of `0..n_trainers` by the round seed (`n_trainers <= 65536`).
pub fn trainer_order(n_trainers: usize, random_seed: u64) -> Vec<u16> {
    let mut order: Vec<u16> = (0..n_trainers).map(|i| i as u16).collect();
    deterministic_shuffle(&mut order, random_seed);
    order
}

/// [`trainer_order`] without the heap, for the program (`n_trainers <= 256`, an epoch's
/// client list).
pub fn trainer_order_fixed(n_trainers: usize, random_seed: u64) -> Indices {
    let mut order = Indices::range(n_trainers);
    deterministic_shuffle(order.as_mut_slice(), random_seed);
    order
}

/// The interval of the trainer in shuffled position `slot` (`Ok(None)`: it has no samples).
pub fn interval_for_slot(
    slot: usize,
    n_trainers: usize,
    data_index: u64,
    batch_size: u64,
    retries: &[BatchId],
) -> Result<Option<BatchId>, DataSelectionError> {
    let fresh = fresh_size(batch_size, n_trainers, retries)?;
    if slot >= n_trainers {
        return Err(DataSelectionError::IndexOutOfRange);
    }
    let k = retries.len();
    if slot < k {
        return Ok(Some(retries[slot]));
    }
    check_overflow(data_index, fresh)?;
    Ok(fresh_interval(data_index, fresh, (n_trainers - k) as u64, (slot - k) as u64))
}

/// Map each of the round's intervals (ascending) to the trainer that must train it: trainers in
/// epoch order, Fisher–Yates shuffled by the round seed; the first `retries.len()` get the
/// retries whole, the others share the fresh samples in contiguous intervals.
pub fn assign_data_for_state(
    clients: &[NodeIdentity],
    selection: &CommitteeSelection,
    data_index: u64,
    batch_size: u64,
    random_seed: u64,
    retries: &[BatchId],
) -> Result<Vec<(BatchId, NodeIdentity)>, DataSelectionError> {
    let mut trainers = Vec::with_capacity(clients.len());
    for (index, client) in clients.iter().enumerate() {
        let proof =
            selection.get_committee(index as u64).ok_or(DataSelectionError::IndexOutOfRange)?;
        if proof.committee != Committee::Trainer {
            return Err(DataSelectionError::UnsupportedCommittee(proof.committee));
        }
        trainers.push(*client);
    }
    let fresh = fresh_size(batch_size, trainers.len(), retries)?;
    deterministic_shuffle(&mut trainers, random_seed);
    let k = retries.len();
    let slots =
        retries.iter().copied().map(Some).chain(intervals(data_index, fresh, trainers.len() - k)?);
    let mut out: Vec<(BatchId, NodeIdentity)> =
        slots.zip(trainers).filter_map(|(b, node)| Some((b?, node))).collect();
    // Intervals are disjoint, so the key is unique and an unstable sort (no 4 KB stack scratch,
    // unlike std's stable sort) gives the one order.
    out.sort_unstable_by_key(|(b, _)| *b);
    Ok(out)
}
