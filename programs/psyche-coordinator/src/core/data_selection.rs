//! Which samples each trainer trains in a round (`client/psyche/protocol/data_selection.py`,
//! SPEC §3.3). Clients and data servers use this; the program does not, but it ships here so the
//! Rust side can replay the shared vectors and so off-chain Rust tools agree with Python.

use super::committee::{Committee, CommitteeSelection};
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
}

/// One entry per shuffled trainer slot (sizes differ by at most one); `None` for empty slots.
fn intervals(
    data_index: u64,
    batch_size: u64,
    n_trainers: usize,
) -> Result<Vec<Option<BatchId>>, DataSelectionError> {
    if batch_size > 0 && data_index.checked_add(batch_size - 1).is_none() {
        return Err(DataSelectionError::Overflow);
    }
    if n_trainers == 0 {
        return Ok(Vec::new());
    }
    let n = n_trainers as u64;
    let (base, rem) = (batch_size / n, batch_size % n);
    let mut start = data_index;
    let mut out = Vec::with_capacity(n_trainers);
    for i in 0..n {
        let size = base + u64::from(i < rem);
        if size == 0 {
            out.push(None);
            continue;
        }
        // Bounded by data_index + batch_size - 1, checked above.
        out.push(Some(BatchId { start, end: start + (size - 1) }));
        start = start.saturating_add(size);
    }
    Ok(out)
}

/// The round's intervals in ascending order, without saying who trains them.
pub fn get_batch_ids_for_round(
    data_index: u64,
    batch_size: u64,
    n_trainers: usize,
) -> Result<Vec<BatchId>, DataSelectionError> {
    Ok(intervals(data_index, batch_size, n_trainers)?.into_iter().flatten().collect())
}

/// Map each of the round's intervals (ascending) to the trainer that must train it: trainers in
/// epoch order, Fisher–Yates shuffled by the round seed, cut into contiguous intervals.
pub fn assign_data_for_state(
    clients: &[NodeIdentity],
    selection: &CommitteeSelection,
    data_index: u64,
    batch_size: u64,
    random_seed: u64,
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
    deterministic_shuffle(&mut trainers, random_seed);
    let slots = intervals(data_index, batch_size, trainers.len())?;
    Ok(slots.into_iter().zip(trainers).filter_map(|(b, node)| Some((b?, node))).collect())
}
