//! `Model` and `Checkpoint` as serde's externally tagged JSON
//! (`psyche.protocol.strict_obj.to_obj`).

use psyche_coordinator::core::model::{
    Checkpoint, DataLocation, GcsRepo, HttpLocation, HubRepo, LLMArchitecture, LLMDataType,
    LearningRateSchedule, Model, OptimizerDefinition, Shuffle, TokenSize, LLM,
};
use serde_json::{json, Value};

use super::json::{
    f32_json, f32_of, f64_of, opt_f32, opt_f32_json, opt_string, payload, string, table, tagged,
    uint, R,
};

fn hub_to_json(r: &HubRepo) -> Value {
    json!({"repo_id": r.repo_id, "revision": r.revision})
}

fn hub_from_json(v: &Value) -> R<HubRepo> {
    let t = table(v, &["repo_id", "revision"])?;
    Ok(HubRepo { repo_id: string(&t["repo_id"])?, revision: opt_string(&t["revision"])? })
}

fn gcs_to_json(g: &GcsRepo) -> Value {
    json!({"bucket": g.bucket, "prefix": g.prefix})
}

fn gcs_from_json(v: &Value) -> R<GcsRepo> {
    let t = table(v, &["bucket", "prefix"])?;
    Ok(GcsRepo { bucket: string(&t["bucket"])?, prefix: opt_string(&t["prefix"])? })
}

pub fn checkpoint_to_json(c: &Checkpoint) -> Value {
    match c {
        Checkpoint::Ephemeral => json!("Ephemeral"),
        Checkpoint::Dummy(r) => json!({"Dummy": hub_to_json(r)}),
        Checkpoint::Hub(r) => json!({"Hub": hub_to_json(r)}),
        Checkpoint::P2P(r) => json!({"P2P": hub_to_json(r)}),
        Checkpoint::Gcs(g) => json!({"Gcs": gcs_to_json(g)}),
        Checkpoint::P2PGcs(g) => json!({"P2PGcs": gcs_to_json(g)}),
    }
}

pub fn checkpoint_from_json(v: &Value) -> R<Checkpoint> {
    let (tag, p) = tagged(v)?;
    Ok(match tag {
        "Ephemeral" if p.is_none() => Checkpoint::Ephemeral,
        "Dummy" => Checkpoint::Dummy(hub_from_json(payload(tag, p)?)?),
        "Hub" => Checkpoint::Hub(hub_from_json(payload(tag, p)?)?),
        "P2P" => Checkpoint::P2P(hub_from_json(payload(tag, p)?)?),
        "Gcs" => Checkpoint::Gcs(gcs_from_json(payload(tag, p)?)?),
        "P2PGcs" => Checkpoint::P2PGcs(gcs_from_json(payload(tag, p)?)?),
        _ => return Err(format!("unknown checkpoint {v}")),
    })
}

fn http_location_to_json(l: &HttpLocation) -> Value {
    match l {
        HttpLocation::SingleUrl(url) => json!({"SingleUrl": url}),
        HttpLocation::NumberedFiles { url_template, start_index, n_left_pad_zeros, num_files } => {
            json!({"NumberedFiles": {
                "url_template": url_template, "start_index": start_index,
                "n_left_pad_zeros": n_left_pad_zeros, "num_files": num_files,
            }})
        }
        HttpLocation::Gcp { bucket_name, filter_directory } => {
            json!({"Gcp": {"bucket_name": bucket_name, "filter_directory": filter_directory}})
        }
    }
}

fn http_location_from_json(v: &Value) -> R<HttpLocation> {
    let (tag, p) = tagged(v)?;
    Ok(match tag {
        "SingleUrl" => HttpLocation::SingleUrl(string(payload(tag, p)?)?),
        "NumberedFiles" => {
            let keys = ["url_template", "start_index", "n_left_pad_zeros", "num_files"];
            let t = table(payload(tag, p)?, &keys)?;
            HttpLocation::NumberedFiles {
                url_template: string(&t["url_template"])?,
                start_index: uint(&t["start_index"])?,
                n_left_pad_zeros: uint(&t["n_left_pad_zeros"])?,
                num_files: uint(&t["num_files"])?,
            }
        }
        "Gcp" => {
            let t = table(payload(tag, p)?, &["bucket_name", "filter_directory"])?;
            HttpLocation::Gcp {
                bucket_name: string(&t["bucket_name"])?,
                filter_directory: string(&t["filter_directory"])?,
            }
        }
        _ => return Err(format!("unknown http location {v}")),
    })
}

