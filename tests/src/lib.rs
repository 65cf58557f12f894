//! Cross-crate test support: the deterministic simulation harness.
