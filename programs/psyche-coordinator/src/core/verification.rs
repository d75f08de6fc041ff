//! Result verification's pure rules (`client/psyche/coordinator/verification.py`;
//! docs/protocol.md, "Threat model and result verification"): which results a round samples,
//! who may carry a verdict and what a quorum of verdicts decides. Plain values only: the
//! witness's `verdict` field and the state machine's use of these rules are not mirrored yet, so
//! `verification_percent` stays 0 on chain (the config check).

use super::hash::{sha256, sha256v};
use super::shuffle::compute_shuffled_index;

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
