//! The model description (`client/psyche/protocol/config.py`, SPEC §1.5) and its bounded borsh
//! blob inside the account.
//!
//! The nested tagged enums cannot be Pod, so the account stores the borsh encoding of `Model`
//! (`ModelBlob`), and the IDL describes `Model` because `update` takes it as an argument; the
//! Python side decodes the blob with that same type. Variant order is the declaration order in
//! config.py, field order is the dataclass order. Strings are bounded like Python's `MaxBytes`
//! (64, or 192 for URLs and paths), which Python enforces when decoding and `check` does here.

use anchor_lang::prelude::*;

use super::config::CoordinatorConfig;
use super::types::{MAX_STRING_LEN, MAX_URL_LEN};

type CheckResult = core::result::Result<(), &'static str>;

fn rule(ok: bool, message: &'static str) -> CheckResult {
    if ok {
        Ok(())
    } else {
        Err(message)
    }
}

fn bounded(s: &str, max: usize, message: &'static str) -> CheckResult {
    rule(s.len() <= max, message)
}

#[derive(Clone, Debug, PartialEq, AnchorSerialize, AnchorDeserialize)]
pub struct HubRepo {
    pub repo_id: String,
    pub revision: Option<String>,
}

#[derive(Clone, Debug, PartialEq, AnchorSerialize, AnchorDeserialize)]
pub struct GcsRepo {
    pub bucket: String,
    pub prefix: Option<String>,
}

/// Where joining clients get the model.
#[derive(Clone, Debug, PartialEq, AnchorSerialize, AnchorDeserialize)]
pub enum Checkpoint {
    Ephemeral,
    Dummy(HubRepo),
    Hub(HubRepo),
    P2P(HubRepo),
    Gcs(GcsRepo),
    P2PGcs(GcsRepo),
}

impl Checkpoint {
    /// The string bounds Python's decoder enforces (repo ids, revisions, buckets: 64 bytes).
    pub fn check_bounds(&self) -> CheckResult {
        const MSG: &str = "model.LLM.checkpoint strings must be at most 64 bytes";
        match self {
            Self::Ephemeral => Ok(()),
            Self::Dummy(r) | Self::Hub(r) | Self::P2P(r) => {
                bounded(&r.repo_id, MAX_STRING_LEN, MSG)?;
                bounded(r.revision.as_deref().unwrap_or(""), MAX_STRING_LEN, MSG)
            }
            Self::Gcs(g) | Self::P2PGcs(g) => {
                bounded(&g.bucket, MAX_STRING_LEN, MSG)?;
                bounded(g.prefix.as_deref().unwrap_or(""), MAX_STRING_LEN, MSG)
            }
        }
    }

    /// At the end of Cooldown joiners fetch from peers: Hub/Dummy → P2P, Gcs → P2PGcs.
    pub fn to_p2p(&self) -> Option<Checkpoint> {
        match self {
            Self::Hub(r) | Self::Dummy(r) => Some(Self::P2P(r.clone())),
            Self::Gcs(g) => Some(Self::P2PGcs(g.clone())),
            _ => None,
        }
    }

    /// Nobody from the last epoch came back: P2P → Hub, P2PGcs → Gcs.
    pub fn to_central_store(&self) -> Option<Checkpoint> {
        match self {
            Self::P2P(r) => Some(Self::Hub(r.clone())),
            Self::P2PGcs(g) => Some(Self::Gcs(g.clone())),
            _ => None,
        }
    }

    /// The (current, reported) → stored table of an accepted `checkpoint`; `None`: rejected.
    pub fn transition(current: &Checkpoint, reported: &Checkpoint) -> Option<Checkpoint> {
        match (reported, current) {
            (Self::Hub(r), Self::P2P(_) | Self::P2PGcs(_)) => Some(Self::P2P(r.clone())),
            (Self::Hub(r), Self::Hub(_)) => Some(Self::Hub(r.clone())),
            (Self::Gcs(g), Self::P2PGcs(_) | Self::P2P(_)) => Some(Self::P2PGcs(g.clone())),
            (Self::Gcs(g), Self::Gcs(_)) => Some(Self::Gcs(g.clone())),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, AnchorSerialize, AnchorDeserialize)]
pub enum LLMArchitecture {
    HfLlama,
    HfDeepseek,
    HfAuto,
    Torchtitan,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, AnchorSerialize, AnchorDeserialize)]
pub enum LLMDataType {
    Pretraining,
    Finetuning,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, AnchorSerialize, AnchorDeserialize)]
pub enum TokenSize {
    TwoBytes,
    FourBytes,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, AnchorSerialize, AnchorDeserialize)]
pub enum Shuffle {
    DontShuffle,
    Seeded([u8; 32]),
}

