//! Helpers shared by the tunnel tests (each test file uses some of them).
#![allow(dead_code)]

pub mod client;
pub mod pair;
pub mod relay;
