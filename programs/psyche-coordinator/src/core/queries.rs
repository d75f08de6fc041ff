//! Read-only views of the coordinator state (`client/psyche/coordinator/coordinator.py`'s
//! helpers; docs/protocol.md, "Timers and round helpers"): timers, rounds, membership, committee
//! selection, the exactly rebuilt previous-round client list and the checkpointer election.

use super::committee::CommitteeSelection;
use super::consensus;
use super::error::CoordinatorError;
use super::hash::{sha256, sha256v};
use super::indices::Indices;
use super::model::Model;
use super::shuffle::compute_shuffled_index;
use super::types::{
    CoordinatorState, NodeIdentity, Round, RunState, MAX_CLIENTS, NUM_STORED_ROUNDS,
};

pub const CHECKPOINTER_SALT: &[u8] = b"checkpointer";

/// A stored round's client list, rebuilt exactly (see `round_clients`). Entries are references
/// (`< 256`: `clients[i]`, else `exited_clients[i - 256]`) held in a fixed array: no heap, and
/// 512 bytes instead of 32 KB of identities.
pub struct RoundClients<'a> {
    state: &'a CoordinatorState,
    refs: Indices,
}

/// The previous round's list (`previous_round_clients`).
pub type PrevClients<'a> = RoundClients<'a>;

impl RoundClients<'_> {
    /// The index in the current `clients` of entry `i`, if that client is still listed.
    pub fn current_index(&self, i: usize) -> Option<usize> {
        let r = usize::from(self.refs.get(i)?);
        (r < MAX_CLIENTS).then_some(r)
    }

    pub fn len(&self) -> usize {
        self.refs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.refs.is_empty()
    }

    pub fn get(&self, i: usize) -> Option<&NodeIdentity> {
        let r = usize::from(self.refs.get(i)?);
        let es = &self.state.epoch_state;
        if r < MAX_CLIENTS {
            es.clients().get(r).map(|c| &c.id)
        } else {
            es.exited_clients().get(r - MAX_CLIENTS).map(|c| &c.id)
        }
    }
}

impl CoordinatorState {
    // --- accessors (docs/protocol.md, "Timers and round helpers") --------------------------------

    /// The run phase; an unknown tag (a corrupted account) reads as `Uninitialized`, i.e. halted.
    pub fn state(&self) -> RunState {
        RunState::from_u8(self.run_state).unwrap_or(RunState::Uninitialized)
    }

    pub fn pending_pause(&self) -> bool {
        self.pending_pause != 0
    }

    pub fn model(&self) -> Option<Model> {
        self.model.load()
    }

    pub fn check_timeout(&self, now: u64, duration: u64) -> bool {
        let start = self.run_state_start_unix_timestamp;
        now != start && u128::from(now) >= u128::from(start) + u128::from(duration)
    }

    pub fn check_epoch_timeout(&self, now: u64) -> bool {
        let start = self.epoch_state.start_timestamp;
        now != start && u128::from(now) >= u128::from(start) + u128::from(self.config.epoch_time)
    }

    pub fn current_round(&self) -> &Round {
        &self.epoch_state.rounds[self.epoch_state.head()]
    }

    pub fn current_round_mut(&mut self) -> &mut Round {
        let head = self.epoch_state.head();
        &mut self.epoch_state.rounds[head]
    }

    pub fn previous_round(&self) -> Option<&Round> {
        let head = self.epoch_state.head();
        if head == 0 && self.current_round().height == 0 {
            return None;
        }
        Some(&self.epoch_state.rounds[(head + NUM_STORED_ROUNDS - 1) % NUM_STORED_ROUNDS])
    }

    pub fn previous_previous_round(&self) -> Option<&Round> {
        let head = self.epoch_state.head();
        if head == 0 && self.current_round().height <= 1 {
            return None;
        }
        Some(&self.epoch_state.rounds[(head + NUM_STORED_ROUNDS - 2) % NUM_STORED_ROUNDS])
    }

    pub fn batch_size_for_round(&self, rnd: &Round) -> u64 {
        let tokens = u128::from(rnd.data_index) * u128::from(self.model.max_seq_len());
        self.config.get_batch_size(tokens)
    }

    pub fn total_tokens_processed(&self) -> u128 {
        let samples = if self.state().active() {
            self.current_round().data_index
        } else {
            self.progress.epoch_start_data_index
        };
        u128::from(samples) * u128::from(self.model.max_seq_len())
    }

    pub fn last_step_set(&self) -> bool {
        self.epoch_state.last_step != 0
    }

    pub fn is_healthy_member(&self, index: u64, who: &NodeIdentity) -> bool {
        let clients = self.epoch_state.clients();
        usize::try_from(index)
            .ok()
            .and_then(|i| clients.get(i))
            .is_some_and(|c| c.id == *who && c.is_healthy())
    }

