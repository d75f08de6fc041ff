//! Test support shared by this crate's integration tests.

#![allow(dead_code)]

pub mod json;
pub mod model_json;
pub mod replay;

use std::path::PathBuf;

/// This crate's directory, as `cargo test` sets it when it runs the test. Read at run time, not
/// with `env!`: scripts/rust-test.sh reuses builds made in another clone (scripts/cargo_mtimes.py),
/// whose compiled-in directory may be gone.
pub fn manifest_dir() -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo test"))
}

/// `tests/vectors/<sub>` at the repository root.
pub fn vectors_dir(sub: &str) -> PathBuf {
    manifest_dir().join("../../tests/vectors").join(sub)
}

/// The `*.json` files of `tests/vectors/<sub>`, sorted by name.
pub fn vector_files(sub: &str) -> Vec<PathBuf> {
    let dir = vectors_dir(sub);
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    paths
}

pub fn read_json(path: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