fn data_location_to_json(d: &DataLocation) -> Value {
    match d {
        DataLocation::Dummy => json!("Dummy"),
        DataLocation::Server(s) => json!({"Server": s}),
        DataLocation::Local(s) => json!({"Local": s}),
        DataLocation::Http { location, token_size_in_bytes, shuffle } => json!({"Http": {
            "location": http_location_to_json(location),
            "token_size_in_bytes": match token_size_in_bytes {
                TokenSize::TwoBytes => "TwoBytes",
                TokenSize::FourBytes => "FourBytes",
            },
            "shuffle": match shuffle {
                Shuffle::DontShuffle => json!("DontShuffle"),
                Shuffle::Seeded(seed) => json!({"Seeded": seed.to_vec()}),
            },
        }}),
        DataLocation::WeightedHttp(s) => json!({"WeightedHttp": s}),
        DataLocation::Preprocessed(s) => json!({"Preprocessed": s}),
    }
}

fn data_location_from_json(v: &Value) -> R<DataLocation> {
    let (tag, p) = tagged(v)?;
    Ok(match tag {
        "Dummy" if p.is_none() => DataLocation::Dummy,
        "Server" => DataLocation::Server(string(payload(tag, p)?)?),
        "Local" => DataLocation::Local(string(payload(tag, p)?)?),
        "WeightedHttp" => DataLocation::WeightedHttp(string(payload(tag, p)?)?),
        "Preprocessed" => DataLocation::Preprocessed(string(payload(tag, p)?)?),
        "Http" => {
            let t = table(payload(tag, p)?, &["location", "token_size_in_bytes", "shuffle"])?;
            let token_size_in_bytes = match t["token_size_in_bytes"].as_str() {
                Some("TwoBytes") => TokenSize::TwoBytes,
                Some("FourBytes") => TokenSize::FourBytes,
                _ => return Err(format!("bad token size {}", t["token_size_in_bytes"])),
            };
            let shuffle = match tagged(&t["shuffle"])? {
                ("DontShuffle", None) => Shuffle::DontShuffle,
                ("Seeded", Some(seed)) => {
                    let bytes = seed.as_array().ok_or("Seeded is an array")?;
                    let bytes: Vec<u8> = bytes.iter().map(uint).collect::<R<_>>()?;
                    Shuffle::Seeded(bytes.try_into().map_err(|_| "Seeded needs 32 bytes")?)
                }
                _ => return Err(format!("bad shuffle {}", t["shuffle"])),
            };
            DataLocation::Http {
                location: http_location_from_json(&t["location"])?,
                token_size_in_bytes,
                shuffle,
            }
        }
        _ => return Err(format!("unknown data location {v}")),
    })
}

fn lr_to_json(l: &LearningRateSchedule) -> Value {
    match *l {
        LearningRateSchedule::Constant { base_lr, warmup_steps, warmup_init_lr } => json!({
            "Constant": {"base_lr": base_lr, "warmup_steps": warmup_steps,
                         "warmup_init_lr": warmup_init_lr}}),
        LearningRateSchedule::Linear {
            base_lr,
            warmup_steps,
            warmup_init_lr,
            total_steps,
            final_lr,
        } => json!({"Linear": {
            "base_lr": base_lr, "warmup_steps": warmup_steps, "warmup_init_lr": warmup_init_lr,
            "total_steps": total_steps, "final_lr": final_lr}}),
        LearningRateSchedule::Cosine {
            base_lr,
            warmup_steps,
            warmup_init_lr,
            total_steps,
            final_lr,
        } => json!({"Cosine": {
            "base_lr": base_lr, "warmup_steps": warmup_steps, "warmup_init_lr": warmup_init_lr,
            "total_steps": total_steps, "final_lr": final_lr}}),
        LearningRateSchedule::WarmupStableDecay {
            base_lr,
            warmup_init_lr,
            cosine_decay_final_lr,
            linear_decay_final_lr,
            warmup_steps,
            stable_steps,
            cosine_decay_steps,
            linear_decay_steps,
        } => json!({"WarmupStableDecay": {
            "base_lr": base_lr, "warmup_init_lr": warmup_init_lr,
            "cosine_decay_final_lr": cosine_decay_final_lr,
            "linear_decay_final_lr": linear_decay_final_lr, "warmup_steps": warmup_steps,
            "stable_steps": stable_steps, "cosine_decay_steps": cosine_decay_steps,
            "linear_decay_steps": linear_decay_steps}}),
    }
}

