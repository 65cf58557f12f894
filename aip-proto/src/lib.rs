//! # aip-proto: the sans-IO AIP engine (direct mode)
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod engine;
pub mod error;
pub mod http;
pub mod leader;
pub mod partner;
pub mod sse;
pub mod state;
pub mod time;
pub mod wire;

pub use error::{DecodeError, ErrorCode, RpcError, UsageError};
pub use time::Timestamp;
pub use wire::*;
