//! The model description (`client/psyche/protocol/model.py` and the component modules it
//! imports; docs/protocol.md, "Run configuration") and its bounded borsh blob inside the account.
//!
//! The nested tagged enums cannot be Pod, so the account stores the borsh encoding of `Model`
//! (`ModelBlob`), and the IDL describes `Model` because `update` takes it as an argument; the
//! Python side decodes the blob with that same type. Variant order is the declaration order in
//! the Python modules, field order is the dataclass order. Strings are bounded like Python's
//! `MaxBytes` (64, or 192 for URLs and paths), which Python enforces when decoding and `check`
//! does here.
//!
//! `Model::check` is Python's `LLM.check`, rule for rule and in the same order (each component's
//! `check` here mirrors the same component's `check` there), so a config that `validate-config`
//! accepts is one `update` accepts and the other way round; `tests/vectors/config/validity.json`
//! pins both. Every number a client computes with must be finite (the reference accepted NaN
//! learning rates or a `compression_decay` of 1.5, and then every client failed at load).

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

/// A learning rate: finite and not negative.
fn lr(x: f64, message: &'static str) -> CheckResult {
    rule(x.is_finite() && x >= 0.0, message)
}

fn clip_grad_norm(x: Option<f32>, message: &'static str) -> CheckResult {
    x.map_or(Ok(()), |x| rule(x.is_finite() && x > 0.0, message))
}

fn weight_decay(x: Option<f32>, message: &'static str) -> CheckResult {
    x.map_or(Ok(()), |x| rule(x.is_finite() && x >= 0.0, message))
}

/// Python's `server_address_ok`: `host:port`, port 1-65535 in ASCII digits, the host a name or
/// IPv4 address (`[A-Za-z0-9._-]+`) or a bracketed IPv6 address.
pub fn server_address_ok(address: &str) -> bool {
    let Some(colon) = address.rfind(':') else {
        return false;
    };
    let (host, port) = (&address[..colon], &address[colon + 1..]);
    let name_byte = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(inner) => {
            inner.contains(':') && inner.bytes().all(|b| name_byte(b) || matches!(b, b':' | b'%'))
        }
        None => !host.is_empty() && host.bytes().all(name_byte),
    };
    let port_value = port.bytes().try_fold(0u32, |acc, b| {
        let digit = if b.is_ascii_digit() { Some(u32::from(b - b'0')) } else { None }?;
        acc.checked_mul(10)?.checked_add(digit)
    });
    host_ok && !port.is_empty() && matches!(port_value, Some(1..=65535))
}