fn lr_from_json(v: &Value) -> R<LearningRateSchedule> {
    let (tag, p) = tagged(v)?;
    let p = payload(tag, p)?;
    Ok(match tag {
        "Constant" => {
            let t = table(p, &["base_lr", "warmup_steps", "warmup_init_lr"])?;
            LearningRateSchedule::Constant {
                base_lr: f64_of(&t["base_lr"])?,
                warmup_steps: uint(&t["warmup_steps"])?,
                warmup_init_lr: f64_of(&t["warmup_init_lr"])?,
            }
        }
        "Linear" | "Cosine" => {
            let keys = ["base_lr", "warmup_steps", "warmup_init_lr", "total_steps", "final_lr"];
            let t = table(p, &keys)?;
            let (base_lr, warmup_steps) = (f64_of(&t["base_lr"])?, uint(&t["warmup_steps"])?);
            let warmup_init_lr = f64_of(&t["warmup_init_lr"])?;
            let (total_steps, final_lr) = (uint(&t["total_steps"])?, f64_of(&t["final_lr"])?);
            if tag == "Linear" {
                LearningRateSchedule::Linear {
                    base_lr,
                    warmup_steps,
                    warmup_init_lr,
                    total_steps,
                    final_lr,
                }
            } else {
                LearningRateSchedule::Cosine {
                    base_lr,
                    warmup_steps,
                    warmup_init_lr,
                    total_steps,
                    final_lr,
                }
            }
        }
        "WarmupStableDecay" => {
            let keys = [
                "base_lr",
                "warmup_init_lr",
                "cosine_decay_final_lr",
                "linear_decay_final_lr",
                "warmup_steps",
                "stable_steps",
                "cosine_decay_steps",
                "linear_decay_steps",
            ];
            let t = table(p, &keys)?;
            LearningRateSchedule::WarmupStableDecay {
                base_lr: f64_of(&t["base_lr"])?,
                warmup_init_lr: f64_of(&t["warmup_init_lr"])?,
                cosine_decay_final_lr: f64_of(&t["cosine_decay_final_lr"])?,
                linear_decay_final_lr: f64_of(&t["linear_decay_final_lr"])?,
                warmup_steps: uint(&t["warmup_steps"])?,
                stable_steps: uint(&t["stable_steps"])?,
                cosine_decay_steps: uint(&t["cosine_decay_steps"])?,
                linear_decay_steps: uint(&t["linear_decay_steps"])?,
            }
        }
        _ => return Err(format!("unknown lr schedule {v}")),
    })
}

fn optimizer_to_json(o: &OptimizerDefinition) -> Value {
    match *o {
        OptimizerDefinition::Dummy => json!("Dummy"),
        OptimizerDefinition::AdamW { betas, weight_decay, eps, clip_grad_norm } => json!({
            "AdamW": {"betas": [f32_json(betas[0]), f32_json(betas[1])],
                      "weight_decay": f32_json(weight_decay), "eps": f32_json(eps),
                      "clip_grad_norm": opt_f32_json(clip_grad_norm)}}),
        OptimizerDefinition::Distro {
            clip_grad_norm,
            weight_decay,
            compression_decay,
            compression_topk,
            compression_chunk,
            quantize_1bit,
        } => json!({"Distro": {
            "clip_grad_norm": opt_f32_json(clip_grad_norm),
            "weight_decay": opt_f32_json(weight_decay),
            "compression_decay": f32_json(compression_decay),
            "compression_topk": compression_topk, "compression_chunk": compression_chunk,
            "quantize_1bit": quantize_1bit}}),
        OptimizerDefinition::SparseLoCo {
            betas,
            weight_decay,
            eps,
            clip_grad_norm,
            inner_steps,
            outer_lr,
            outer_momentum,
            topk_chunk,
            topk,
            value_bits,
            error_decay,
        } => json!({"SparseLoCo": {
            "betas": [f32_json(betas[0]), f32_json(betas[1])],
            "weight_decay": f32_json(weight_decay), "eps": f32_json(eps),
            "clip_grad_norm": opt_f32_json(clip_grad_norm), "inner_steps": inner_steps,
            "outer_lr": f32_json(outer_lr), "outer_momentum": f32_json(outer_momentum),
            "topk_chunk": topk_chunk, "topk": topk, "value_bits": value_bits,
            "error_decay": f32_json(error_decay)}}),
    }
}

