//! The coordinator state as JSON, exactly in the shared vectors' format
//! (`psyche.coordinator.state_json.to_obj_state`, tests/vectors/README.md), and back.
//!
//! Reusable by every test of this crate (`mod common;`): vector replay, program tests, and
//! cross-language checks. Decoding is strict (missing and unknown keys are errors) but, like
//! Python, runs no config validation: crafted vector states are deliberately invalid.

#![allow(dead_code)]

use psyche_coordinator::core::*;
use serde_json::{json, Map, Value};

pub type R<T> = Result<T, String>;

// --- scalars -----------------------------------------------------------------------------------

pub fn hex_encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn hex_decode(text: &str) -> R<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return Err(format!("odd-length hex {text:?}"));
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).map_err(|e| format!("bad hex: {e}")))
        .collect()
}

pub fn hex_array<const N: usize>(v: &Value) -> R<[u8; N]> {
    let bytes = hex_decode(v.as_str().ok_or("expected a hex string")?)?;
    bytes.try_into().map_err(|b: Vec<u8>| format!("expected {N} bytes, got {}", b.len()))
}

pub fn u64_of(v: &Value) -> R<u64> {
    v.as_u64().ok_or_else(|| format!("expected a u64, got {v}"))
}

pub fn uint<T: TryFrom<u64>>(v: &Value) -> R<T> {
    T::try_from(u64_of(v)?).map_err(|_| format!("integer out of range: {v}"))
}

pub fn boolean(v: &Value) -> R<bool> {
    v.as_bool().ok_or_else(|| format!("expected a bool, got {v}"))
}

/// A number, or (JSON has none) a non-finite float written `{"$float": "nan" | "inf" | "-inf"}`
/// as `tests/vectors/config/validity.json` does.
pub fn f64_of(v: &Value) -> R<f64> {
    if let Some(special) = v.as_object().filter(|m| m.len() == 1).and_then(|m| m.get("$float")) {
        return match special.as_str() {
            Some("nan") => Ok(f64::NAN),
            Some("inf") => Ok(f64::INFINITY),
            Some("-inf") => Ok(f64::NEG_INFINITY),
            _ => Err(format!("bad $float {special}")),
        };
    }
    v.as_f64().ok_or_else(|| format!("expected a number, got {v}"))
}

pub fn f32_of(v: &Value) -> R<f32> {
    Ok(f64_of(v)? as f32)
}

/// An f32 as the f64 Python holds: the shortest decimal that round-trips the f32.
pub fn f32_json(x: f32) -> Value {
    json!(format!("{x}").parse::<f64>().expect("an f32 prints as a number"))
}

pub fn opt_f32_json(x: Option<f32>) -> Value {
    x.map_or(Value::Null, f32_json)
}

pub fn opt_f32(v: &Value) -> R<Option<f32>> {
    if v.is_null() {
        Ok(None)
    } else {
        f32_of(v).map(Some)
    }
}

pub fn string(v: &Value) -> R<String> {
    v.as_str().map(str::to_owned).ok_or_else(|| format!("expected a string, got {v}"))
}

pub fn opt_string(v: &Value) -> R<Option<String>> {
    if v.is_null() {
        Ok(None)
    } else {
        string(v).map(Some)
    }
}

/// The object `v`, which must have exactly `keys`.
pub fn table<'a>(v: &'a Value, keys: &[&str]) -> R<&'a Map<String, Value>> {
    let m = v.as_object().ok_or_else(|| format!("expected an object, got {v}"))?;
    if let Some(k) = keys.iter().find(|k| !m.contains_key(**k)) {
        return Err(format!("missing key {k}"));
    }
    if let Some(k) = m.keys().find(|k| !keys.contains(&k.as_str())) {
        return Err(format!("unknown key {k}"));
    }
    Ok(m)
}

