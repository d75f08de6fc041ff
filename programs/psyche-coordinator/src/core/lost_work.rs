//! No lost work (`client/psyche/coordinator/lost_work.py`, docs/protocol.md): intervals whose
//! results cannot reach consensus wait in `EpochState::lost` (FIFO, at most `MAX_LOST_BATCHES`;
//! one lost while it is full is dropped) and later training rounds re-assign them as
//! `Round::retries`.
//!
//! Only clients already known to be failing are examined (no scan of every client's bloom
//! entry, which would not fit a transaction's compute budget): a health check's ejected
//! clients, and the clients leaving at a witness timeout. A stored round's assignment is
//! recomputed once per call (`RoundSlots`: its client list rebuilt from `exited_clients`, the
//! trainer shuffle inverted) and then read per client in O(1), in fixed arrays (no heap).

use super::consensus;
use super::data_selection::{interval_for_slot, trainer_order_fixed, BatchId};
use super::indices::Indices;
use super::types::{BatchIdPod, Client, CoordinatorState, Round, MAX_ROUND_RETRIES};

/// Where each current epoch client sat in a stored training round, and that round's data.
pub struct RoundSlots {
    /// Slot of the client at each current `clients` index; `u16::MAX`: not in the round.
    slot_of: Indices,
    n_trainers: usize,
    data_index: u64,
    batch_size: u64,
    retries: [BatchId; MAX_ROUND_RETRIES],
    num_retries: usize,
}

impl RoundSlots {
    /// The interval of the current client `index` in this round (`None`: none, or the stored
    /// round breaks the assignment's preconditions).
    pub fn interval(&self, index: usize) -> Option<BatchId> {
        let slot = self.slot_of.get(index)?;
        if slot == u16::MAX {
            return None;
        }
        let retries = &self.retries[..self.num_retries];
        interval_for_slot(
            usize::from(slot),
            self.n_trainers,
            self.data_index,
            self.batch_size,
            retries,
        )
        .ok()
        .flatten()
    }
}

impl CoordinatorState {
    /// Whether `rnd` (a stored round of this epoch, step `start_step + height`) trained, i.e.
    /// did not start after `last_step` was set (the drain rounds are its last two steps).
    pub fn round_trained(&self, rnd: &Round) -> bool {
        let es = &self.epoch_state;
        let step = u64::from(es.start_step) + u64::from(rnd.height);
        !(es.last_step != 0 && step + 2 >= u64::from(es.last_step))
    }

    /// New samples of `rnd`: its batch size minus its retried samples, at least 0. The next
    /// round starts at `rnd.data_index` plus this.
    pub fn fresh_size(&self, rnd: &Round) -> u64 {
        let batch = u128::from(self.batch_size_for_round(rnd));
        // batch fits in u64, and so does anything below it.
        batch.saturating_sub(rnd.retried_samples()) as u64
    }

    /// The slots of the current clients in `rnd`; `None` if the round did not train.
    pub fn round_slots(&self, rnd: &Round) -> Option<RoundSlots> {
        if !self.round_trained(rnd) {
            return None;
        }
        let list = self.round_clients(rnd);
        let n_trainers = list.len();
        let mut slot_of = Indices::filled(self.epoch_state.clients().len(), u16::MAX);
        let order = trainer_order_fixed(n_trainers, rnd.random_seed);
        for (slot, &entry) in order.as_slice().iter().enumerate() {
            if let Some(cell) = list
                .current_index(usize::from(entry))
                .and_then(|i| slot_of.as_mut_slice().get_mut(i))
            {
                *cell = slot as u16;
            }
        }
        let stored = rnd.retries();
        let mut retries = [BatchId { start: 0, end: 0 }; MAX_ROUND_RETRIES];
        for (dst, src) in retries.iter_mut().zip(stored) {
            *dst = BatchId::from(*src);
        }
        Some(RoundSlots {
            slot_of,
            n_trainers,
            data_index: rnd.data_index,
            batch_size: self.batch_size_for_round(rnd),
            retries,
            num_retries: stored.len(),
        })
    }

    /// Pops the head of `lost` into the current round's retries while it has fewer than
    /// `min(MAX_ROUND_RETRIES, n − 1)` and their total stays within `batch_size` (a lone
    /// trainer takes none; one is always left for fresh samples).
    pub(crate) fn take_retries(&mut self, batch_size: u64) {
        let limit = MAX_ROUND_RETRIES.min(self.epoch_state.clients().len().saturating_sub(1));
        let lost = self.epoch_state.lost();
        let mut taken = [BatchIdPod { start: 0, end: 0 }; MAX_ROUND_RETRIES];
        let (mut k, mut total) = (0usize, 0u128);
        while k < limit && k < lost.len() {
            let size = BatchId::from(lost[k]).size();
            if total + size > u128::from(batch_size) {
                break;
            }
            total += size;
            taken[k] = lost[k];
            k += 1;
        }
        self.epoch_state.pop_lost(k);
        self.current_round_mut().set_retries(&taken[..k]);
    }

    /// At the witness timeout ending the current round `h`, before clients leave: every client
    /// that is not Healthy (in index order) queues its round-`h−1` interval unless round `h`'s
    /// witnesses attested it, then its round-`h` interval unconditionally.
    pub(crate) fn queue_leaving_work(&mut self) {
        if self.epoch_state.clients().iter().all(Client::is_healthy) {
            return;
        }
        let rnd = self.current_round();
        let current = self.round_slots(rnd);
        let previous = if rnd.height >= 1 {
            self.previous_round().and_then(|prev| self.round_slots(prev))
        } else {
            None
        };
        for i in 0..self.epoch_state.clients().len() {
            let client = self.epoch_state.clients()[i];
            if client.is_healthy() {
                continue;
            }
            if let Some(batch) = previous.as_ref().and_then(|p| p.interval(i)) {
                let witnesses = self.current_round().witnesses();
                if !consensus::trainer_healthy(&client.id, witnesses, &self.config) {
                    self.epoch_state.push_lost(batch);
                }
            }
            if let Some(batch) = current.as_ref().and_then(|c| c.interval(i)) {
                self.epoch_state.push_lost(batch);
            }
        }
    }
}
