//! The coordinator state machine: initialization, internal transitions and `tick`
//! (`client/psyche/coordinator/coordinator.py`; docs/protocol.md, "Tick rules", with our
//! deviations: drain rounds also at `total_steps` and on a pending pause, Warmup witness index
//! remapping, no lost work).
//! Read-only helpers are in `queries.rs`, message handlers in `handlers.rs`, the lost-work
//! queue in `lost_work.rs`.
//!
//! Python's integers are unbounded; here the few counters that could in principle pass their
//! width (step, height, epoch, data index) saturate instead of wrapping or panicking. Python
//! would write a value its own state decoder rejects, so no shared state reaches that point.

use super::config::CoordinatorConfig;
use super::error::{CoordinatorError, TickResult};
use super::indices::Indices;
use super::model::Checkpoint;
use super::types::{
    Client, ClientState, CoordinatorState, EpochState, FixedString32, NodeIdentity, RunState,
    MAX_CLIENTS, MAX_EXITED_CLIENTS, NUM_STORED_ROUNDS,
};

impl CoordinatorState {
    /// Puts a freshly allocated (or reused) state into Python's `Coordinator(run_id, …)`
    /// defaults: everything zero except `progress.step = 1` and `first_round = true`; the run is
    /// Uninitialized until the owner sets a config and a model.
    pub fn initialize(&mut self, run_id: FixedString32) {
        bytemuck::bytes_of_mut(self).fill(0);
        self.run_id = run_id;
        self.progress.step = 1;
        self.epoch_state.first_round = 1;
    }

    // --- internal transitions --------------------------------------------------------------------

    pub(crate) fn change_state(&mut self, now: u64, state: RunState) {
        debug_assert_ne!(self.run_state, state as u8, "change_state to the same state");
        self.run_state = state as u8;
        self.run_state_start_unix_timestamp = now;
    }

    /// Moves every non-Healthy client to `exited_clients` (recording `height` and its index),
    /// keeping the others in order. In Warmup the current round's witnesses name client indices,
    /// so they are remapped to follow their clients (and dropped with them).
    pub(crate) fn move_clients_to_exited(&mut self, height: u32) {
        let n = self.epoch_state.clients().len();
        if self.epoch_state.clients().iter().all(Client::is_healthy) {
            return;
        }
        if self.state() == RunState::Warmup {
            let head = self.epoch_state.head();
            let es = &mut self.epoch_state;
            let rnd = &mut es.rounds[head];
            let mut kept = 0usize;
            for i in 0..rnd.witnesses().len() {
                let index = rnd.witnesses[i].proof.index;
                let Some(idx) = usize::try_from(index).ok().filter(|&x| x < n) else { continue };
                if !es.clients[idx].is_healthy() {
                    continue;
                }
                let new = es.clients[..idx].iter().filter(|c| c.is_healthy()).count() as u64;
                rnd.witnesses[kept] = rnd.witnesses[i];
                rnd.witnesses[kept].proof.position = new;
                rnd.witnesses[kept].proof.index = new;
                kept += 1;
            }
            rnd.truncate_witnesses(kept);
        }
        let es = &mut self.epoch_state;
        let mut kept = 0usize;
        for i in 0..n {
            let mut c = es.clients[i];
            if c.is_healthy() {
                es.clients[kept] = c;
                kept += 1;
                continue;
            }
            c.exited_height = height;
            c.exited_index = i as u16;
            let e = es.num_exited_clients as usize;
            // clients + exited never exceed the epoch's initial <= 256 clients, so this holds
            // for every reachable state; a corrupted one loses the record instead of panicking.
            if e < MAX_EXITED_CLIENTS {
                es.exited_clients[e] = c;
                es.num_exited_clients += 1;
            }
        }
        bytemuck::cast_slice_mut::<Client, u8>(&mut es.clients[kept..n]).fill(0);
        es.num_clients = kept as u32;
    }

    pub(crate) fn withdraw_all(&mut self) {
        for c in self.epoch_state.clients_mut() {
            if c.is_healthy() {
                c.state = ClientState::Withdrawn as u8;
            }
        }
    }

    pub(crate) fn start_waiting_for_members(&mut self, now: u64) {
        if self.progress.step < self.config.total_steps {
            self.change_state(now, RunState::WaitingForMembers);
        } else {
            self.change_state(now, RunState::Finished);
        }
    }

