//! The AWCP wire format: canonical types, a lenient two-dialect decoder and a per-dialect
//! encoder (WIRE.md §0–§4).
//!
//! Decoding accepts both the seed (\[S\]) and the reference (\[R\]) dialects, plus older \[L\] field
//! names where that is cheap. Unknown fields are ignored and `null` counts as absent; a missing
//! or ill-typed required field is a [`DecodeError`] that names the field (e.g. `task.prompt`).
//! Encoding writes the dialect the peer speaks, [`Dialect::Reference`] by default, omitting
//! absent optional fields (never writing `null`).

pub mod decode;
pub mod divert;
pub mod encode;
mod parse;
pub mod text;
pub(crate) mod tree;
pub mod types;
pub(crate) mod writer;

pub use decode::{
    decode_event, decode_handle, decode_message, decode_message_owned, DecodeError, DecodeErrorKind,
};
pub use encode::{
    encode_event, encode_event_split, encode_handle, encode_message, encode_message_owned,
    encode_message_split, event_to_value, message_to_value, SplitMessage,
};
pub use text::JsonText;
pub use types::*;
