//! Quorum, trainer health and consensus selection from witness blooms
//! (`client/psyche/coordinator/consensus.py`; docs/protocol.md, "Quorum", "Consensus" and
//! "Health and health checks").

use super::config::CoordinatorConfig;
use super::hash::sha256;
use super::types::{NodeIdentity, Witness};

/// What a witness puts in its participant bloom for a trainer it received from.
pub fn participant_item(who: &NodeIdentity) -> [u8; 32] {
    sha256(&who.signer)
}

pub fn trainer_healthy_score(who: &NodeIdentity, witnesses: &[Witness]) -> usize {
    let item = participant_item(who);
    witnesses.iter().filter(|w| w.participant_bloom.contains(&item)).count()
}

/// Healthy iff at least a quorum of the round's witnesses saw this trainer's result.
pub fn trainer_healthy(
    who: &NodeIdentity,
    witnesses: &[Witness],
    config: &CoordinatorConfig,
) -> bool {
    trainer_healthy_score(who, witnesses) >= config.quorum(witnesses.len())
}

/// How many of the round's witnesses positively attest that this trainer delivered nothing.
pub fn trainer_missing_score(who: &NodeIdentity, witnesses: &[Witness]) -> usize {
    witnesses.len() - trainer_healthy_score(who, witnesses)
}

/// A health check may eject this trainer: not healthy *and* a quorum of the round's witnesses
/// agree it is missing. Falling below the quorum of sightings alone is not enough: one witness
/// with empty blooms (or one slow download) would otherwise make every trainer ejectable.
pub fn trainer_ejectable(
    who: &NodeIdentity,
    witnesses: &[Witness],
    config: &CoordinatorConfig,
) -> bool {
    !trainer_healthy(who, witnesses, config)
        && trainer_missing_score(who, witnesses) >= config.quorum(witnesses.len())
}

/// Index of the commitment (in arrival order) that a quorum of witnesses voted for: each witness
/// votes for the first hash in its broadcast bloom; the most votes at or above quorum wins, the
/// later one on a tie; `None`: no consensus.
pub fn select_consensus_commitment(
    data_hashes: &[[u8; 32]],
    witnesses: &[Witness],
    config: &CoordinatorConfig,
) -> Option<usize> {
    let quorum = config.quorum(witnesses.len());
    let mut scores = vec![0usize; data_hashes.len()];
    for w in witnesses {
        if let Some(i) = data_hashes.iter().position(|h| w.broadcast_bloom.contains(h)) {
            scores[i] += 1;
        }
    }
    let mut best: Option<usize> = None;
    for (i, &s) in scores.iter().enumerate() {
        if s >= quorum && best.is_none_or(|b| s >= scores[b]) {
            best = Some(i);
        }
    }
    best
}
