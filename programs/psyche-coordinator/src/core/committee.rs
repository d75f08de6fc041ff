//! Committee and witness selection for one round (`client/psyche/protocol/committee.py`;
//! docs/protocol.md, "Committee and witness selection"). Roles come from two salted swap-or-not
//! shuffles of the round's seed, so anyone can check a claimed role from a small proof
//! `(position, index)`.

use anchor_lang::prelude::*;

use super::hash::{sha256, sha256v};
use super::shuffle::compute_shuffled_index;
use super::types::{Client, NodeIdentity, MAX_WITNESSES};

pub const COMMITTEE_SALT: &[u8] = b"committee";
pub const WITNESS_SALT: &[u8] = b"witness";

/// Borsh encodes the variant index, which equals the Python value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, AnchorSerialize, AnchorDeserialize)]
pub enum Committee {
    TieBreaker = 0,
    Verifier = 1,
    Trainer = 2,
}

impl Committee {
    pub fn name(self) -> &'static str {
        match self {
            Self::TieBreaker => "TieBreaker",
            Self::Verifier => "Verifier",
            Self::Trainer => "Trainer",
        }
    }
}

/// A client's role in a round, as claimed in a health check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, AnchorSerialize, AnchorDeserialize)]
pub struct CommitteeProof {
    pub committee: Committee,
    /// Position of `index` in the committee shuffle.
    pub position: u64,
    /// The client's index in the epoch's client list.
    pub index: u64,
}

/// One entry of a `health_check`: a client and its committee proof for the previous round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, AnchorSerialize, AnchorDeserialize)]
pub struct HealthCheck {
    pub id: NodeIdentity,
    pub proof: CommitteeProof,
}

/// Invalid selection parameters (Python's `CommitteeSelectionError`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitteeSelectionError {
    FewerNodesThanTieBreakers,
    FewerNodesThanWitnesses,
    VerificationPercentAbove100,
}

/// Roles for one round, built from the config and the round's client count and seed.
#[derive(Clone, Copy, Debug)]
pub struct CommitteeSelection {
    pub tie_breaker_nodes: u64,
    pub verifier_nodes: u64,
    /// The configured count (0 means "up to `MAX_WITNESSES`").
    pub witness_nodes: u64,
    pub total_nodes: u64,
    pub seed: u64,
    pub committee_seed: [u8; 32],
    pub witness_seed: [u8; 32],
}

impl CommitteeSelection {
    pub fn new(
        tie_breaker_nodes: u64,
        witness_nodes: u64,
        verification_percent: u64,
        total_nodes: u64,
        seed: u64,
    ) -> core::result::Result<Self, CommitteeSelectionError> {
        if total_nodes < tie_breaker_nodes {
            return Err(CommitteeSelectionError::FewerNodesThanTieBreakers);
        }
        if witness_nodes != 0 && total_nodes < witness_nodes {
            return Err(CommitteeSelectionError::FewerNodesThanWitnesses);
        }
        if verification_percent > 100 {
            return Err(CommitteeSelectionError::VerificationPercentAbove100);
        }
        // (total - tb) * vp <= 2^64 * 100 needs u128; the quotient fits back in u64.
        let verifier_nodes = (u128::from(total_nodes - tie_breaker_nodes)
            * u128::from(verification_percent)
            / 100) as u64;
        let seed32 = sha256(&seed.to_le_bytes());
        Ok(Self {
            tie_breaker_nodes,
            verifier_nodes,
            witness_nodes,
            total_nodes,
            seed,
            committee_seed: sha256v(&[&seed32, COMMITTEE_SALT]),
            witness_seed: sha256v(&[&seed32, WITNESS_SALT]),
        })
    }

    fn committee_at(&self, position: u64) -> Committee {
        if position < self.tie_breaker_nodes {
            Committee::TieBreaker
        } else if u128::from(position)
            < u128::from(self.tie_breaker_nodes) + u128::from(self.verifier_nodes)
        {
            Committee::Verifier
        } else {
            Committee::Trainer
        }
    }

    fn is_witness_at(&self, position: u64) -> bool {
        let limit = if self.witness_nodes != 0 { self.witness_nodes } else { MAX_WITNESSES as u64 };
        position < limit
    }

    /// The committee proof of `index`; `None` if `index >= total_nodes`.
    pub fn get_committee(&self, index: u64) -> Option<CommitteeProof> {
        let position = compute_shuffled_index(index, self.total_nodes, &self.committee_seed)?;
        Some(CommitteeProof { committee: self.committee_at(position), position, index })
    }

    /// `(position, is_witness)` of `index`; `None` if `index >= total_nodes`.
    pub fn get_witness(&self, index: u64) -> Option<(u64, bool)> {
        let position = compute_shuffled_index(index, self.total_nodes, &self.witness_seed)?;
        Some((position, self.is_witness_at(position)))
    }

    fn owns_index(&self, index: u64, client_id: &NodeIdentity, clients: &[Client]) -> bool {
        // An index beyond total_nodes has no position; the reference would panic here.
        index < self.total_nodes
            && (index as usize) < clients.len()
            && clients[index as usize].id == *client_id
    }

    /// True iff `proof` is `client_id`'s committee proof in `clients`.
    pub fn verify_committee(
        &self,
        proof: &CommitteeProof,
        client_id: &NodeIdentity,
        clients: &[Client],
    ) -> bool {
        self.owns_index(proof.index, client_id, clients)
            && self
                .get_committee(proof.index)
                .is_some_and(|e| e.position == proof.position && e.committee == proof.committee)
    }

    /// True iff `(position, index, witness)` is `client_id`'s witness proof in `clients`.
    pub fn verify_witness(
        &self,
        position: u64,
        index: u64,
        witness: bool,
        client_id: &NodeIdentity,
        clients: &[Client],
    ) -> bool {
        self.owns_index(index, client_id, clients)
            && self.get_witness(index).is_some_and(|(p, w)| p == position && w == witness)
    }
}
