//! Runnable examples of embedding the awcp-rs crates; the programs are the `[[example]]`
//! targets beside this package's manifest (`cargo run -p awcp-examples --example NAME`).
//! This library is empty: cargo needs one target besides the examples.
