//! Message handlers (`client/psyche/coordinator/coordinator.py`; docs/protocol.md,
//! "Message handlers", with our deviations: validated warmup witnesses, elected-witness-only
//! `witness`, checkpointer election with the first accepted checkpoint ending Cooldown, `Ejected`
//! health checks judged against the exactly rebuilt previous-round client list, ejected clients'
//! work queued as lost).
//!
//! Each handler runs every check before its first write, in Python's order, so an `Err` leaves
//! the state exactly as it was.

use super::committee::{Committee, HealthCheck};
use super::error::{CoordinatorError, TickResult};
use super::model::Checkpoint;
use super::types::{ClientState, CoordinatorState, NodeIdentity, RunState, Witness, MAX_WITNESSES};

type E = CoordinatorError;

impl CoordinatorState {
    fn check_not_halted(&self) -> Result<(), CoordinatorError> {
        if self.state().halted() {
            return Err(E::Halted);
        }
        Ok(())
    }

    fn check_duplicate(&self, who: &NodeIdentity) -> Result<(), CoordinatorError> {
        let clients = self.epoch_state.clients();
        let witnesses = self.current_round().witnesses();
        for w in witnesses {
            let sent_by_who = usize::try_from(w.proof.index)
                .ok()
                .and_then(|i| clients.get(i))
                .is_some_and(|c| c.id == *who);
            if sent_by_who {
                return Err(E::DuplicateWitness);
            }
        }
        if witnesses.len() >= MAX_WITNESSES {
            return Err(E::WitnessesFull);
        }
        Ok(())
    }

    /// A client has loaded the model; enough of these start training before `warmup_time`.
    pub fn warmup_witness(
        &mut self,
        from: &NodeIdentity,
        witness: &Witness,
        now: u64,
        seed: u64,
    ) -> Result<(), CoordinatorError> {
        self.check_not_halted()?;
        match self.state() {
            RunState::RoundTrain => return Ok(()),
            RunState::Warmup => {}
            _ => return Err(E::InvalidRunState),
        }
        if !self.is_healthy_member(witness.proof.index, from) {
            return Err(E::InvalidWitness);
        }
        self.check_duplicate(from)?;
        self.current_round_mut().push_witness(witness);
        if self.current_round().witnesses().len() >= self.witness_count() {
            self.start_round_train(now, seed);
        }
        Ok(())
    }

    /// An elected witness attests what it received; a full set ends RoundTrain early.
    pub fn witness(
        &mut self,
        from: &NodeIdentity,
        witness: &Witness,
        now: u64,
    ) -> Result<(), CoordinatorError> {
        self.check_not_halted()?;
        let state = self.state();
        if !matches!(state, RunState::RoundTrain | RunState::RoundWitness) {
            return Err(E::InvalidRunState);
        }
        let proof = &witness.proof;
        let sel = self.committee_selection(self.current_round())?;
        let elected = proof.witness != 0;
        if !(self.is_healthy_member(proof.index, from)
            && sel.verify_witness(
                proof.position,
                proof.index,
                elected,
                from,
                self.epoch_state.clients(),
            )
            && elected)
        {
            return Err(E::InvalidWitness);
        }
        self.check_verdict(from, witness)?;
        self.check_duplicate(from)?;
        self.current_round_mut().push_witness(witness);
        if self.current_round().witnesses().len() >= self.witness_count()
            && state == RunState::RoundTrain
        {
            self.change_state(now, RunState::RoundWitness);
        }
        Ok(())
    }