/// serde's externally tagged enum: `"Unit"` or `{"Variant": payload}`.
pub fn tagged(v: &Value) -> R<(&str, Option<&Value>)> {
    match v {
        Value::String(s) => Ok((s.as_str(), None)),
        Value::Object(m) if m.len() == 1 => {
            let (k, inner) = m.iter().next().expect("one entry");
            Ok((k.as_str(), Some(inner)))
        }
        _ => Err(format!("expected a tagged enum, got {v}")),
    }
}

pub fn payload<'a>(tag: &str, p: Option<&'a Value>) -> R<&'a Value> {
    p.ok_or_else(|| format!("variant {tag} needs a payload"))
}

// --- identities, witnesses, clients ----------------------------------------------------------

pub fn identity_to_json(i: &NodeIdentity) -> Value {
    json!({"signer": hex_encode(&i.signer), "p2p_identity": hex_encode(&i.p2p_identity)})
}

pub fn identity_from_json(v: &Value) -> R<NodeIdentity> {
    let t = table(v, &["signer", "p2p_identity"])?;
    Ok(NodeIdentity {
        signer: hex_array(&t["signer"])?,
        p2p_identity: hex_array(&t["p2p_identity"])?,
    })
}

pub fn bloom_from_json(v: &Value) -> R<Bloom> {
    let bytes = hex_decode(v.as_str().ok_or("a bloom is a hex string")?)?;
    Bloom::from_bytes(&bytes).ok_or_else(|| format!("a bloom is 392 bytes, got {}", bytes.len()))
}

pub fn witness_to_json(w: &Witness) -> Value {
    let mut obj = json!({
        "proof": {"position": w.proof.position, "index": w.proof.index, "witness": w.proof.witness != 0},
        "participant_bloom": hex_encode(&w.participant_bloom.to_bytes()),
        "broadcast_bloom": hex_encode(&w.broadcast_bloom.to_bytes()),
    });
    // Written only when present, as Python writes it.
    let v = w.proof.verdict;
    if !v.is_empty() {
        obj["verdict"] = json!({"checked": v.checked, "mismatch": v.mismatch});
    }
    obj
}

pub fn witness_from_json(v: &Value) -> R<Witness> {
    let has_verdict = v.get("verdict").is_some();
    let keys: &[&str] = if has_verdict {
        &["proof", "participant_bloom", "broadcast_bloom", "verdict"]
    } else {
        &["proof", "participant_bloom", "broadcast_bloom"]
    };
    let t = table(v, keys)?;
    let p = table(&t["proof"], &["position", "index", "witness"])?;
    let verdict = if has_verdict {
        let d = table(&t["verdict"], &["checked", "mismatch"])?;
        let u16_of = |x: &Value| u16::try_from(u64_of(x)?).map_err(|e| e.to_string());
        Verdict { checked: u16_of(&d["checked"])?, mismatch: u16_of(&d["mismatch"])? }
    } else {
        Verdict::default()
    };
    Ok(Witness {
        proof: WitnessProof::new(
            u64_of(&p["position"])?,
            u64_of(&p["index"])?,
            boolean(&p["witness"])?,
            verdict,
        ),
        participant_bloom: bloom_from_json(&t["participant_bloom"])?,
        broadcast_bloom: bloom_from_json(&t["broadcast_bloom"])?,
    })
}

fn client_to_json(c: &Client) -> Value {
    let state = ClientState::from_u8(c.state).map_or("?", ClientState::name);
    json!({
        "id": identity_to_json(&c.id),
        "state": state,
        "exited_height": c.exited_height,
        "exited_index": c.exited_index,
    })
}

fn client_from_json(v: &Value) -> R<Client> {
    let t = table(v, &["id", "state", "exited_height", "exited_index"])?;
    let name = t["state"].as_str().ok_or("client state is a string")?;
    let state = ClientState::ALL
        .into_iter()
        .find(|s| s.name() == name)
        .ok_or_else(|| format!("unknown client state {name}"))?;
    let mut c = Client::new(identity_from_json(&t["id"])?);
    c.state = state as u8;
    c.exited_height = uint(&t["exited_height"])?;
    c.exited_index = uint(&t["exited_index"])?;
    Ok(c)
}