fn optimizer_from_json(v: &Value) -> R<OptimizerDefinition> {
    let (tag, p) = tagged(v)?;
    Ok(match tag {
        "Dummy" if p.is_none() => OptimizerDefinition::Dummy,
        "AdamW" => {
            let t = table(payload(tag, p)?, &["betas", "weight_decay", "eps", "clip_grad_norm"])?;
            let betas = t["betas"].as_array().filter(|b| b.len() == 2).ok_or("two betas")?;
            OptimizerDefinition::AdamW {
                betas: [f32_of(&betas[0])?, f32_of(&betas[1])?],
                weight_decay: f32_of(&t["weight_decay"])?,
                eps: f32_of(&t["eps"])?,
                clip_grad_norm: opt_f32(&t["clip_grad_norm"])?,
            }
        }
        "Distro" => {
            let keys = [
                "clip_grad_norm",
                "weight_decay",
                "compression_decay",
                "compression_topk",
                "compression_chunk",
                "quantize_1bit",
            ];
            let t = table(payload(tag, p)?, &keys)?;
            OptimizerDefinition::Distro {
                clip_grad_norm: opt_f32(&t["clip_grad_norm"])?,
                weight_decay: opt_f32(&t["weight_decay"])?,
                compression_decay: f32_of(&t["compression_decay"])?,
                compression_topk: uint(&t["compression_topk"])?,
                compression_chunk: uint(&t["compression_chunk"])?,
                quantize_1bit: t["quantize_1bit"].as_bool().ok_or("quantize_1bit is a bool")?,
            }
        }
        "SparseLoCo" => {
            let keys = [
                "betas",
                "weight_decay",
                "eps",
                "clip_grad_norm",
                "inner_steps",
                "outer_lr",
                "outer_momentum",
                "topk_chunk",
                "topk",
                "value_bits",
                "error_decay",
            ];
            let t = table(payload(tag, p)?, &keys)?;
            let betas = t["betas"].as_array().filter(|b| b.len() == 2).ok_or("two betas")?;
            OptimizerDefinition::SparseLoCo {
                betas: [f32_of(&betas[0])?, f32_of(&betas[1])?],
                weight_decay: f32_of(&t["weight_decay"])?,
                eps: f32_of(&t["eps"])?,
                clip_grad_norm: opt_f32(&t["clip_grad_norm"])?,
                inner_steps: uint(&t["inner_steps"])?,
                outer_lr: f32_of(&t["outer_lr"])?,
                outer_momentum: f32_of(&t["outer_momentum"])?,
                topk_chunk: uint(&t["topk_chunk"])?,
                topk: uint(&t["topk"])?,
                value_bits: uint(&t["value_bits"])?,
                error_decay: f32_of(&t["error_decay"])?,
            }
        }
        _ => return Err(format!("unknown optimizer {v}")),
    })
}

const ARCHS: [(LLMArchitecture, &str); 4] = [
    (LLMArchitecture::HfLlama, "HfLlama"),
    (LLMArchitecture::HfDeepseek, "HfDeepseek"),
    (LLMArchitecture::HfAuto, "HfAuto"),
    (LLMArchitecture::Torchtitan, "Torchtitan"),
];
const DATA_TYPES: [(LLMDataType, &str); 2] =
    [(LLMDataType::Pretraining, "Pretraining"), (LLMDataType::Finetuning, "Finetuning")];

fn name_of<T: PartialEq + Copy>(table: &[(T, &'static str)], v: T) -> &'static str {
    table.iter().find(|(x, _)| *x == v).map_or("?", |(_, n)| n)
}

fn value_of<T: Copy>(table: &[(T, &'static str)], v: &Value) -> R<T> {
    let name = v.as_str().ok_or_else(|| format!("expected a name, got {v}"))?;
    table.iter().find(|(_, n)| *n == name).map(|(x, _)| *x).ok_or(format!("unknown {name}"))
}

pub fn model_to_json(m: &Model) -> Value {
    let l = m.llm();
    json!({"LLM": {
        "max_seq_len": l.max_seq_len,
        "cold_start_warmup_steps": l.cold_start_warmup_steps,
        "architecture": name_of(&ARCHS, l.architecture),
        "checkpoint": checkpoint_to_json(&l.checkpoint),
        "data_type": name_of(&DATA_TYPES, l.data_type),
        "data_location": data_location_to_json(&l.data_location),
        "lr_schedule": lr_to_json(&l.lr_schedule),
        "optimizer": optimizer_to_json(&l.optimizer),
    }})
}

pub fn model_from_json(v: &Value) -> R<Model> {
    let (tag, p) = tagged(v)?;
    if tag != "LLM" {
        return Err(format!("unknown model {tag}"));
    }
    let keys = [
        "max_seq_len",
        "cold_start_warmup_steps",
        "architecture",
        "checkpoint",
        "data_type",
        "data_location",
        "lr_schedule",
        "optimizer",
    ];
    let t = table(payload(tag, p)?, &keys)?;
    Ok(Model::LLM(LLM {
        max_seq_len: uint(&t["max_seq_len"])?,
        cold_start_warmup_steps: uint(&t["cold_start_warmup_steps"])?,
        architecture: value_of(&ARCHS, &t["architecture"])?,
        checkpoint: checkpoint_from_json(&t["checkpoint"])?,
        data_type: value_of(&DATA_TYPES, &t["data_type"])?,
        data_location: data_location_from_json(&t["data_location"])?,
        lr_schedule: lr_from_json(&t["lr_schedule"])?,
        optimizer: optimizer_from_json(&t["optimizer"])?,
    }))
}
