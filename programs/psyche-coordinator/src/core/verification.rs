//! Result verification (`client/psyche/coordinator/verification.py`; docs/protocol.md, "Threat
//! model and result verification"): which results a round samples, who may carry a verdict and
//! what a quorum of verdicts decides — the pure rules on plain values, replayed from
//! `tests/vectors/verification/rules/rules.json` — and the state machine's use of them: a
//! witness's `verdict` is checked when it arrives (`check_verdict`) and acted on at the
//! RoundWitness end (`act_on_verdicts`), replayed from `tests/vectors/verification/verify_*.json`.

use super::error::CoordinatorError;
use super::hash::{sha256, sha256v};
use super::shuffle::{compute_shuffled_index, compute_unshuffled_index, SwapOrNot};
use super::types::{ClientState, CoordinatorState, NodeIdentity, Round, Witness};

pub const VERIFY_SALT: &[u8] = b"verify";
/// At most this many results are sampled per round: a verdict is two u16 bitmasks.
pub const MAX_SAMPLED_RESULTS: u64 = 16;
/// The elected witnesses at positions below this verify; a majority of them decides.
pub const VERIFIERS_PER_ROUND: u64 = 3;

/// How many of a round's `n_trainers` results are sampled: ⌈n·vp/100⌉, at most 16.
pub fn sampled_count(n_trainers: u64, verification_percent: u8) -> u64 {
    if n_trainers == 0 || verification_percent == 0 {
        return 0;
    }
    let want = (n_trainers * u64::from(verification_percent)).div_ceil(100);
    want.min(MAX_SAMPLED_RESULTS)
}

/// The seed of the sampling, from the seed of the round after the judged one.
pub fn verify_seed(next_round_seed: u64) -> [u8; 32] {
    sha256v(&[&sha256(&next_round_seed.to_le_bytes()), VERIFY_SALT])
}

/// The index (in the judged round's client list) that slot `slot` samples; `None` for a slot
/// beyond the sampled count. One swap-or-not shuffle per slot, so an instruction pays only for
/// the slots it looks at.
pub fn sampled_trainer(
    slot: u64,
    n_trainers: u64,
    next_round_seed: u64,
    verification_percent: u8,
) -> Option<u64> {
    if slot >= sampled_count(n_trainers, verification_percent) {
        return None;
    }
    compute_shuffled_index(slot, n_trainers, &verify_seed(next_round_seed))
}

/// Verifiers of a round with `witness_count` elected witnesses.
pub fn verifier_count(witness_count: u64) -> u64 {
    witness_count.min(VERIFIERS_PER_ROUND)
}

/// A majority of the verifiers: 1 of 1, 2 of 2, 2 of 3.
pub fn verdict_quorum(n_verifiers: u64) -> u64 {
    n_verifiers / 2 + 1
}

/// Why a witness may not carry a verdict (the Python's messages, as a code).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerdictError {
    NotVerifier,
    MismatchWithoutChecked,
    SlotNotSampled,
    OwnResult,
}

/// `None` when a witness may carry the verdict `(checked, mismatch)`: an empty one always; else
/// only a verifier, with `mismatch ⊆ checked`, only sampled slots (`< n_sampled`) and none of
/// `own_slots` (a bitmask of the slots sampling the witness's own result).
pub fn verdict_error(
    checked: u16,
    mismatch: u16,
    verifier: bool,
    n_sampled: u64,
    own_slots: u16,
) -> Option<VerdictError> {
    if checked == 0 && mismatch == 0 {
        return None;
    }
    if !verifier {
        return Some(VerdictError::NotVerifier);
    }
    if mismatch & !checked != 0 {
        return Some(VerdictError::MismatchWithoutChecked);
    }
    if n_sampled < 16 && u64::from(checked) >> n_sampled != 0 {
        return Some(VerdictError::SlotNotSampled);
    }
    if checked & own_slots != 0 {
        return Some(VerdictError::OwnResult);
    }
    None
}

/// One stored witness as the verdict rules see it.
#[derive(Clone, Copy, Debug)]
pub struct VerdictVote {
    /// Its position in the witness shuffle (a verifier below `VERIFIERS_PER_ROUND`).
    pub position: u64,
    pub checked: u16,
    pub mismatch: u16,
}

/// What the votes decide about `n_sampled` slots, as bitmasks: `rejected` slots (a quorum of
/// mismatches: the trainer is ejected and its result left out) and, per vote, whether it is a
/// false accusation (it voted mismatch on a slot a quorum found a match).
pub fn judge(votes: &[VerdictVote], n_sampled: u64, n_verifiers: u64) -> (u16, Vec<bool>) {
    let q = verdict_quorum(n_verifiers);
    let mut rejected = 0u16;
    let mut accused = vec![false; votes.len()];
    let verifier = |v: &VerdictVote| v.position < VERIFIERS_PER_ROUND;
    for slot in 0..n_sampled.min(MAX_SAMPLED_RESULTS) {
        let bit = 1u16 << slot;
        let against =
            votes.iter().filter(|v| verifier(v) && v.checked & v.mismatch & bit != 0).count()
                as u64;
        let matches =
            votes.iter().filter(|v| verifier(v) && v.checked & !v.mismatch & bit != 0).count()
                as u64;
        if against >= q {
            rejected |= bit;
        } else if matches >= q {
            for (i, v) in votes.iter().enumerate() {
                if verifier(v) && v.checked & v.mismatch & bit != 0 {
                    accused[i] = true;
                }
            }
        }
    }
    (rejected, accused)
}

