//! Layout types of the coordinator state (`client/psyche/coordinator/types.py`; docs/protocol.md,
//! "Coordinator state").
//!
//! Every stored type is `repr(C)` Pod with explicit padding, u8 tags instead of enums and u8 0/1
//! instead of bools, and fixed lists as a count plus an array, so the bytemuck layout equals the
//! borsh reading of the IDL (docs/solana.md). Accessors clamp counts to the array sizes, so a
//! corrupted count can never make the program panic.

use anchor_lang::prelude::*;
use bytemuck::{Pod, Zeroable};

use super::bloom::Bloom;
use super::config::{CoordinatorConfig, Progress};
use super::data_selection::BatchId;
use super::model::ModelBlob;

pub const NUM_STORED_ROUNDS: usize = 4;
pub const MAX_CLIENTS: usize = 256;
pub const MAX_EXITED_CLIENTS: usize = 256;
pub const MAX_WITNESSES: usize = 32;
pub const MAX_EVALS: usize = 8;
/// At most this many lost intervals are re-assigned in one round (`Round::retries`).
pub const MAX_ROUND_RETRIES: usize = 8;
/// Capacity of `EpochState::lost`; an interval lost while it is full is dropped.
pub const MAX_LOST_BATCHES: usize = 64;
pub const RUN_ID_MAX_LEN: usize = 32;
pub const MAX_STRING_LEN: usize = 64;
pub const MAX_URL_LEN: usize = 192;

macro_rules! fixed_string {
    ($name:ident, $len:expr) => {
        /// NUL-padded UTF-8 of at most
        #[doc = stringify!($len)]
        /// bytes; the text ends at the first NUL.
        #[derive(Clone, Copy, PartialEq, Eq, Pod, Zeroable, AnchorSerialize, AnchorDeserialize)]
        #[repr(C)]
        pub struct $name {
            pub bytes: [u8; $len],
        }

        impl $name {
            pub const LEN: usize = $len;

            /// `None` if `text` is longer than the capacity or contains a NUL (which would
            /// truncate it on the way back).
            pub fn new(text: &str) -> Option<Self> {
                if text.len() > $len || text.as_bytes().contains(&0) {
                    return None;
                }
                let mut bytes = [0u8; $len];
                bytes[..text.len()].copy_from_slice(text.as_bytes());
                Some(Self { bytes })
            }

            /// The stored bytes up to the first NUL.
            pub fn as_bytes(&self) -> &[u8] {
                let end = self.bytes.iter().position(|&b| b == 0).unwrap_or($len);
                &self.bytes[..end]
            }

            /// The text, or `None` if the bytes are not UTF-8.
            pub fn as_str(&self) -> Option<&str> {
                core::str::from_utf8(self.as_bytes()).ok()
            }
        }

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
            }
        }
    };
}

fixed_string!(FixedString32, 32);
fixed_string!(FixedString64, 64);
fixed_string!(FixedString96, 96);
fixed_string!(FixedString280, 280);

/// Run phase, stored as a u8 tag (the Python enum's value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RunState {
    Uninitialized = 0,
    WaitingForMembers = 1,
    Warmup = 2,
    RoundTrain = 3,
    RoundWitness = 4,
    Cooldown = 5,
    Finished = 6,
    Paused = 7,
}

impl RunState {
    pub const ALL: [RunState; 8] = [
        Self::Uninitialized,
        Self::WaitingForMembers,
        Self::Warmup,
        Self::RoundTrain,
        Self::RoundWitness,
        Self::Cooldown,
        Self::Finished,
        Self::Paused,
    ];

    pub fn from_u8(tag: u8) -> Option<Self> {
        Self::ALL.get(usize::from(tag)).copied()
    }

    pub fn halted(self) -> bool {
        matches!(self, Self::Uninitialized | Self::Finished | Self::Paused)
    }

    pub fn active(self) -> bool {
        matches!(self, Self::RoundTrain | Self::RoundWitness | Self::Cooldown)
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Uninitialized => "Uninitialized",
            Self::WaitingForMembers => "WaitingForMembers",
            Self::Warmup => "Warmup",
            Self::RoundTrain => "RoundTrain",
            Self::RoundWitness => "RoundWitness",
            Self::Cooldown => "Cooldown",
            Self::Finished => "Finished",
            Self::Paused => "Paused",
        }
    }
}

