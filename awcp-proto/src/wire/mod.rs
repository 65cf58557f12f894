//! The AWCP wire format: canonical types, a lenient two-dialect decoder and a per-dialect
//! encoder (WIRE.md §0–§4).
//!
//! Decoding accepts both the seed (\[S\]) and the reference (\[R\]) dialects, plus older \[L\] field
//! names where that is cheap. Unknown fields are ignored and `null` counts as absent; a missing
//! or ill-typed required field is a [`DecodeError`] that names the field (e.g. `task.prompt`).
//! Encoding writes the dialect the peer speaks, [`Dialect::Reference`] by default, omitting
//! absent optional fields (never writing `null`).
//!
//! The wire types are `serde` types. Build one with a struct literal and write it with
//! `serde_json` (in the reference dialect; [`InDialect`] names another), or read one written in
//! either dialect; `serde_json` reads and writes the JSON, the encoder's shapes
//! (`encode/shapes.rs`) and the decoder's adapter (`decode/`) give it the protocol's form:
//!
//! ```
//! use awcp_proto::{Dialect, InDialect, Message, TaskSpec, Invite, LeaseRequest, AccessMode};
//! use awcp_proto::{DelegationId, Resource, ResourceName};
//!
//! let invite = Message::Invite(Invite {
//!     delegation_id: DelegationId::new("dlg_1").unwrap(),
//!     task: TaskSpec { description: "Fix".into(), prompt: "Fix the failing test".into() },
//!     lease: LeaseRequest { ttl_seconds: 600, access_mode: AccessMode::Rw },
//!     resources: vec![Resource {
//!         name: ResourceName::new("repo").unwrap(),
//!         kind: "fs".into(),
//!         mode: AccessMode::Rw,
//!     }],
//!     export_name: None,
//!     retention_ms: None,
//!     transport: None,
//!     auth: None,
//!     features: vec![],
//! });
//! let reference = serde_json::to_value(&invite).unwrap();
//! assert_eq!(reference["environment"]["resources"][0]["name"], "repo");
//! let seed = serde_json::to_string(&InDialect(&invite, Dialect::Seed)).unwrap();
//! assert!(seed.contains(r#""workspace":{"exportName":"awcp/dlg_1"}"#));
//! // Read back from either dialect: the seed's single workspace is the resource `workspace`.
//! assert_eq!(serde_json::from_value::<Message>(reference).unwrap(), invite);
//! let Message::Invite(read) = serde_json::from_str::<Message>(&seed).unwrap() else { panic!() };
//! assert_eq!(read.resources[0].name.as_str(), "workspace");
//! ```

pub mod decode;
pub mod divert;
pub mod encode;
#[cfg(test)]
mod rounds_tests;
pub mod text;
pub mod types;

pub use decode::{
    decode_event, decode_handle, decode_message, decode_message_owned, DecodeError, DecodeErrorKind,
};
pub use encode::{
    encode_event, encode_event_split, encode_handle, encode_message, encode_message_owned,
    encode_message_split, event_to_value, message_to_value, InDialect, SplitMessage,
};
pub use text::JsonText;
pub use types::*;
