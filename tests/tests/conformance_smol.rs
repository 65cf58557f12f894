//! The conformance suite (`conformance/mod.rs`) on the smol driver.

#[macro_use]
mod conformance;

conformance_suite!(awcp_smol::SmolRuntime);
