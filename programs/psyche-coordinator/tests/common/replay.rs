//! Replays a coordinator scenario file (`tests/vectors/coordinator/*.json`, and the
//! verification scenarios under `tests/vectors/verification/`) through the Rust core, comparing
//! each outcome and each whole resulting state with what the Python coordinator produced.

use super::json::{
    boxed_state_from_json, checkpoint_from_json, health_check_from_json, identity_from_json,
    json_diff, state_to_json, table, u64_of, witness_from_json, R,
};
use psyche_coordinator::core::*;
use serde_json::Value;

fn tick_name(r: TickResult) -> String {
    match r {
        TickResult::Ticked => "Ticked".into(),
        TickResult::EpochEnd(ok) => format!("EpochEnd({ok})"),
    }
}

/// Applies one event; the outer `Err` is a malformed event, the inner one the coordinator's.
fn apply(s: &mut CoordinatorState, ev: &Value) -> R<Result<String, CoordinatorError>> {
    let op = ev["op"].as_str().ok_or("event without op")?;
    let ok = |_: ()| "Ok".to_string();
    Ok(match op {
        "tick" => {
            let t = table(ev, &["op", "now", "seed", "pending"])?;
            let pending = match &t["pending"] {
                Value::Null => None,
                Value::Array(items) => {
                    Some(items.iter().map(identity_from_json).collect::<R<Vec<_>>>()?)
                }
                other => return Err(format!("bad pending {other}")),
            };
            let (now, seed) = (u64_of(&t["now"])?, u64_of(&t["seed"])?);
            s.tick(pending.as_deref(), now, seed).map(tick_name)
        }
        "warmup_witness" => {
            let t = table(ev, &["op", "now", "seed", "from", "witness"])?;
            let (from, w) = (identity_from_json(&t["from"])?, witness_from_json(&t["witness"])?);
            s.warmup_witness(&from, &w, u64_of(&t["now"])?, u64_of(&t["seed"])?).map(ok)
        }
        "witness" => {
            let t = table(ev, &["op", "now", "from", "witness"])?;
            let (from, w) = (identity_from_json(&t["from"])?, witness_from_json(&t["witness"])?);
            s.witness(&from, &w, u64_of(&t["now"])?).map(ok)
        }
        "health_check" => {
            let t = table(ev, &["op", "from", "checks"])?;
            let checks = t["checks"].as_array().ok_or("checks is an array")?;
            let checks = checks.iter().map(health_check_from_json).collect::<R<Vec<_>>>()?;
            s.health_check(&identity_from_json(&t["from"])?, &checks)
                .map(|n| format!("Dropped({n})"))
        }
        "checkpoint" => {
            let t = table(ev, &["op", "now", "from", "index", "checkpoint"])?;
            let ck = checkpoint_from_json(&t["checkpoint"])?;
            let (from, index) = (identity_from_json(&t["from"])?, u64_of(&t["index"])?);
            s.checkpoint(&from, index, &ck, u64_of(&t["now"])?).map(tick_name)
        }
        "withdraw" => s.withdraw(u64_of(&table(ev, &["op", "index"])?["index"])?).map(ok),
        "pause" => s.pause(u64_of(&table(ev, &["op", "now"])?["now"])?).map(ok),
        "resume" => s.resume(u64_of(&table(ev, &["op", "now"])?["now"])?).map(ok),
        _ => return Err(format!("unknown op {op}")),
    })
}

/// Replays one scenario file; returns the number of steps or the first mismatch.
pub fn replay(doc: &Value) -> R<usize> {
    let initial = &doc["initial"];
    let mut s = boxed_state_from_json(initial)?;
    // The decoder must be the exact inverse of the encoder.
    if let Some(d) = json_diff(&state_to_json(&s), initial, "initial") {
        return Err(format!("state codec round trip: {d}"));
    }
    let mut expected = initial.clone();
    let steps = doc["steps"].as_array().ok_or("steps is an array")?;
    for (i, step) in steps.iter().enumerate() {
        let before_bytes = bytemuck::bytes_of(&*s).to_vec();
        let got = apply(&mut s, &step["event"]).map_err(|e| format!("step {i}: {e}"))?;
        let want = match (step.get("ok"), step.get("error")) {
            (Some(v), None) => Ok(v.as_str().ok_or("ok is a string")?.to_string()),
            (None, Some(v)) => Err(v.as_str().ok_or("error is a string")?.to_string()),
            _ => return Err(format!("step {i}: needs exactly one of ok and error")),
        };
        let got_names = got.map_err(|e| e.name().to_string());
        if got_names != want {
            return Err(format!(
                "step {i} ({}): got {got_names:?}, want {want:?}",
                step["event"]["op"]
            ));
        }
        if want.is_err() && bytemuck::bytes_of(&*s) != before_bytes.as_slice() {
            return Err(format!("step {i}: a rejected call changed the state bytes"));
        }
        if step["state"] != "unchanged" {
            expected = step["state"].clone();
        }
        if let Some(d) = json_diff(&state_to_json(&s), &expected, "state") {
            return Err(format!("step {i} ({}): {d}", step["event"]["op"]));
        }
    }
    Ok(steps.len())
}
