//! The conformance suite (`conformance/mod.rs`) on the tokio driver.

#[macro_use]
mod conformance;

conformance_suite!(awcp_tokio::TokioRuntime);