pub fn list(v: &Value, limit: usize) -> R<&Vec<Value>> {
    let items = v.as_array().ok_or_else(|| format!("expected an array, got {v}"))?;
    if items.len() > limit {
        return Err(format!("at most {limit} entries, got {}", items.len()));
    }
    Ok(items)
}

/// `[[start, end], ...]`.
pub fn batch_ids_to_json(batches: &[BatchIdPod]) -> Value {
    Value::Array(batches.iter().map(|b| json!([b.start, b.end])).collect())
}

pub fn batch_ids_from_json(v: &Value, limit: usize) -> R<Vec<BatchIdPod>> {
    let mut out = Vec::new();
    for b in list(v, limit)? {
        let pair = b.as_array().filter(|p| p.len() == 2).ok_or("expected [start, end]")?;
        let (start, end) = (u64_of(&pair[0])?, u64_of(&pair[1])?);
        if end < start {
            return Err(format!("interval [{start}, {end}] ends before it starts"));
        }
        out.push(BatchIdPod { start, end });
    }
    Ok(out)
}

fn round_to_json(r: &Round) -> Value {
    json!({
        "witnesses": r.witnesses().iter().map(witness_to_json).collect::<Vec<_>>(),
        "data_index": r.data_index,
        "random_seed": r.random_seed,
        "height": r.height,
        "clients_len": r.clients_len,
        "tie_breaker_tasks": r.tie_breaker_tasks,
        "retries": batch_ids_to_json(r.retries()),
    })
}

fn round_from_json(v: &Value, r: &mut Round) -> R<()> {
    let keys = [
        "witnesses",
        "data_index",
        "random_seed",
        "height",
        "clients_len",
        "tie_breaker_tasks",
        "retries",
    ];
    let t = table(v, &keys)?;
    r.clear_witnesses();
    for w in list(&t["witnesses"], MAX_WITNESSES)? {
        r.push_witness(&witness_from_json(w)?);
    }
    r.data_index = u64_of(&t["data_index"])?;
    r.random_seed = u64_of(&t["random_seed"])?;
    r.height = uint(&t["height"])?;
    r.clients_len = uint(&t["clients_len"])?;
    r.tie_breaker_tasks = uint(&t["tie_breaker_tasks"])?;
    r.set_retries(&batch_ids_from_json(&t["retries"], MAX_ROUND_RETRIES)?);
    Ok(())
}

// --- config, progress --------------------------------------------------------------------------

const CONFIG_KEYS: [&str; 14] = [
    "warmup_time",
    "cooldown_time",
    "max_round_train_time",
    "round_witness_time",
    "global_batch_size_warmup_tokens",
    "epoch_time",
    "total_steps",
    "init_min_clients",
    "min_clients",
    "witness_nodes",
    "global_batch_size_start",
    "global_batch_size_end",
    "verification_percent",
    "waiting_for_members_extra_time",
];

pub fn config_to_json(c: &CoordinatorConfig) -> Value {
    json!({
        "warmup_time": c.warmup_time,
        "cooldown_time": c.cooldown_time,
        "max_round_train_time": c.max_round_train_time,
        "round_witness_time": c.round_witness_time,
        "global_batch_size_warmup_tokens": c.global_batch_size_warmup_tokens,
        "epoch_time": c.epoch_time,
        "total_steps": c.total_steps,
        "init_min_clients": c.init_min_clients,
        "min_clients": c.min_clients,
        "witness_nodes": c.witness_nodes,
        "global_batch_size_start": c.global_batch_size_start,
        "global_batch_size_end": c.global_batch_size_end,
        "verification_percent": c.verification_percent,
        "waiting_for_members_extra_time": c.waiting_for_members_extra_time,
    })
}