/// A client's standing in the epoch, stored as a u8 tag (the Python enum's value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ClientState {
    Healthy = 0,
    Dropped = 1,
    Withdrawn = 2,
    Ejected = 3,
}

impl ClientState {
    pub const ALL: [ClientState; 4] =
        [Self::Healthy, Self::Dropped, Self::Withdrawn, Self::Ejected];

    pub fn from_u8(tag: u8) -> Option<Self> {
        Self::ALL.get(usize::from(tag)).copied()
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Healthy => "Healthy",
            Self::Dropped => "Dropped",
            Self::Withdrawn => "Withdrawn",
            Self::Ejected => "Ejected",
        }
    }
}

/// A participant: wallet key `signer` plus P2P key `p2p_identity`. Equality is by `signer` only,
/// as in Python: the coordinator tracks wallets, and a restarted client keeps its identity.
#[derive(Clone, Copy, Debug, Pod, Zeroable, AnchorSerialize, AnchorDeserialize)]
#[repr(C)]
pub struct NodeIdentity {
    pub signer: [u8; 32],
    pub p2p_identity: [u8; 32],
}

impl PartialEq for NodeIdentity {
    fn eq(&self, other: &Self) -> bool {
        // One word compare settles almost every mismatch: client lists are searched often, and
        // a 32-byte compare costs several times more compute on SBF.
        self.key_word() == other.key_word() && self.signer == other.signer
    }
}

impl NodeIdentity {
    /// The first 8 bytes of `signer`: equal for equal identities, so a cheap first test and a
    /// sort key.
    pub fn key_word(&self) -> u64 {
        let k = &self.signer;
        u64::from_le_bytes([k[0], k[1], k[2], k[3], k[4], k[5], k[6], k[7]])
    }
}

impl Eq for NodeIdentity {}

#[zero_copy]
#[derive(Debug, PartialEq)]
pub struct Client {
    pub id: NodeIdentity,
    /// Round height at which the client left (meaningful once it is in `exited_clients`).
    pub exited_height: u32,
    /// Its index in `clients` when it left; with `exited_height` this rebuilds past lists.
    pub exited_index: u16,
    /// `ClientState` tag.
    pub state: u8,
    pub _pad: [u8; 1],
}

impl Client {
    pub fn new(id: NodeIdentity) -> Self {
        Self { id, exited_height: 0, exited_index: 0, state: ClientState::Healthy as u8, _pad: [0] }
    }

    pub fn client_state(&self) -> Option<ClientState> {
        ClientState::from_u8(self.state)
    }

    pub fn is_healthy(&self) -> bool {
        self.state == ClientState::Healthy as u8
    }
}

/// A verifier's verdict on the previous round's sampled results (`core::verification`): bit `p`
/// of `checked` says it recomputed slot `p`'s result, of `mismatch` that the result failed.
/// Both 0 for every other witness.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable, AnchorSerialize, AnchorDeserialize,
)]
#[repr(C)]
pub struct Verdict {
    pub checked: u16,
    pub mismatch: u16,
}

impl Verdict {
    pub fn is_empty(&self) -> bool {
        self.checked == 0 && self.mismatch == 0
    }
}

/// A witness's claim to be elected: its position in the witness shuffle and its client index.
/// The stored witness's `verdict` sits here, in what was this struct's padding (zero, an empty
/// verdict, in older accounts), so the account layout kept its size and version.
#[zero_copy]
#[derive(Debug, PartialEq)]
pub struct WitnessProof {
    pub position: u64,
    pub index: u64,
    /// 0/1: whether `position` falls in the witness range.
    pub witness: u8,
    pub _pad: [u8; 1],
    pub verdict: Verdict,
    pub _pad2: [u8; 2],
}

impl WitnessProof {
    pub fn new(position: u64, index: u64, witness: bool, verdict: Verdict) -> Self {
        Self { position, index, witness: u8::from(witness), _pad: [0], verdict, _pad2: [0; 2] }
    }
}

/// A witness as stored in a round.
#[zero_copy]
#[derive(Debug, PartialEq)]
pub struct Witness {
    pub proof: WitnessProof,
    pub participant_bloom: Bloom,
    pub broadcast_bloom: Bloom,
}

