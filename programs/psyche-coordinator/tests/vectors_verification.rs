//! Replays `tests/vectors/verification/rules/rules.json` (written by
//! `tests/vectors/gen_coordinator.py`) with `core::verification`: the sampling, verdict
//! validation and quorum rules of result verification, on plain values; and the scenario files
//! next to it (`verify_*.json`: witnesses carrying verdicts, their validation and consequences)
//! through the whole Rust state machine, like the coordinator vectors.

mod common;

use common::json::u64_of;
use psyche_coordinator::core::verification::{
    judge, sampled_count, sampled_trainer, verdict_error, VerdictError, VerdictVote,
};
use serde_json::Value;

fn rules() -> Value {
    common::read_json(&common::vectors_dir("verification/rules").join("rules.json"))
}

fn u16_of(v: &Value) -> u16 {
    u16::try_from(u64_of(v).unwrap()).expect("u16")
}

#[test]
fn sampling() {
    let doc = rules();
    let cases = doc["sampling"].as_array().expect("sampling");
    assert!(cases.len() >= 5);
    for c in cases {
        let (n, seed) = (u64_of(&c["n"]).unwrap(), u64_of(&c["seed"]).unwrap());
        let vp = u8::try_from(u64_of(&c["vp"]).unwrap()).unwrap();
        let want: Vec<u64> =
            c["sampled"].as_array().unwrap().iter().map(|x| u64_of(x).unwrap()).collect();
        let count = sampled_count(n, vp);
        let got: Vec<u64> = (0..count).map(|p| sampled_trainer(p, n, seed, vp).unwrap()).collect();
        assert_eq!(got, want, "{c}");
        assert_eq!(sampled_trainer(count, n, seed, vp), None);
    }
}

#[test]
fn verdict_errors() {
    let doc = rules();
    for c in doc["verdict_error"].as_array().expect("verdict_error") {
        let got = verdict_error(
            u16_of(&c["checked"]),
            u16_of(&c["mismatch"]),
            c["verifier"].as_bool().unwrap(),
            u64_of(&c["n_sampled"]).unwrap(),
            u16_of(&c["own_slots"]),
        );
        let want = match c["error"].as_str() {
            None => None,
            Some("NotVerifier") => Some(VerdictError::NotVerifier),
            Some("MismatchWithoutChecked") => Some(VerdictError::MismatchWithoutChecked),
            Some("SlotNotSampled") => Some(VerdictError::SlotNotSampled),
            Some("OwnResult") => Some(VerdictError::OwnResult),
            Some(other) => panic!("unknown error {other}"),
        };
        assert_eq!(got, want, "{c}");
    }
}

#[test]
fn quorum_decisions() {
    let doc = rules();
    for c in doc["judge"].as_array().expect("judge") {
        let votes: Vec<VerdictVote> = c["votes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| VerdictVote {
                position: u64_of(&v["position"]).unwrap(),
                checked: u16_of(&v["checked"]),
                mismatch: u16_of(&v["mismatch"]),
            })
            .collect();
        let (rejected, accused) =
            judge(&votes, u64_of(&c["n_sampled"]).unwrap(), u64_of(&c["n_verifiers"]).unwrap());
        assert_eq!(rejected, u16_of(&c["rejected"]), "{c}");
        let want: Vec<bool> =
            c["accused"].as_array().unwrap().iter().map(|b| b.as_bool().unwrap()).collect();
        assert_eq!(accused, want, "{c}");
    }
}

#[test]
fn verification_scenarios_replay() {
    let paths = common::vector_files("verification");
    assert!(paths.len() >= 4, "expected the verify_*.json scenarios, found {}", paths.len());
    for p in &paths {
        let doc = common::read_json(p);
        common::replay::replay(&doc)
            .unwrap_or_else(|e| panic!("{}: {e}", p.file_name().unwrap().to_string_lossy()));
    }
}