    pub(crate) fn start_round_train(&mut self, now: u64, seed: u64) {
        let (height, data_index) = if self.epoch_state.first_round != 0 {
            self.epoch_state.rounds_head = 0;
            (0, self.progress.epoch_start_data_index)
        } else {
            let prev = self.current_round();
            let next = prev.data_index.saturating_add(self.fresh_size(prev));
            let height = prev.height.saturating_add(1);
            self.epoch_state.rounds_head =
                ((self.epoch_state.head() + 1) % NUM_STORED_ROUNDS) as u32;
            (height, next)
        };
        let clients_len = self.epoch_state.clients().len() as u16;
        let rnd = self.current_round_mut();
        rnd.height = height;
        rnd.data_index = data_index;
        rnd.clients_len = clients_len;
        rnd.tie_breaker_tasks = 0;
        rnd.random_seed = seed;
        rnd.clear_witnesses();
        rnd.set_retries(&[]);
        if !self.last_step_set() {
            let batch_size = self.batch_size_for_round(self.current_round());
            self.take_retries(batch_size);
        }
        self.change_state(now, RunState::RoundTrain);
    }

    pub(crate) fn start_cooldown(&mut self, now: u64) {
        self.current_round_mut().clear_witnesses();
        self.change_state(now, RunState::Cooldown);
    }

    pub(crate) fn end_cooldown(&mut self, now: u64) -> TickResult {
        let rnd = self.current_round();
        let height = rnd.height;
        let next_epoch_start = rnd.data_index.saturating_add(self.fresh_size(rnd));
        self.progress.epoch_start_data_index = next_epoch_start;
        self.progress.epoch = self.progress.epoch.saturating_add(1);
        self.move_clients_to_exited(height);
        self.replace_checkpoint(Checkpoint::to_p2p);
        if self.pending_pause() {
            self.withdraw_all();
            self.change_state(now, RunState::Paused);
            self.pending_pause = 0;
            self.epoch_state.cold_start_epoch = 1;
        } else {
            self.start_waiting_for_members(now);
            self.epoch_state.cold_start_epoch = 0;
        }
        TickResult::EpochEnd(true)
    }

    /// Rewrites the stored checkpoint with `f(current)` when it returns one. Tag changes keep
    /// the encoding's size, so the store cannot fail; without a valid model nothing changes.
    pub(crate) fn replace_checkpoint(&mut self, f: impl FnOnce(&Checkpoint) -> Option<Checkpoint>) {
        let Some(mut model) = self.model.load() else { return };
        let Some(new) = f(&model.llm().checkpoint) else { return };
        model.llm_mut().checkpoint = new;
        self.model.store(&model);
    }

    // --- tick (docs/protocol.md, "Tick rules") ---------------------------------------------------

    pub fn tick(
        &mut self,
        pending: Option<&[NodeIdentity]>,
        now: u64,
        seed: u64,
    ) -> Result<TickResult, CoordinatorError> {
        self.tick_pending(pending.map(|p| p.iter().copied()), false, now, seed)
    }

    /// [`Self::tick`] reading the pending list (in join order) from an iterator of *distinct*
    /// identities, so that a caller that keeps it inside other storage (the program's
    /// registration list, one entry per wallet) makes no copy and skips the duplicate checks:
    /// on SBF a copy of 256 identities would not fit the 32 KB bump heap, and the pairwise
    /// duplicate checks of 256 pending clients would not fit a transaction's compute budget.
    pub fn tick_with<P>(
        &mut self,
        pending: Option<P>,
        now: u64,
        seed: u64,
    ) -> Result<TickResult, CoordinatorError>
    where
        P: Iterator<Item = NodeIdentity> + Clone,
    {
        self.tick_pending(pending, true, now, seed)
    }

    fn tick_pending<P>(
        &mut self,
        pending: Option<P>,
        distinct: bool,
        now: u64,
        seed: u64,
    ) -> Result<TickResult, CoordinatorError>
    where
        P: Iterator<Item = NodeIdentity> + Clone,
    {
        match self.state() {
            s if s.halted() => Err(CoordinatorError::Halted),
            RunState::WaitingForMembers => {
                Ok(self.tick_waiting_for_members(pending, distinct, now))
            }
            RunState::Warmup => Ok(self.tick_warmup(now, seed)),
            RunState::RoundTrain => {
                if self.check_timeout(now, self.config.max_round_train_time) {
                    self.change_state(now, RunState::RoundWitness);
                }
                Ok(TickResult::Ticked)
            }
            RunState::RoundWitness => Ok(self.tick_round_witness(now, seed)),
            _ => Ok(self.tick_cooldown(now)),
        }
    }