pub fn config_from_json(v: &Value) -> R<CoordinatorConfig> {
    let t = table(v, &CONFIG_KEYS)?;
    Ok(CoordinatorConfig {
        warmup_time: uint(&t["warmup_time"])?,
        cooldown_time: uint(&t["cooldown_time"])?,
        max_round_train_time: uint(&t["max_round_train_time"])?,
        round_witness_time: uint(&t["round_witness_time"])?,
        global_batch_size_warmup_tokens: uint(&t["global_batch_size_warmup_tokens"])?,
        epoch_time: uint(&t["epoch_time"])?,
        total_steps: uint(&t["total_steps"])?,
        init_min_clients: uint(&t["init_min_clients"])?,
        min_clients: uint(&t["min_clients"])?,
        witness_nodes: uint(&t["witness_nodes"])?,
        global_batch_size_start: uint(&t["global_batch_size_start"])?,
        global_batch_size_end: uint(&t["global_batch_size_end"])?,
        verification_percent: uint(&t["verification_percent"])?,
        waiting_for_members_extra_time: uint(&t["waiting_for_members_extra_time"])?,
    })
}

// --- model -------------------------------------------------------------------------------------

#[allow(unused_imports)]
pub use super::model_json::{
    checkpoint_from_json, checkpoint_to_json, model_from_json, model_to_json,
};

// --- whole state -------------------------------------------------------------------------------

pub fn state_to_json(s: &CoordinatorState) -> Value {
    let es = &s.epoch_state;
    let model = s.model().map_or(Value::Null, |m| model_to_json(&m));
    json!({
        "run_id": s.run_id.as_str().unwrap_or("?"),
        "run_state": s.state().name(),
        "config": config_to_json(&s.config),
        "model": model,
        "progress": {
            "epoch": s.progress.epoch,
            "step": s.progress.step,
            "epoch_start_data_index": s.progress.epoch_start_data_index,
        },
        "epoch_state": {
            "rounds": es.rounds.iter().map(round_to_json).collect::<Vec<_>>(),
            "clients": es.clients().iter().map(client_to_json).collect::<Vec<_>>(),
            "exited_clients": es.exited_clients().iter().map(client_to_json).collect::<Vec<_>>(),
            "rounds_head": es.rounds_head,
            "start_step": es.start_step,
            "last_step": es.last_step,
            "start_timestamp": es.start_timestamp,
            "first_round": es.first_round != 0,
            "cold_start_epoch": es.cold_start_epoch != 0,
            "lost": batch_ids_to_json(es.lost()),
        },
        "run_state_start_unix_timestamp": s.run_state_start_unix_timestamp,
        "pending_pause": s.pending_pause != 0,
    })
}

