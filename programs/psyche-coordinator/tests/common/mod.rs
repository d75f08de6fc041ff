//! Test support shared by this crate's integration tests.

#![allow(dead_code)]

pub mod json;
pub mod model_json;
pub mod replay;

use std::path::PathBuf;

/// `tests/vectors/<sub>` at the repository root.
pub fn vectors_dir(sub: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors").join(sub)
}

pub fn read_json(path: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