/// A stored closed interval `[start, end]` of sample indices (`data_selection::BatchId`).
#[zero_copy]
#[derive(Debug, PartialEq, Eq)]
pub struct BatchIdPod {
    pub start: u64,
    pub end: u64,
}

impl From<BatchId> for BatchIdPod {
    fn from(b: BatchId) -> Self {
        Self { start: b.start, end: b.end }
    }
}

impl From<BatchIdPod> for BatchId {
    fn from(b: BatchIdPod) -> Self {
        Self { start: b.start, end: b.end }
    }
}

#[zero_copy]
#[derive(Debug, PartialEq)]
pub struct Round {
    /// First fresh sample index of the round.
    pub data_index: u64,
    pub random_seed: u64,
    pub height: u32,
    /// Number of epoch clients when the round started.
    pub clients_len: u16,
    pub tie_breaker_tasks: u16,
    pub num_witnesses: u32,
    pub num_retries: u8,
    pub _pad: [u8; 3],
    pub witnesses: [Witness; MAX_WITNESSES],
    /// Lost intervals re-assigned in this round, to its first shuffled trainers (in order).
    pub retries: [BatchIdPod; MAX_ROUND_RETRIES],
}

impl Round {
    pub fn witnesses(&self) -> &[Witness] {
        &self.witnesses[..(self.num_witnesses as usize).min(MAX_WITNESSES)]
    }

    pub fn witnesses_mut(&mut self) -> &mut [Witness] {
        let n = (self.num_witnesses as usize).min(MAX_WITNESSES);
        &mut self.witnesses[..n]
    }

    /// Keep only the first `n` witnesses, zeroing the rest so stale bytes never linger.
    pub fn truncate_witnesses(&mut self, n: usize) {
        let n = n.min(MAX_WITNESSES);
        bytemuck::cast_slice_mut::<Witness, u8>(&mut self.witnesses[n..]).fill(0);
        self.num_witnesses = n as u32;
    }

    pub fn clear_witnesses(&mut self) {
        self.truncate_witnesses(0);
    }

    /// Appends `w`; `false` (and no change) when the list is full.
    pub fn push_witness(&mut self, w: &Witness) -> bool {
        let n = self.num_witnesses as usize;
        if n >= MAX_WITNESSES {
            return false;
        }
        self.witnesses[n] = *w;
        self.num_witnesses += 1;
        true
    }

    pub fn retries(&self) -> &[BatchIdPod] {
        &self.retries[..usize::from(self.num_retries).min(MAX_ROUND_RETRIES)]
    }

    /// Samples in the retried intervals (u128: a corrupted account cannot overflow it).
    pub fn retried_samples(&self) -> u128 {
        self.retries().iter().map(|b| BatchId::from(*b).size()).sum()
    }

    /// Sets the retries to `batches` (at most `MAX_ROUND_RETRIES`), zeroing the rest.
    pub fn set_retries(&mut self, batches: &[BatchIdPod]) {
        let n = batches.len().min(MAX_ROUND_RETRIES);
        self.retries[..n].copy_from_slice(&batches[..n]);
        bytemuck::cast_slice_mut::<BatchIdPod, u8>(&mut self.retries[n..]).fill(0);
        self.num_retries = n as u8;
    }
}

#[zero_copy]
#[derive(Debug, PartialEq)]
pub struct EpochState {
    pub rounds: [Round; NUM_STORED_ROUNDS],
    /// The epoch's participants; a client's index here is what proofs refer to.
    pub clients: [Client; MAX_CLIENTS],
    /// Clients removed during this epoch, in the order they left.
    pub exited_clients: [Client; MAX_EXITED_CLIENTS],
    pub start_timestamp: u64,
    pub num_clients: u32,
    pub num_exited_clients: u32,
    /// Index of the current round in `rounds`.
    pub rounds_head: u32,
    pub start_step: u32,
    /// 0 = not set.
    pub last_step: u32,
    pub first_round: u8,
    pub cold_start_epoch: u8,
    pub _pad: [u8; 2],
    /// Kept across epochs, so it stays last: a new epoch zeroes everything before `num_lost`.
    pub num_lost: u32,
    pub _pad_lost: [u8; 4],
    /// Intervals waiting for re-assignment, oldest first (`client/psyche/coordinator/lost_work.py`).
    pub lost: [BatchIdPod; MAX_LOST_BATCHES],
}