    /// Ejects clients that a quorum of the previous round's witnesses agree delivered nothing;
    /// returns how many. Each ejected client's interval of the round the check is about is
    /// queued as lost work.
    pub fn health_check(
        &mut self,
        from: &NodeIdentity,
        checks: &[HealthCheck],
    ) -> Result<u32, CoordinatorError> {
        self.check_not_halted()?;
        if !self.state().active() {
            return Err(E::NoActiveRound);
        }
        if self.current_round().height < 2 {
            return Err(E::InvalidHealthCheck);
        }
        if self.index_of(from).is_none() || checks.is_empty() {
            return Err(E::InvalidHealthCheck);
        }
        // Height >= 2 guarantees a previous round.
        let prev = self.previous_round().ok_or(E::InvalidHealthCheck)?;
        let sel = self.committee_selection(prev)?;
        let prev_clients_len = u64::from(prev.clients_len);
        let prev_clients = self.previous_round_clients();
        for check in checks {
            let proof = &check.proof;
            let expect =
                if proof.index < prev_clients_len { sel.get_committee(proof.index) } else { None };
            let listed = usize::try_from(proof.index)
                .ok()
                .and_then(|i| prev_clients.get(i))
                .is_some_and(|id| *id == check.id);
            if expect.is_none_or(|e| e != *proof) || !listed {
                return Err(E::InvalidCommitteeProof);
            }
            if proof.committee != Committee::Trainer {
                return Err(E::InvalidCommitteeProof);
            }
            // Never the reporter itself, and only on a view a quorum of witnesses agree on:
            // a single forged or incomplete witness must not be able to eject anyone.
            if check.id == *from || !self.trainer_ejectable(&check.id) {
                return Err(E::InvalidHealthCheck);
            }
        }
        // The round the check is about: an ejected client's interval there is lost work.
        let checked = self.previous_previous_round().and_then(|r| self.round_slots(r));
        let mut dropped = 0u32;
        for check in checks {
            if let Some(i) = self.index_of(&check.id) {
                let client = &mut self.epoch_state.clients_mut()[i];
                if client.is_healthy() {
                    client.state = ClientState::Ejected as u8;
                    dropped += 1;
                    if let Some(batch) = checked.as_ref().and_then(|s| s.interval(i)) {
                        self.epoch_state.push_lost(batch);
                    }
                }
            }
        }
        Ok(dropped)
    }

    /// An elected checkpointer stored the model; the first accepted one ends Cooldown.
    pub fn checkpoint(
        &mut self,
        from: &NodeIdentity,
        index: u64,
        checkpoint: &Checkpoint,
        now: u64,
    ) -> Result<TickResult, CoordinatorError> {
        self.check_not_halted()?;
        if self.state() != RunState::Cooldown {
            return Err(E::InvalidRunState);
        }
        if !self.is_healthy_member(index, from) {
            return Err(E::InvalidCommitteeProof);
        }
        if !self.is_checkpointer(index) {
            return Err(E::InvalidCheckpoint);
        }
        // Python's decoder bounds these strings; here the bound is checked like the rest.
        checkpoint.check_bounds().map_err(|_| E::InvalidCheckpoint)?;
        let mut model = self.model.load().ok_or(E::InvalidCheckpoint)?;
        let new = Checkpoint::transition(&model.llm().checkpoint, checkpoint)
            .ok_or(E::InvalidCheckpoint)?;
        model.llm_mut().checkpoint = new;
        if !self.model.store(&model) {
            return Err(E::InvalidCheckpoint);
        }
        Ok(self.end_cooldown(now))
    }

    /// Marks the Healthy client at `index` Withdrawn (no run-state check, as in Python).
    pub fn withdraw(&mut self, index: u64) -> Result<(), CoordinatorError> {
        let client = usize::try_from(index)
            .ok()
            .and_then(|i| self.epoch_state.clients_mut().get_mut(i))
            .filter(|c| c.is_healthy())
            .ok_or(E::InvalidWithdraw)?;
        client.state = ClientState::Withdrawn as u8;
        Ok(())
    }

    /// In an active phase only flags the pause (it happens at the end of the wind-down and
    /// Cooldown); in WaitingForMembers or Warmup it withdraws everyone and pauses now.
    pub fn pause(&mut self, now: u64) -> Result<(), CoordinatorError> {
        self.check_not_halted()?;
        if self.state().active() {
            self.pending_pause = 1;
            return Ok(());
        }
        self.withdraw_all();
        self.change_state(now, RunState::Paused);
        self.epoch_state.cold_start_epoch = 1;
        Ok(())
    }

    /// Leaves Paused (or Uninitialized, resetting the step to 1) for WaitingForMembers, or
    /// Finished when the step budget is spent.
    pub fn resume(&mut self, now: u64) -> Result<(), CoordinatorError> {
        match self.state() {
            RunState::Uninitialized => {
                self.progress.step = 1;
                self.epoch_state.clear_lost();
            }
            RunState::Paused => {}
            _ => return Err(E::CannotResume),
        }
        self.start_waiting_for_members(now);
        Ok(())
    }
}