    pub fn index_of(&self, who: &NodeIdentity) -> Option<usize> {
        self.epoch_state.clients().iter().position(|c| c.id == *who)
    }

    pub fn witness_count(&self) -> usize {
        self.config.witness_count(self.epoch_state.clients().len())
    }

    pub fn committee_selection(&self, rnd: &Round) -> Result<CommitteeSelection, CoordinatorError> {
        CommitteeSelection::new(
            u64::from(rnd.tie_breaker_tasks),
            u64::from(self.config.witness_nodes),
            // `verification_percent` samples results to verify (`core::verification`); every
            // client still trains, so the committee has no Verifier share (as in Python).
            0,
            u64::from(rnd.clients_len),
            rnd.random_seed,
        )
        .map_err(|_| CoordinatorError::InvalidCommitteeSelection)
    }

    pub fn trainer_healthy(&self, who: &NodeIdentity) -> bool {
        self.previous_round()
            .is_some_and(|prev| consensus::trainer_healthy(who, prev.witnesses(), &self.config))
    }

    /// A quorum of the previous round's witnesses agree `who` delivered nothing.
    pub fn trainer_ejectable(&self, who: &NodeIdentity) -> bool {
        self.previous_round()
            .is_some_and(|prev| consensus::trainer_ejectable(who, prev.witnesses(), &self.config))
    }

    /// The epoch client list as it was during the previous round, rebuilt exactly.
    pub fn previous_round_clients(&self) -> PrevClients<'_> {
        match self.previous_round() {
            Some(prev) => self.round_clients(prev),
            None => {
                let n = self.epoch_state.clients().len();
                RoundClients { state: self, refs: Indices::range(n) }
            }
        }
    }

    /// The epoch client list as it was during `rnd` (a stored round of this epoch).
    ///
    /// Clients only ever leave during an epoch, so the `k = rnd.clients_len - len(clients)`
    /// newest entries of `exited_clients` are exactly those removed since `rnd` started. Their
    /// removals are undone newest boundary first; within one boundary, in ascending
    /// `exited_index` (each index is relative to the list before that removal).
    pub fn round_clients(&self, rnd: &Round) -> RoundClients<'_> {
        let es = &self.epoch_state;
        let n = es.clients().len();
        let mut refs = Indices::range(n);
        let exited = es.exited_clients();
        let missing = i64::from(rnd.clients_len) - n as i64;
        let k = missing.min(exited.len() as i64);
        if k <= 0 {
            refs.truncate(usize::from(rnd.clients_len));
            return RoundClients { state: self, refs };
        }
        let first = exited.len() - k as usize;
        // Positions in `exited_clients` (< MAX_EXITED_CLIENTS = 256), offset by `first`.
        let mut order = Indices::range(k as usize);
        // Python's stable sorted(): newest boundary first, then by exited_index, ties in list
        // order. The position `j` as last key gives that order with an unstable sort, whose
        // in-place algorithm fits SBF's 4 KB stack frame (std's stable sort keeps a 4 KB scratch
        // buffer on the stack).
        order.as_mut_slice().sort_unstable_by_key(|&o| {
            let j = first + usize::from(o);
            (core::cmp::Reverse(exited[j].exited_height), exited[j].exited_index, j)
        });
        for &o in order.as_slice() {
            let j = first + usize::from(o);
            // A round's list never exceeds MAX_CLIENTS, so the insert cannot overflow.
            refs.insert(usize::from(exited[j].exited_index), (MAX_CLIENTS + j) as u16);
        }
        RoundClients { state: self, refs }
    }

    fn checkpointer_seed(&self) -> [u8; 32] {
        let seed32 = sha256(&self.current_round().random_seed.to_le_bytes());
        sha256v(&[&seed32, CHECKPOINTER_SALT])
    }

    /// Whether client `index` is one of this Cooldown's `max(1, n/3)` elected checkpointers
    /// (swap-or-not of the current round's seed salted `checkpointer`): one shuffle, not `n`.
    pub fn is_checkpointer(&self, index: u64) -> bool {
        let n = self.epoch_state.clients().len() as u64;
        let want = (n / 3).max(1);
        compute_shuffled_index(index, n, &self.checkpointer_seed()).is_some_and(|p| p < want)
    }

    /// All elected checkpointers, ascending (Python's `checkpointer_indices`).
    pub fn checkpointer_indices(&self) -> Vec<u64> {
        let n = self.epoch_state.clients().len() as u64;
        let want = (n / 3).max(1);
        let seed = self.checkpointer_seed();
        (0..n).filter(|&i| compute_shuffled_index(i, n, &seed).is_some_and(|p| p < want)).collect()
    }
}