impl EpochState {
    pub fn clients(&self) -> &[Client] {
        &self.clients[..(self.num_clients as usize).min(MAX_CLIENTS)]
    }

    pub fn clients_mut(&mut self) -> &mut [Client] {
        let n = (self.num_clients as usize).min(MAX_CLIENTS);
        &mut self.clients[..n]
    }

    pub fn exited_clients(&self) -> &[Client] {
        &self.exited_clients[..(self.num_exited_clients as usize).min(MAX_EXITED_CLIENTS)]
    }

    pub fn head(&self) -> usize {
        // Masked so a corrupted head can never index out of bounds (decoding rejects >= 4).
        self.rounds_head as usize % NUM_STORED_ROUNDS
    }

    pub fn lost(&self) -> &[BatchIdPod] {
        &self.lost[..(self.num_lost as usize).min(MAX_LOST_BATCHES)]
    }

    /// Queues `batch` for re-assignment; `false` (dropped) when the queue is full.
    pub fn push_lost(&mut self, batch: BatchId) -> bool {
        let n = self.lost().len();
        if n >= MAX_LOST_BATCHES {
            return false;
        }
        self.lost[n] = batch.into();
        self.num_lost = (n + 1) as u32;
        true
    }

    /// Removes the first `k` queued intervals, zeroing the freed slots.
    pub fn pop_lost(&mut self, k: usize) {
        let n = self.lost().len();
        let k = k.min(n);
        self.lost.copy_within(k..n, 0);
        bytemuck::cast_slice_mut::<BatchIdPod, u8>(&mut self.lost[n - k..n]).fill(0);
        self.num_lost = (n - k) as u32;
    }

    pub fn clear_lost(&mut self) {
        bytemuck::cast_slice_mut::<BatchIdPod, u8>(&mut self.lost).fill(0);
        self.num_lost = 0;
    }
}

/// The whole coordinator (Python's `Coordinator`), embedded in the zero-copy account.
#[zero_copy]
#[derive(Debug, PartialEq)]
pub struct CoordinatorState {
    pub run_id: FixedString32,
    pub config: CoordinatorConfig,
    pub progress: Progress,
    pub run_state_start_unix_timestamp: u64,
    /// `RunState` tag.
    pub run_state: u8,
    /// 0/1.
    pub pending_pause: u8,
    pub _pad: [u8; 6],
    pub model: ModelBlob,
    pub epoch_state: EpochState,
}

/// What a client says about itself in a `witness` / `warmup_witness` instruction (the borsh
/// layout the client builds from this IDL: no padding, a real bool).
#[derive(Clone, Copy, Debug, PartialEq, AnchorSerialize, AnchorDeserialize)]
pub struct WitnessProofArg {
    pub position: u64,
    pub index: u64,
    pub witness: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, AnchorSerialize, AnchorDeserialize)]
pub struct WitnessArg {
    pub proof: WitnessProofArg,
    pub participant_bloom: Bloom,
    pub broadcast_bloom: Bloom,
}

impl WitnessArg {
    pub fn to_stored(&self) -> Witness {
        Witness {
            proof: WitnessProof::new(
                self.proof.position,
                self.proof.index,
                self.proof.witness,
                Verdict::default(),
            ),
            participant_bloom: self.participant_bloom,
            broadcast_bloom: self.broadcast_bloom,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, AnchorSerialize, AnchorDeserialize)]
pub struct EvalResult {
    /// Index of the eval task in the run's task list.
    pub task: u8,
    pub value: f32,
}

/// Statistics a witness reports with its proof; never stored in the coordinator.
#[derive(Clone, Debug, PartialEq, AnchorSerialize, AnchorDeserialize)]
pub struct WitnessMetadata {
    pub step: u32,
    pub tokens_per_sec: f32,
    pub bandwidth_per_sec: f32,
    pub loss: f32,
    pub efficiency: f32,
    pub evals: Vec<EvalResult>,
}

impl WitnessMetadata {
    pub fn check(&self) -> bool {
        self.evals.len() <= MAX_EVALS
    }
}

/// Human-facing run description (docs/solana.md, "Programs"), settable at any time by its owner.
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable, AnchorSerialize, AnchorDeserialize)]
#[repr(C)]
pub struct RunMetadata {
    pub name: FixedString64,
    pub description: FixedString280,
    pub num_parameters: u64,
    pub vocab_size: u64,
}