impl CoordinatorState {
    /// How many of `judged`'s results are sampled by `judging` (the round after it, whose seed
    /// draws them); none when `judged` did not train.
    pub fn judged_count(&self, judged: &Round) -> u64 {
        if !self.round_trained(judged) {
            return 0;
        }
        sampled_count(u64::from(judged.clients_len), self.config.verification_percent)
    }

    /// `InvalidWitness` unless `witness.verdict` may come from `from` in the current round: a
    /// verdict only from a verifier, on the previous round's sampled results, never on its own.
    pub(crate) fn check_verdict(
        &self,
        from: &NodeIdentity,
        witness: &Witness,
    ) -> Result<(), CoordinatorError> {
        let verdict = witness.proof.verdict;
        if verdict.is_empty() {
            return Ok(());
        }
        let (mut n_sampled, mut own) = (0, 0u16);
        if let Some(prev) = self.previous_round() {
            n_sampled = self.judged_count(prev);
            let judged = self.round_clients(prev);
            // The slot sampling the sender's own result, if any: one inverse shuffle of its
            // index, where checking each verdict bit forward cost a shuffle per bit (16 of
            // them, ~30k CU each on SBF, overran the witness budget).
            let n = u64::from(prev.clients_len);
            let seed = verify_seed(self.current_round().random_seed);
            let mine = (0..judged.len()).find(|&i| judged.get(i) == Some(from));
            let slot = mine.and_then(|i| compute_unshuffled_index(i as u64, n, &seed));
            if let Some(slot) = slot.filter(|&s| s < n_sampled) {
                own = 1 << slot;
            }
        }
        let verifier = witness.proof.witness != 0 && witness.proof.position < VERIFIERS_PER_ROUND;
        match verdict_error(verdict.checked, verdict.mismatch, verifier, n_sampled, own) {
            None => Ok(()),
            Some(_) => Err(CoordinatorError::InvalidWitness),
        }
    }

    /// At the end of the current round, before clients move out: eject the trainers whose
    /// previous-round result a quorum of verifiers rejected (their interval is queued again:
    /// clients leave the result out of the apply) and the verifiers a quorum contradicted.
    pub(crate) fn act_on_verdicts(&mut self) {
        let Some(prev) = self.previous_round() else {
            return;
        };
        let n_sampled = self.judged_count(prev);
        if n_sampled == 0 {
            return;
        }
        let judging = self.current_round();
        let votes: Vec<VerdictVote> = judging
            .witnesses()
            .iter()
            .map(|w| VerdictVote {
                position: w.proof.position,
                checked: w.proof.verdict.checked,
                mismatch: w.proof.verdict.mismatch,
            })
            .collect();
        let n_verifiers =
            verifier_count(self.config.witness_count(usize::from(judging.clients_len)) as u64);
        let (rejected, accused) = judge(&votes, n_sampled, n_verifiers);
        if rejected == 0 && !accused.contains(&true) {
            return;
        }
        let judged = self.round_clients(prev);
        let order = SwapOrNot::new(u64::from(prev.clients_len), &verify_seed(judging.random_seed));
        let rejected_ids: Vec<NodeIdentity> = (0..n_sampled)
            .filter(|slot| rejected >> slot & 1 != 0)
            .filter_map(|slot| order.shuffled(slot))
            .filter_map(|i| usize::try_from(i).ok().and_then(|i| judged.get(i)))
            .copied()
            .collect();
        let judging_clients = self.round_clients(judging);
        let mut accusers: Vec<NodeIdentity> = Vec::new();
        for (w, _) in judging.witnesses().iter().zip(&accused).filter(|(_, a)| **a) {
            let id = usize::try_from(w.proof.index).ok().and_then(|i| judging_clients.get(i));
            if let Some(id) = id.filter(|id| !accusers.contains(id)) {
                accusers.push(*id);
            }
        }
        let slots = self.round_slots(prev);
        for id in &rejected_ids {
            if let Some(i) = self.eject(id) {
                if let Some(batch) = slots.as_ref().and_then(|s| s.interval(i)) {
                    self.epoch_state.push_lost(batch);
                }
            }
        }
        for id in &accusers {
            self.eject(id);
        }
    }

    /// Ejects `who` if it is still an epoch client that has not been ejected (a client that
    /// withdrew is ejected too, so leaving does not escape the slashing); its index if so.
    fn eject(&mut self, who: &NodeIdentity) -> Option<usize> {
        let i = self.index_of(who)?;
        let client = &mut self.epoch_state.clients_mut()[i];
        let state = client.client_state();
        if !matches!(state, Some(ClientState::Healthy | ClientState::Withdrawn)) {
            return None;
        }
        client.state = ClientState::Ejected as u8;
        Some(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_quorums() {
        assert_eq!(sampled_count(4, 25), 1);
        assert_eq!(sampled_count(4, 26), 2);
        assert_eq!(sampled_count(256, 100), 16);
        assert_eq!(sampled_count(4, 0), 0);
        assert_eq!([1, 2, 3].map(verdict_quorum), [1, 2, 2]);
        assert_eq!(verifier_count(10), 3);
    }

    #[test]
    fn lone_accuser_and_quorum() {
        let v = |position, checked, mismatch| VerdictVote { position, checked, mismatch };
        let (rejected, accused) = judge(&[v(0, 1, 1), v(1, 1, 1), v(2, 1, 0)], 1, 3);
        assert_eq!((rejected, accused), (1, vec![false, false, false]));
        let (rejected, accused) = judge(&[v(0, 1, 1), v(1, 1, 0), v(2, 1, 0)], 1, 3);
        assert_eq!((rejected, accused), (0, vec![true, false, false]));
        let (rejected, accused) = judge(&[v(0, 1, 1), v(3, 1, 1)], 1, 3);
        assert_eq!((rejected, accused), (0, vec![false, false]));
    }
}