/// Overwrites `s` (zeroing it first) with the state `v`.
pub fn state_from_json(v: &Value, s: &mut CoordinatorState) -> R<()> {
    let keys = [
        "run_id",
        "run_state",
        "config",
        "model",
        "progress",
        "epoch_state",
        "run_state_start_unix_timestamp",
        "pending_pause",
    ];
    let t = table(v, &keys)?;
    bytemuck::bytes_of_mut(s).fill(0);
    let run_id = t["run_id"].as_str().ok_or("run_id is a string")?;
    s.run_id = FixedString32::new(run_id).ok_or("run_id is at most 32 bytes")?;
    let name = t["run_state"].as_str().ok_or("run_state is a string")?;
    let state = RunState::ALL
        .into_iter()
        .find(|r| r.name() == name)
        .ok_or_else(|| format!("unknown run state {name}"))?;
    s.run_state = state as u8;
    s.config = config_from_json(&t["config"])?;
    if !s.model.store(&model_from_json(&t["model"])?) {
        return Err("the model does not fit its blob".into());
    }
    let p = table(&t["progress"], &["epoch", "step", "epoch_start_data_index"])?;
    s.progress =
        Progress::new(uint(&p["epoch"])?, uint(&p["step"])?, u64_of(&p["epoch_start_data_index"])?);
    s.run_state_start_unix_timestamp = u64_of(&t["run_state_start_unix_timestamp"])?;
    s.pending_pause = u8::from(boolean(&t["pending_pause"])?);
    let ek = [
        "rounds",
        "clients",
        "exited_clients",
        "rounds_head",
        "start_step",
        "last_step",
        "start_timestamp",
        "first_round",
        "cold_start_epoch",
        "lost",
    ];
    let e = table(&t["epoch_state"], &ek)?;
    let es = &mut s.epoch_state;
    let rounds = list(&e["rounds"], NUM_STORED_ROUNDS)?;
    if rounds.len() != NUM_STORED_ROUNDS {
        return Err(format!("expected {NUM_STORED_ROUNDS} rounds"));
    }
    for (r, rv) in es.rounds.iter_mut().zip(rounds) {
        round_from_json(rv, r)?;
    }
    let clients = list(&e["clients"], MAX_CLIENTS)?;
    for (i, c) in clients.iter().enumerate() {
        es.clients[i] = client_from_json(c)?;
    }
    es.num_clients = clients.len() as u32;
    let exited = list(&e["exited_clients"], MAX_EXITED_CLIENTS)?;
    for (i, c) in exited.iter().enumerate() {
        es.exited_clients[i] = client_from_json(c)?;
    }
    es.num_exited_clients = exited.len() as u32;
    es.rounds_head = uint(&e["rounds_head"])?;
    if es.rounds_head as usize >= NUM_STORED_ROUNDS {
        return Err("rounds_head out of range".into());
    }
    es.start_step = uint(&e["start_step"])?;
    es.last_step = uint(&e["last_step"])?;
    es.start_timestamp = u64_of(&e["start_timestamp"])?;
    es.first_round = u8::from(boolean(&e["first_round"])?);
    es.cold_start_epoch = u8::from(boolean(&e["cold_start_epoch"])?);
    for b in batch_ids_from_json(&e["lost"], MAX_LOST_BATCHES)? {
        es.push_lost(b.into());
    }
    Ok(())
}

/// A zeroed state on the heap (it is ~140 KB: never on the stack), filled from `v`.
pub fn boxed_state_from_json(v: &Value) -> R<Box<CoordinatorState>> {
    let mut s: Box<CoordinatorState> = bytemuck::zeroed_box();
    state_from_json(v, &mut s)?;
    Ok(s)
}

pub fn health_check_from_json(v: &Value) -> R<HealthCheck> {
    let t = table(v, &["id", "proof"])?;
    let p = table(&t["proof"], &["committee", "position", "index"])?;
    let committee = match p["committee"].as_str() {
        Some("TieBreaker") => Committee::TieBreaker,
        Some("Verifier") => Committee::Verifier,
        Some("Trainer") => Committee::Trainer,
        other => return Err(format!("unknown committee {other:?}")),
    };
    Ok(HealthCheck {
        id: identity_from_json(&t["id"])?,
        proof: CommitteeProof {
            committee,
            position: u64_of(&p["position"])?,
            index: u64_of(&p["index"])?,
        },
    })
}

/// The first difference between two JSON values (`None` if equal). Integers compare exactly;
/// when either side is a float both compare as f64 (Python writes floats by `repr`).
pub fn json_diff(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let same = match (x.as_u64(), y.as_u64()) {
                (Some(p), Some(q)) => p == q,
                _ => x.as_f64() == y.as_f64(),
            };
            (!same).then(|| format!("{path}: {a} != {b}"))
        }
        (Value::Object(x), Value::Object(y)) => {
            if let Some(k) = x.keys().find(|k| !y.contains_key(*k)) {
                return Some(format!("{path}.{k}: only on the left"));
            }
            if let Some(k) = y.keys().find(|k| !x.contains_key(*k)) {
                return Some(format!("{path}.{k}: only on the right"));
            }
            x.iter().find_map(|(k, v)| json_diff(v, &y[k], &format!("{path}.{k}")))
        }
        (Value::Array(x), Value::Array(y)) => {
            if x.len() != y.len() {
                return Some(format!("{path}: length {} != {}", x.len(), y.len()));
            }
            x.iter()
                .zip(y)
                .enumerate()
                .find_map(|(i, (p, q))| json_diff(p, q, &format!("{path}[{i}]")))
        }
        _ => (a != b).then(|| format!("{path}: {a} != {b}")),
    }
}