/// Python's `http_url_ok`: `http://` or `https://`, a non-empty host part (up to the first `/`,
/// `?` or `#`), and no space or control character anywhere.
pub fn http_url_ok(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://")) else {
        return false;
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    !host.is_empty() && url.bytes().all(|b| b > 0x20 && b != 0x7f)
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

    /// Python's `Checkpoint.check`: clients need a model to start from.
    pub fn check(&self) -> CheckResult {
        match self {
            Self::Ephemeral => Err(
                "model.LLM.checkpoint must not be Ephemeral (clients need a model to start from)",
            ),
            Self::Hub(r) => {
                rule(!r.repo_id.is_empty(), "model.LLM.checkpoint.Hub.repo_id must not be empty")
            }
            Self::P2P(r) => {
                rule(!r.repo_id.is_empty(), "model.LLM.checkpoint.P2P.repo_id must not be empty")
            }
            Self::Gcs(g) => {
                rule(!g.bucket.is_empty(), "model.LLM.checkpoint.Gcs.bucket must not be empty")
            }
            Self::P2PGcs(g) => {
                rule(!g.bucket.is_empty(), "model.LLM.checkpoint.P2PGcs.bucket must not be empty")
            }
            Self::Dummy(_) => Ok(()),
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

impl HttpLocation {
    /// Python's `HttpLocation.check` of each variant.
    pub fn check(&self) -> CheckResult {
        match self {
            Self::SingleUrl(url) => {
                rule(!url.is_empty(), "model.LLM.data_location.Http.location must not be empty")?;
                rule(
                    http_url_ok(url),
                    "model.LLM.data_location.Http.location.SingleUrl must be an http:// or \
                     https:// URL",
                )
            }
            Self::NumberedFiles { url_template, num_files, .. } => {
                rule(
                    http_url_ok(url_template) && url_template.matches("{}").count() == 1,
                    "model.LLM.data_location.Http.location.NumberedFiles.url_template must be an \
                     http:// or https:// URL with one {} (where the file number goes)",
                )?;
                rule(
                    *num_files >= 1,
                    "model.LLM.data_location.Http.location.NumberedFiles.num_files must be at \
                     least 1",
                )
            }
            Self::Gcp { bucket_name, .. } => rule(
                !bucket_name.is_empty()
                    && bucket_name.bytes().all(|b| {
                        b.is_ascii_lowercase()
                            || b.is_ascii_digit()
                            || matches!(b, b'.' | b'_' | b'-')
                    }),
                "model.LLM.data_location.Http.location.Gcp.bucket_name must be a GCS bucket name \
                 (lowercase letters, digits, '.', '_', '-')",
            ),
        }
    }
}

impl DataLocation {
    /// Python's `DataLocation.check` of each variant: strings not empty, addresses well formed.
    pub fn check(&self) -> CheckResult {
        match self {
            Self::Dummy => Ok(()),
            Self::Server(address) => {
                rule(!address.is_empty(), "model.LLM.data_location.Server must not be empty")?;
                rule(
                    server_address_ok(address),
                    "model.LLM.data_location.Server must be host:port with a port in 1-65535 \
                     (an IPv6 address in brackets)",
                )
            }
            Self::Local(path) => {
                rule(!path.is_empty(), "model.LLM.data_location.Local must not be empty")?;
                rule(
                    !path.contains('\0'),
                    "model.LLM.data_location.Local must not contain a NUL character",
                )
            }
            Self::Http { location, .. } => location.check(),
            Self::WeightedHttp(url) => {
                rule(!url.is_empty(), "model.LLM.data_location.WeightedHttp must not be empty")?;
                rule(
                    http_url_ok(url),
                    "model.LLM.data_location.WeightedHttp must be an http:// or https:// URL",
                )
            }
            Self::Preprocessed(path) => {
                rule(!path.is_empty(), "model.LLM.data_location.Preprocessed must not be empty")
            }
        }
    }
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

impl LearningRateSchedule {
    /// Python's `LearningRateSchedule.check`: every learning rate finite and >= 0, every step
    /// count a schedule spans at least 1, then WarmupStableDecay's ordering.
    pub fn check(&self) -> CheckResult {
        match *self {
            Self::Constant { base_lr, warmup_init_lr, .. } => {
                lr(base_lr, "model.LLM.lr_schedule.Constant.base_lr must be a finite number >= 0")?;
                lr(
                    warmup_init_lr,
                    "model.LLM.lr_schedule.Constant.warmup_init_lr must be a finite number >= 0",
                )
            }
            Self::Linear { base_lr, warmup_init_lr, total_steps, final_lr, .. } => {
                lr(base_lr, "model.LLM.lr_schedule.Linear.base_lr must be a finite number >= 0")?;
                lr(
                    warmup_init_lr,
                    "model.LLM.lr_schedule.Linear.warmup_init_lr must be a finite number >= 0",
                )?;
                lr(final_lr, "model.LLM.lr_schedule.Linear.final_lr must be a finite number >= 0")?;
                rule(
                    total_steps >= 1,
                    "model.LLM.lr_schedule.Linear.total_steps must be at least 1",
                )
            }
            Self::Cosine { base_lr, warmup_init_lr, total_steps, final_lr, .. } => {
                lr(base_lr, "model.LLM.lr_schedule.Cosine.base_lr must be a finite number >= 0")?;
                lr(
                    warmup_init_lr,
                    "model.LLM.lr_schedule.Cosine.warmup_init_lr must be a finite number >= 0",
                )?;
                lr(final_lr, "model.LLM.lr_schedule.Cosine.final_lr must be a finite number >= 0")?;
                rule(
                    total_steps >= 1,
                    "model.LLM.lr_schedule.Cosine.total_steps must be at least 1",
                )
            }
            Self::WarmupStableDecay {
                base_lr,
                warmup_init_lr,
                cosine_decay_final_lr,
                linear_decay_final_lr,
                ..
            } => {
                lr(
                    base_lr,
                    "model.LLM.lr_schedule.WarmupStableDecay.base_lr must be a finite number >= 0",
                )?;
                lr(
                    warmup_init_lr,
                    "model.LLM.lr_schedule.WarmupStableDecay.warmup_init_lr must be a finite \
                     number >= 0",
                )?;
                lr(
                    cosine_decay_final_lr,
                    "model.LLM.lr_schedule.WarmupStableDecay.cosine_decay_final_lr must be a \
                     finite number >= 0",
                )?;
                lr(
                    linear_decay_final_lr,
                    "model.LLM.lr_schedule.WarmupStableDecay.linear_decay_final_lr must be a \
                     finite number >= 0",
                )?;
                rule(
                    linear_decay_final_lr <= cosine_decay_final_lr
                        && cosine_decay_final_lr <= base_lr,
                    "model.LLM.lr_schedule.WarmupStableDecay: need linear_decay_final_lr <= \
                     cosine_decay_final_lr <= base_lr",
                )
            }
        }
    }
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
    // H inner AdamW steps per round, then an error-feedback chunked top-k of the
    // pseudo-gradient applied by an outer step (docs/distro.md, "SparseLoCo").
    SparseLoCo {
        betas: [f32; 2],
        weight_decay: f32,
        eps: f32,
        clip_grad_norm: Option<f32>,
        inner_steps: u8,
        outer_lr: f32,
        outer_momentum: f32,
        topk_chunk: u16,
        topk: u16,
        value_bits: u8,
        error_decay: f32,
    },
}

/// Most inner steps per round of `OptimizerDefinition::SparseLoCo` (Python's
/// `SPARSELOCO_MAX_INNER_STEPS`).
pub const SPARSELOCO_MAX_INNER_STEPS: u8 = 64;

impl OptimizerDefinition {
    /// Python's `OptimizerDefinition.check` of each variant (the f32 fields as stored).
    pub fn check(&self) -> CheckResult {
        match *self {
            Self::Dummy => Err("model.LLM.optimizer must not be Dummy"),
            Self::AdamW { betas, weight_decay: wd, eps, clip_grad_norm: clip } => {
                rule(
                    betas[0].is_finite() && (0.0..1.0).contains(&betas[0]),
                    "model.LLM.optimizer.AdamW.betas[0] must be a finite number in [0, 1)",
                )?;
                rule(
                    betas[1].is_finite() && (0.0..1.0).contains(&betas[1]),
                    "model.LLM.optimizer.AdamW.betas[1] must be a finite number in [0, 1)",
                )?;
                weight_decay(
                    Some(wd),
                    "model.LLM.optimizer.AdamW.weight_decay must be a finite number >= 0",
                )?;
                rule(
                    eps.is_finite() && eps > 0.0,
                    "model.LLM.optimizer.AdamW.eps must be a finite number > 0",
                )?;
                clip_grad_norm(
                    clip,
                    "model.LLM.optimizer.AdamW.clip_grad_norm must be a finite number > 0 (leave \
                     it out to disable clipping)",
                )
            }
            Self::Distro {
                clip_grad_norm: clip,
                weight_decay: wd,
                compression_decay,
                compression_topk,
                compression_chunk,
                ..
            } => {
                rule(
                    compression_chunk > 0,
                    "model.LLM.optimizer.Distro.compression_chunk must be > 0",
                )?;
                rule(
                    compression_topk > 0,
                    "model.LLM.optimizer.Distro.compression_topk must be > 0",
                )?;
                rule(
                    compression_decay.is_finite() && (0.0..=1.0).contains(&compression_decay),
                    "model.LLM.optimizer.Distro.compression_decay must be a finite number in [0, 1]",
                )?;
                clip_grad_norm(
                    clip,
                    "model.LLM.optimizer.Distro.clip_grad_norm must be a finite number > 0 \
                     (leave it out to disable clipping)",
                )?;
                weight_decay(
                    wd,
                    "model.LLM.optimizer.Distro.weight_decay must be a finite number >= 0",
                )
            }
            Self::SparseLoCo {
                betas,
                weight_decay: wd,
                eps,
                clip_grad_norm: clip,
                inner_steps,
                outer_lr,
                outer_momentum,
                topk_chunk,
                topk,
                value_bits,
                error_decay,
            } => {
                rule(
                    betas[0].is_finite() && (0.0..1.0).contains(&betas[0]),
                    "model.LLM.optimizer.SparseLoCo.betas[0] must be a finite number in [0, 1)",
                )?;
                rule(
                    betas[1].is_finite() && (0.0..1.0).contains(&betas[1]),
                    "model.LLM.optimizer.SparseLoCo.betas[1] must be a finite number in [0, 1)",
                )?;
                weight_decay(
                    Some(wd),
                    "model.LLM.optimizer.SparseLoCo.weight_decay must be a finite number >= 0",
                )?;
                rule(
                    eps.is_finite() && eps > 0.0,
                    "model.LLM.optimizer.SparseLoCo.eps must be a finite number > 0",
                )?;
                clip_grad_norm(
                    clip,
                    "model.LLM.optimizer.SparseLoCo.clip_grad_norm must be a finite number > 0 \
                     (leave it out to disable clipping)",
                )?;
                rule(
                    (1..=SPARSELOCO_MAX_INNER_STEPS).contains(&inner_steps),
                    "model.LLM.optimizer.SparseLoCo.inner_steps must be in 1..=64",
                )?;
                rule(
                    outer_lr.is_finite() && outer_lr > 0.0,
                    "model.LLM.optimizer.SparseLoCo.outer_lr must be a finite number > 0",
                )?;
                rule(
                    outer_momentum.is_finite() && (0.0..1.0).contains(&outer_momentum),
                    "model.LLM.optimizer.SparseLoCo.outer_momentum must be a finite number in \
                     [0, 1)",
                )?;
                rule(topk_chunk > 0, "model.LLM.optimizer.SparseLoCo.topk_chunk must be > 0")?;
                rule(
                    (1..=topk_chunk).contains(&topk),
                    "model.LLM.optimizer.SparseLoCo.topk must be in 1..=topk_chunk",
                )?;
                rule(
                    value_bits == 1 || value_bits == 2,
                    "model.LLM.optimizer.SparseLoCo.value_bits must be 1 or 2",
                )?;
                rule(
                    error_decay.is_finite() && error_decay > 0.0 && error_decay <= 1.0,
                    "model.LLM.optimizer.SparseLoCo.error_decay must be a finite number in (0, 1]",
                )
            }
        }
    }
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

    /// Python's `LLM.check`, preceded by the string bounds Python's decoder enforces: each
    /// component's rules, in Python's order (the first broken rule is the one reported).
    pub fn check(&self) -> CheckResult {
        let llm = self.llm();
        llm.check_bounds()?;
        rule(llm.max_seq_len > 0, "model.LLM.max_seq_len must be greater than 0")?;
        llm.data_location.check()?;
        llm.checkpoint.check()?;
        llm.optimizer.check()?;
        llm.lr_schedule.check()
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

/// Capacity of the stored model encoding. The longest model (every string at its bound, a
/// SparseLoCo optimizer) encodes to 538 bytes (pinned by a test); the rest is headroom for new
/// variants. A new optimizer variant is a new borsh tag inside this blob, so it leaves the
/// account's size and layout version unchanged.
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
