//! Replays every `tests/vectors/coordinator/*.json` scenario through the Rust core and compares
//! each outcome and each whole resulting state with what the Python coordinator produced.

mod common;

use common::replay::replay;
use psyche_coordinator::core::*;
use serde_json::Value;

#[test]
fn coordinator_vectors_replay() {
    let paths = common::vector_files("coordinator");
    assert!(paths.len() >= 55, "expected the 55 scenarios, found {}", paths.len());
    let mut failures = Vec::new();
    let mut steps = 0;
    let mut errors_seen = std::collections::BTreeSet::new();
    for p in &paths {
        let doc = common::read_json(p);
        for step in doc["steps"].as_array().into_iter().flatten() {
            if let Some(e) = step.get("error").and_then(Value::as_str) {
                errors_seen.insert(e.to_string());
            }
        }
        match replay(&doc) {
            Ok(n) => steps += n,
            Err(e) => failures.push(format!("{}: {e}", p.file_name().unwrap().to_string_lossy())),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} scenarios differ:\n{}",
        failures.len(),
        paths.len(),
        failures.join("\n")
    );
    // Every error code occurs in some file (README), so every one was compared at least once.
    for e in CoordinatorError::ALL {
        assert!(errors_seen.contains(e.name()), "no vector exercises {e}");
    }
    println!("replayed {} scenarios, {steps} steps", paths.len());
}