#[derive(Clone, Debug, PartialEq, AnchorSerialize, AnchorDeserialize)]
pub enum HttpLocation {
    SingleUrl(String),
    NumberedFiles { url_template: String, start_index: u32, n_left_pad_zeros: u8, num_files: u32 },
    Gcp { bucket_name: String, filter_directory: String },
}

#[derive(Clone, Debug, PartialEq, AnchorSerialize, AnchorDeserialize)]
pub enum DataLocation {
    Dummy,
    Server(String),
    Local(String),
    Http { location: HttpLocation, token_size_in_bytes: TokenSize, shuffle: Shuffle },
    WeightedHttp(String),
    Preprocessed(String),
}

#[derive(Clone, Copy, Debug, PartialEq, AnchorSerialize, AnchorDeserialize)]
pub enum LearningRateSchedule {
    Constant {
        base_lr: f64,
        warmup_steps: u32,
        warmup_init_lr: f64,
    },
    Linear {
        base_lr: f64,
        warmup_steps: u32,
        warmup_init_lr: f64,
        total_steps: u32,
        final_lr: f64,
    },
    Cosine {
        base_lr: f64,
        warmup_steps: u32,
        warmup_init_lr: f64,
        total_steps: u32,
        final_lr: f64,
    },
    WarmupStableDecay {
        base_lr: f64,
        warmup_init_lr: f64,
        cosine_decay_final_lr: f64,
        linear_decay_final_lr: f64,
        warmup_steps: u32,
        stable_steps: u32,
        cosine_decay_steps: u32,
        linear_decay_steps: u32,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, AnchorSerialize, AnchorDeserialize)]
pub enum OptimizerDefinition {
    Dummy,
    AdamW {
        betas: [f32; 2],
        weight_decay: f32,
        eps: f32,
        clip_grad_norm: Option<f32>,
    },
    Distro {
        clip_grad_norm: Option<f32>,
        weight_decay: Option<f32>,
        compression_decay: f32,
        compression_topk: u16,
        compression_chunk: u16,
        quantize_1bit: bool,
    },
}

#[derive(Clone, Debug, PartialEq, AnchorSerialize, AnchorDeserialize)]
pub struct LLM {
    pub max_seq_len: u32,
    pub cold_start_warmup_steps: u32,
    pub architecture: LLMArchitecture,
    pub checkpoint: Checkpoint,
    pub data_type: LLMDataType,
    pub data_location: DataLocation,
    pub lr_schedule: LearningRateSchedule,
    pub optimizer: OptimizerDefinition,
}

#[derive(Clone, Debug, PartialEq, AnchorSerialize, AnchorDeserialize)]
pub enum Model {
    LLM(LLM),
}

impl Model {
    pub fn llm(&self) -> &LLM {
        let Model::LLM(llm) = self;
        llm
    }

    pub fn llm_mut(&mut self) -> &mut LLM {
        let Model::LLM(llm) = self;
        llm
    }

    /// Python's `LLM.check`, preceded by the string bounds Python's decoder enforces.
    pub fn check(&self) -> CheckResult {
        let llm = self.llm();
        llm.check_bounds()?;
        rule(llm.max_seq_len > 0, "model.LLM.max_seq_len must be greater than 0")?;
        const EMPTY: &str = "model.LLM.data_location must not be empty";
        match &llm.data_location {
            DataLocation::Server(s)
            | DataLocation::Local(s)
            | DataLocation::WeightedHttp(s)
            | DataLocation::Preprocessed(s) => rule(!s.is_empty(), EMPTY)?,
            DataLocation::Http { location: HttpLocation::SingleUrl(url), .. } => {
                rule(!url.is_empty(), "model.LLM.data_location.Http.location must not be empty")?
            }
            _ => {}
        }
        match &llm.checkpoint {
            Checkpoint::Ephemeral => {
                return Err("model.LLM.checkpoint must not be Ephemeral");
            }
            Checkpoint::Hub(r) | Checkpoint::P2P(r) => {
                rule(!r.repo_id.is_empty(), "model.LLM.checkpoint repo_id must not be empty")?
            }
            Checkpoint::Gcs(g) | Checkpoint::P2PGcs(g) => {
                rule(!g.bucket.is_empty(), "model.LLM.checkpoint bucket must not be empty")?
            }
            Checkpoint::Dummy(_) => {}
        }
        match llm.optimizer {
            OptimizerDefinition::Dummy => return Err("model.LLM.optimizer must not be Dummy"),
            OptimizerDefinition::Distro { compression_chunk, compression_topk, .. } => {
                rule(
                    compression_chunk > 0,
                    "model.LLM.optimizer.Distro.compression_chunk must be > 0",
                )?;
                rule(
                    compression_topk > 0,
                    "model.LLM.optimizer.Distro.compression_topk must be > 0",
                )?;
            }
            OptimizerDefinition::AdamW { .. } => {}
        }
        if let LearningRateSchedule::WarmupStableDecay {
            base_lr,
            cosine_decay_final_lr,
            linear_decay_final_lr,
            ..
        } = llm.lr_schedule
        {
            rule(
                linear_decay_final_lr <= cosine_decay_final_lr && cosine_decay_final_lr <= base_lr,
                "model.LLM.lr_schedule.WarmupStableDecay: need linear_decay_final_lr <= \
                 cosine_decay_final_lr <= base_lr",
            )?;
        }
        Ok(())
    }

