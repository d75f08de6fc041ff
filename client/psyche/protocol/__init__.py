"""Byte-exact primitives shared with the Rust program (shuffles, committee and data selection,
bloom filters, commitments, identities) and the run-config types and TOML loading.

Pure and deterministic: no clock, no global RNG, no torch, no I/O except the explicit loaders.
"""
