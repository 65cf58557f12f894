//! smol entry points (also for async-std programs, which run on smol's reactor): agent-rt's
//! [`SmolRuntime`] and its shutdown signal. Serve with [`crate::serve_partner`] and
//! [`crate::serve_notifications`] on `SmolRuntime`.

pub use agent_rt::smol::shutdown_signal;
pub use agent_rt::{ServerOptions, SmolRuntime};