    /// `cold_start_warmup_steps` must fit in one epoch's rounds:
    /// at most `(epoch_time - warmup_time) / max_round_train_time` (floor division).
    pub fn check_cold_start_warmup_steps(&self, config: &CoordinatorConfig) -> CheckResult {
        const MSG: &str = "model.LLM.cold_start_warmup_steps must be at most \
                           (config.epoch_time - config.warmup_time) / config.max_round_train_time";
        // Python divides by zero here (and its negative floor quotient always fails the rule);
        // both cases reject.
        let Some(span) = config.epoch_time.checked_sub(config.warmup_time) else {
            return Err(MSG);
        };
        if config.max_round_train_time == 0 {
            return Err(MSG);
        }
        let limit = span / config.max_round_train_time;
        rule(u64::from(self.llm().cold_start_warmup_steps) <= limit, MSG)
    }

    /// Bytes of the borsh encoding.
    pub fn encoded_len(&self) -> usize {
        let mut counter = ByteCounter(0);
        // Writing to a counter cannot fail.
        let _ = self.serialize(&mut counter);
        counter.0
    }
}

impl LLM {
    fn check_bounds(&self) -> CheckResult {
        const S: &str = "model.LLM strings must be at most 64 bytes";
        const U: &str = "model.LLM URLs and paths must be at most 192 bytes";
        self.checkpoint.check_bounds()?;
        match &self.data_location {
            DataLocation::Dummy => Ok(()),
            DataLocation::Server(s) => bounded(s, MAX_STRING_LEN, S),
            DataLocation::Local(s)
            | DataLocation::WeightedHttp(s)
            | DataLocation::Preprocessed(s) => bounded(s, MAX_URL_LEN, U),
            DataLocation::Http { location, .. } => match location {
                HttpLocation::SingleUrl(url) => bounded(url, MAX_URL_LEN, U),
                HttpLocation::NumberedFiles { url_template, .. } => {
                    bounded(url_template, MAX_STRING_LEN, S)
                }
                HttpLocation::Gcp { bucket_name, filter_directory } => {
                    bounded(bucket_name, MAX_STRING_LEN, S)?;
                    bounded(filter_directory, MAX_URL_LEN, U)
                }
            },
        }
    }
}

struct ByteCounter(usize);

impl std::io::Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 = self.0.saturating_add(buf.len());
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Capacity of the stored model encoding. The longest model (every string at its bound) encodes
/// to 520 bytes (pinned by a test); the rest is headroom for new variants.
pub const MODEL_BLOB_CAPACITY: usize = 1016;

/// `Model` as borsh bytes inside the zero-copy account; `len == 0` means no model yet.
#[zero_copy]
#[derive(Debug, PartialEq)]
pub struct ModelBlob {
    pub len: u16,
    pub _pad: [u8; 6],
    pub bytes: [u8; MODEL_BLOB_CAPACITY],
}

impl ModelBlob {
    pub fn encoded(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len).min(MODEL_BLOB_CAPACITY)]
    }

    /// The stored model; `None` when empty or not a valid encoding.
    pub fn load(&self) -> Option<Model> {
        Model::try_from_slice(self.encoded()).ok()
    }

    /// Stores `model`, or returns `false` and changes nothing when it does not fit.
    pub fn store(&mut self, model: &Model) -> bool {
        let n = model.encoded_len();
        if n > MODEL_BLOB_CAPACITY {
            return false;
        }
        let mut out: &mut [u8] = &mut self.bytes[..n];
        if model.serialize(&mut out).is_err() {
            return false;
        }
        self.bytes[n..].fill(0);
        self.len = n as u16;
        true
    }

    /// `LLM.max_seq_len` read in place (tag byte 0 = `LLM`, then the u32): the round loop needs
    /// it every transition, and a full decode allocates. 0 when there is no valid model.
    pub fn max_seq_len(&self) -> u32 {
        match self.encoded() {
            [0, a, b, c, d, ..] => u32::from_le_bytes([*a, *b, *c, *d]),
            _ => 0,
        }
    }
}
