//! The conformance suite (`conformance/mod.rs`) on the tokio driver.

#[macro_use]
mod conformance;

conformance_suite!(awcp_tokio::TokioRuntime);

/// Every scenario again with authentication on: every executor requires a credential, so
/// every request the delegator makes (INVITE, START, events, result, snapshot download, ack,
/// cancel, ERROR) must carry it.
mod with_auth {
    conformance_suite!(crate::conformance::WithAuth<awcp_tokio::TokioRuntime>);
}