    fn tick_waiting_for_members<P>(
        &mut self,
        pending: Option<P>,
        distinct: bool,
        now: u64,
    ) -> TickResult
    where
        P: Iterator<Item = NodeIdentity> + Clone,
    {
        let Some(pending) = pending else { return TickResult::Ticked };
        let need = usize::from(self.config.init_min_clients);
        let have = if distinct {
            pending.clone().take(need).count()
        } else {
            count_distinct(pending.clone(), need)
        };
        if !self.check_timeout(now, u64::from(self.config.waiting_for_members_extra_time))
            || have < need
        {
            return TickResult::Ticked;
        }
        let height = self.current_round().height;
        self.move_clients_to_exited(height);
        if !any_listed(self.epoch_state.clients(), pending.clone()) {
            self.replace_checkpoint(Checkpoint::to_central_store);
        }
        let cold = self.epoch_state.cold_start_epoch;
        let es = &mut self.epoch_state;
        // A new epoch: everything but the lost-work queue (the last fields) starts at zero.
        bytemuck::bytes_of_mut(es)[..core::mem::offset_of!(EpochState, num_lost)].fill(0);
        es.first_round = 1;
        es.start_step = self.progress.step;
        es.start_timestamp = now;
        es.cold_start_epoch = cold;
        let mut n = 0usize;
        for p in pending {
            if n == MAX_CLIENTS {
                break;
            }
            if !distinct && es.clients[..n].iter().any(|c| c.id == p) {
                continue;
            }
            es.clients[n] = Client::new(p);
            n += 1;
        }
        es.num_clients = n as u32;
        self.change_state(now, RunState::Warmup);
        TickResult::Ticked
    }

    fn tick_warmup(&mut self, now: u64, seed: u64) -> TickResult {
        if self.check_timeout(now, self.config.warmup_time) {
            self.start_round_train(now, seed);
        } else {
            self.move_clients_to_exited(0);
        }
        if self.epoch_state.clients().len() < usize::from(self.config.min_clients) {
            self.start_waiting_for_members(now);
            return TickResult::EpochEnd(false);
        }
        TickResult::Ticked
    }

    fn tick_round_witness(&mut self, now: u64, seed: u64) -> TickResult {
        if !self.check_timeout(now, self.config.round_witness_time) {
            return TickResult::Ticked;
        }
        self.epoch_state.first_round = 0;
        self.progress.step = self.progress.step.saturating_add(1);
        let rnd = self.current_round();
        let (height, n_w) = (rnd.height, rnd.witnesses().len());
        self.act_on_verdicts();
        self.queue_leaving_work();
        self.move_clients_to_exited(height);
        if n_w == 0 {
            // Without witnesses nobody can tell which clients are alive.
            self.withdraw_all();
            self.start_cooldown(now);
            return TickResult::Ticked;
        }
        let step = self.progress.step;
        let wind_down = self.check_epoch_timeout(now)
            || step >= self.config.total_steps
            || self.pending_pause();
        if wind_down && !self.last_step_set() {
            self.epoch_state.last_step = step.saturating_add(2);
        }
        if self.last_step_set() && step >= self.epoch_state.last_step {
            self.start_cooldown(now);
            return TickResult::Ticked;
        }
        if self.epoch_state.clients().len() < usize::from(self.config.min_clients)
            || n_w < self.config.quorum(n_w)
        {
            self.start_cooldown(now);
            return TickResult::Ticked;
        }
        self.start_round_train(now, seed);
        TickResult::Ticked
    }

    fn tick_cooldown(&mut self, now: u64) -> TickResult {
        if !self.check_timeout(now, self.config.cooldown_time) {
            return TickResult::Ticked;
        }
        self.end_cooldown(now)
    }

    pub fn config(&self) -> &CoordinatorConfig {
        &self.config
    }
}

/// Distinct identities (by signer) in `items`, counting no further than `limit`.
/// Whether any of `items` is among `clients`: the clients sorted by a word of their key (in a
/// fixed array), then one binary search per item, so 256 × 256 stays a few thousand compares.
fn any_listed<P>(clients: &[Client], mut items: P) -> bool
where
    P: Iterator<Item = NodeIdentity>,
{
    let mut order = Indices::range(clients.len());
    order.as_mut_slice().sort_unstable_by_key(|&i| clients[usize::from(i)].id.key_word());
    let sorted = order.as_slice();
    items.any(|p| {
        let k = p.key_word();
        let first = sorted.partition_point(|&i| clients[usize::from(i)].id.key_word() < k);
        sorted[first..]
            .iter()
            .map(|&i| &clients[usize::from(i)].id)
            .take_while(|c| c.key_word() == k)
            .any(|c| *c == p)
    })
}

fn count_distinct<P>(items: P, limit: usize) -> usize
where
    P: Iterator<Item = NodeIdentity> + Clone,
{
    let mut count = 0;
    for (i, p) in items.clone().enumerate() {
        if count >= limit {
            break;
        }
        if !items.clone().take(i).any(|q| q == p) {
            count += 1;
        }
    }
    count
}
