//! Replays `tests/vectors/config/validity.json` (written by `tests/vectors/gen_config.py`): every
//! case's config and model must pass or fail the program's rules exactly as Python's do, and a
//! failure must name the same field. These are the checks `update` runs before it stores
//! anything (`CoordinatorConfig::check`, `Model::check`, `Model::check_cold_start_warmup_steps`),
//! so a run config `validate-config` accepts is one the program accepts, and the other way round.

mod common;

use common::json::{config_from_json, model_from_json, R};
use psyche_coordinator::core::*;
use serde_json::Value;

/// `base` with every `[dotted path, value]` of `edits` set; the parent tables must exist.
fn apply(base: &Value, edits: &Value) -> R<Value> {
    let mut doc = base.clone();
    for edit in edits.as_array().ok_or("set is an array")? {
        let path = edit[0].as_str().ok_or("an edit's path is a string")?;
        let mut node = &mut doc;
        let keys: Vec<&str> = path.split('.').collect();
        let (last, parents) = keys.split_last().ok_or("empty path")?;
        for key in parents {
            node = node.get_mut(*key).ok_or_else(|| format!("{path}: no table {key}"))?;
        }
        let slot = node.get_mut(*last).ok_or_else(|| format!("{path}: no key {last}"))?;
        *slot = edit[1].clone();
    }
    Ok(doc)
}

/// The program's verdict on the document's config and model, in `update`'s order.
fn protocol_check(doc: &Value) -> R<Result<(), &'static str>> {
    let config = config_from_json(&doc["config"])?;
    let model = model_from_json(&doc["model"])?;
    Ok(config
        .check()
        .and_then(|()| model.check())
        .and_then(|()| model.check_cold_start_warmup_steps(&config)))
}

/// Python's `field_of`: the message names the field first, then a space or ':'.
fn names_field(message: &str, field: &str) -> bool {
    message == field || message.strip_prefix(field).is_some_and(|rest| rest.starts_with([' ', ':']))
}

#[test]
fn config_validity_vectors_agree_with_python() {
    let doc = common::read_json(&common::vectors_dir("config").join("validity.json"));
    let cases = doc["cases"].as_array().expect("cases");
    assert!(cases.len() >= 90, "the vector lost cases: {}", cases.len());
    let mut failures = Vec::new();
    let (mut accepted, mut rejected) = (0, 0);
    for case in cases {
        let name = case["name"].as_str().expect("name");
        let want = case["protocol"].as_str();
        let got = apply(&doc["base"], &case["set"]).and_then(|d| protocol_check(&d));
        match (got, want) {
            (Err(e), _) => failures.push(format!("{name}: cannot decode: {e}")),
            (Ok(Ok(())), None) => accepted += 1,
            (Ok(Err(message)), Some(field)) if names_field(message, field) => rejected += 1,
            (Ok(got), want) => failures.push(format!("{name}: got {got:?}, Python: {want:?}")),
        }
    }
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
    // Both outcomes are exercised (the cases are mostly rejections).
    assert!(accepted >= 20 && rejected >= 60, "accepted {accepted}, rejected {rejected}");
}

#[test]
fn non_finite_floats_decode_from_the_vector_form() {
    let nan = serde_json::json!({"$float": "nan"});
    assert!(common::json::f64_of(&nan).unwrap().is_nan());
    let inf = serde_json::json!({"$float": "-inf"});
    assert_eq!(common::json::f64_of(&inf).unwrap(), f64::NEG_INFINITY);
    assert!(common::json::f64_of(&serde_json::json!({"$float": "x"})).is_err());
    // 1e39 is a finite f64 but stores as an infinite f32: the Distro rules see the f32.
    assert!(common::json::f32_of(&serde_json::json!(1e39)).unwrap().is_infinite());
}

#[test]
fn address_and_url_rules() {
    for ok in ["127.0.0.1:20001", "[::1]:1", "h:65535", "h:00080", "a-b_c.d:9"] {
        assert!(model::server_address_ok(ok), "{ok}");
    }
    for bad in ["", "h", "h:", ":80", "h:0", "h:65536", "h:99999999999999999999", "a b:80"] {
        assert!(!model::server_address_ok(bad), "{bad}");
    }
    for bad in ["::1:80", "[::1:80", "[]:80", "[h]:80", "h:+80", "h:8\u{0}"] {
        assert!(!model::server_address_ok(bad), "{bad}");
    }
    assert!(model::http_url_ok("https://h/x?y#z") && model::http_url_ok("http://h"));
    for bad in ["", "https://", "https:///x", "ftp://h/x", "https://h/a b", "HTTPS://h/x"] {
        assert!(!model::http_url_ok(bad), "{bad}");
    }
}
