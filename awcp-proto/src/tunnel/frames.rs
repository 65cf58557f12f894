//! The tunnel's messages: every frame of the reference's message set, exactly as the
//! reference writes and reads it, and the frames of our extension ([`EXTENSION_V1`]).
//!
//! Every message is one WebSocket **text** frame holding one JSON object whose `type` names it
//! ([`Message`]); only the extension's body bytes travel in **binary** frames
//! ([`super::codec::DataFrame`]). Field names and `type` values are the wire's; serializing a
//! [`Message`] with serde_json writes `type` first and then the fields in the order the
//! reference's `JSON.stringify` writes them. Reading is lenient as a reference peer is:
//! unknown fields are ignored, a missing `headers` is empty, a missing response `body` is
//! empty, an id may be a string or a number. [`super::codec::decode_text`] is the way in: it
//! turns an unknown `type` into a typed error.

use serde::{Deserialize, Deserializer, Serialize};

use super::headers::{self, Headers};

/// The name of our extension, offered in `AUTH.features` and echoed in `AUTH_OK.features`
/// when the relay agrees. A peer that does not name it speaks the reference subset only.
pub const EXTENSION_V1: &str = "awcp-tunnel-v1";

/// The per-stream receive window a side announces when it does not say (`window` absent from
/// `AUTH` or `AUTH_OK`): 256 KiB.
pub const DEFAULT_WINDOW: u32 = 256 * 1024;
/// The smallest window a side may announce (1 KiB): less could not carry a header's worth.
pub const MIN_WINDOW: u32 = 1024;
/// The largest window, and the largest credit a stream may hold (2³¹ − 1, as in HTTP/2).
pub const MAX_WINDOW: u32 = (1 << 31) - 1;
/// A sender cuts bodies into binary frames of at most this many payload bytes (64 KiB), so
/// that control frames and other streams interleave with a large body.
pub const MAX_DATA_PAYLOAD: usize = 64 * 1024;
/// The longest reference id (`requestId`, `streamId`) or feature name read (256 bytes).
pub const MAX_ID_LEN: usize = 256;
/// The longest token read from `AUTH` (4 KiB).
pub const MAX_TOKEN_LEN: usize = 4096;
/// At most this many features are read from one list.
pub const MAX_FEATURES: usize = 32;

/// The number of one extension stream, chosen by the relay (the only side that opens
/// streams): from 1 upwards, never reused on one connection. In a reference frame the same
/// number is written in decimal as the `requestId` or `streamId` string.
pub type StreamNo = u32;

/// One tunnel message (a text frame). The first nine variants are the reference's message
/// set; the rest exist only under [`EXTENSION_V1`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum Message {
    /// Executor → relay, first: authenticate.
    #[serde(rename = "AUTH")]
    Auth(Auth),
    /// Relay → executor: authenticated; here is the public URL.
    #[serde(rename = "AUTH_OK")]
    AuthOk(AuthOk),
    /// Relay → executor: the token was refused.
    #[serde(rename = "AUTH_ERROR")]
    AuthError(AuthError),
    /// Relay → executor (reference): one whole HTTP request.
    #[serde(rename = "HTTP_REQUEST")]
    HttpRequest(HttpRequest),
    /// Executor → relay (reference): one whole HTTP response.
    #[serde(rename = "HTTP_RESPONSE")]
    HttpResponse(HttpResponse),
    /// Relay → executor (reference): subscribe to a task's events.
    #[serde(rename = "SSE_OPEN")]
    SseOpen(SseOpen),
    /// Executor → relay (reference): one event of a subscription.
    #[serde(rename = "SSE_EVENT")]
    SseEvent(SseEvent),
    /// Executor → relay (reference): the subscription ended.
    #[serde(rename = "SSE_END")]
    SseEnd(SseStream),
    /// Relay → executor (reference): the subscriber went away.
    #[serde(rename = "SSE_CLOSE")]
    SseClose(SseStream),
    /// Keepalive. The reference relay sends `{"type":"PING"}` and expects nothing back; under
    /// the extension either side sends it with an `id` and the other answers [`Message::Pong`].
    #[serde(rename = "PING")]
    Ping(Ping),
    /// Extension: the answer to a `PING` with an `id`.
    #[serde(rename = "PONG")]
    Pong(Pong),
    /// Extension, relay → executor: a request's method, path and headers; its body (unless
    /// `end`) follows in binary frames.
    #[serde(rename = "HTTP_REQUEST_HEAD")]
    RequestHead(RequestHead),
    /// Extension, executor → relay: a response's status and headers; its body (unless `end`)
    /// follows in binary frames.
    #[serde(rename = "HTTP_RESPONSE_HEAD")]
    ResponseHead(ResponseHead),
    /// Extension, either way: the receiver of a body grants its sender more bytes.
    #[serde(rename = "WINDOW")]
    Window(Window),
    /// Extension, either way: the stream is abandoned; nothing more is sent on it.
    #[serde(rename = "RESET")]
    Reset(Reset),
}

impl Message {
    /// The `type` value of this message.
    pub fn type_name(&self) -> &'static str {
        match self {
            Message::Auth(_) => "AUTH",
            Message::AuthOk(_) => "AUTH_OK",
            Message::AuthError(_) => "AUTH_ERROR",
            Message::HttpRequest(_) => "HTTP_REQUEST",
            Message::HttpResponse(_) => "HTTP_RESPONSE",
            Message::SseOpen(_) => "SSE_OPEN",
            Message::SseEvent(_) => "SSE_EVENT",
            Message::SseEnd(_) => "SSE_END",
            Message::SseClose(_) => "SSE_CLOSE",
            Message::Ping(_) => "PING",
            Message::Pong(_) => "PONG",
            Message::RequestHead(_) => "HTTP_REQUEST_HEAD",
            Message::ResponseHead(_) => "HTTP_RESPONSE_HEAD",
            Message::Window(_) => "WINDOW",
            Message::Reset(_) => "RESET",
        }
    }

    /// Whether the reference's message set has this message (a reference peer understands it).
    pub fn is_reference(&self) -> bool {
        match self {
            Message::Auth(_)
            | Message::AuthOk(_)
            | Message::AuthError(_)
            | Message::HttpRequest(_)
            | Message::HttpResponse(_)
            | Message::SseOpen(_)
            | Message::SseEvent(_)
            | Message::SseEnd(_)
            | Message::SseClose(_)
            | Message::Ping(_) => true,
            Message::Pong(_)
            | Message::RequestHead(_)
            | Message::ResponseHead(_)
            | Message::Window(_)
            | Message::Reset(_) => false,
        }
    }

    /// The compact JSON text of this message (one text frame).
    pub fn to_json(&self) -> String {
        // A message is strings, numbers and lists of strings: serializing cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// `AUTH{token}` (+ extension fields).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Auth {
    /// The executor's tunnel token (a secret; `Debug` hides it).
    #[serde(deserialize_with = "bounded_token")]
    pub token: String,
    /// Extension: the extensions the executor offers (`["awcp-tunnel-v1"]`). Absent: a
    /// reference client.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "feature_list"
    )]
    pub features: Option<Vec<String>>,
    /// Extension: the executor's receive window for each request body, in bytes
    /// ([`DEFAULT_WINDOW`] when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<u32>,
}

impl core::fmt::Debug for Auth {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Auth")
            .field("token", &"<hidden>")
            .field("features", &self.features)
            .field("window", &self.window)
            .finish()
    }
}

/// `AUTH_OK{publicUrl}` (+ extension fields).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthOk {
    /// Where delegators reach this executor (ends in `/awcp`).
    #[serde(rename = "publicUrl")]
    pub public_url: String,
    /// Extension: the offered extensions the relay agreed to. Absent: the reference subset.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "feature_list"
    )]
    pub features: Option<Vec<String>>,
    /// Extension: the relay's receive window for each response body, in bytes
    /// ([`DEFAULT_WINDOW`] when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<u32>,
}

/// `AUTH_ERROR{reason}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthError {
    /// Why the token was refused.
    #[serde(default)]
    pub reason: String,
}

/// `HTTP_REQUEST{requestId, method, path, headers, body?}` (reference).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpRequest {
    /// The request's id, echoed by the `HTTP_RESPONSE`.
    #[serde(rename = "requestId", deserialize_with = "ref_id")]
    pub request_id: String,
    /// `GET` or `POST`.
    pub method: String,
    /// Relative to the executor's AWCP root: `/`, `/status`, `/cancel/<id>`.
    pub path: String,
    /// The request's headers (an object on the wire).
    #[serde(with = "headers::as_object", default)]
    pub headers: Headers,
    /// The whole body as text (JSON), if the request has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

/// `HTTP_RESPONSE{requestId, status, headers, body}` (reference).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpResponse {
    /// The id of the `HTTP_REQUEST` answered.
    #[serde(rename = "requestId", deserialize_with = "ref_id")]
    pub request_id: String,
    /// The HTTP status.
    pub status: u16,
    /// The response's headers (the reference sends `{"Content-Type":"application/json"}`).
    #[serde(with = "headers::as_object", default)]
    pub headers: Headers,
    /// The whole body as text (JSON).
    #[serde(default, deserialize_with = "text_or_null")]
    pub body: String,
}

/// `SSE_OPEN{streamId, path}` (reference).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SseOpen {
    /// The subscription's id, echoed by `SSE_EVENT`/`SSE_END`/`SSE_CLOSE`.
    #[serde(rename = "streamId", deserialize_with = "ref_id")]
    pub stream_id: String,
    /// `/tasks/<id>/events`.
    pub path: String,
}

/// `SSE_EVENT{streamId, data}` (reference).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SseEvent {
    /// The subscription.
    #[serde(rename = "streamId", deserialize_with = "ref_id")]
    pub stream_id: String,
    /// The event's JSON text (the `data` of one SSE event).
    #[serde(default, deserialize_with = "text_or_null")]
    pub data: String,
}

/// `SSE_END{streamId}` and `SSE_CLOSE{streamId}` (reference).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SseStream {
    /// The subscription.
    #[serde(rename = "streamId", deserialize_with = "ref_id")]
    pub stream_id: String,
}

/// `PING` (reference: no fields; extension: an `id` the `PONG` echoes).
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Ping {
    /// Extension: the ping's number, echoed by the `PONG`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
}

/// `PONG{id}` (extension).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pong {
    /// The id of the `PING` answered.
    pub id: u64,
}

/// `HTTP_REQUEST_HEAD{stream, method, path, headers, end}` (extension).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestHead {
    /// The new stream's number.
    pub stream: StreamNo,
    /// The HTTP method.
    pub method: String,
    /// Relative to the executor's AWCP root, query included: `/tasks/<id>/events`, …
    pub path: String,
    /// The request's headers, hop-by-hop ones removed (`[name, value]` pairs on the wire).
    #[serde(with = "headers::as_pairs", default)]
    pub headers: Headers,
    /// `true`: the request has no body (no binary frame follows).
    #[serde(default)]
    pub end: bool,
}

/// `HTTP_RESPONSE_HEAD{stream, status, headers, end}` (extension).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResponseHead {
    /// The stream answered.
    pub stream: StreamNo,
    /// The HTTP status.
    pub status: u16,
    /// The response's headers (`[name, value]` pairs on the wire).
    #[serde(with = "headers::as_pairs", default)]
    pub headers: Headers,
    /// `true`: the response has no body (no binary frame follows).
    #[serde(default)]
    pub end: bool,
}

/// `WINDOW{stream, increment}` (extension): the body's sender may send `increment` more bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    /// The stream.
    pub stream: StreamNo,
    /// Bytes granted, in addition to what was granted before.
    pub increment: u32,
}

/// `RESET{stream, reason?}` (extension): the sender abandons the stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reset {
    /// The stream.
    pub stream: StreamNo,
    /// Why, for logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A reference id: a string, or a number taken as its decimal text (a JavaScript peer may
/// send either), at most [`MAX_ID_LEN`] bytes.
fn ref_id<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Id {
        Text(String),
        Number(serde_json::Number),
    }
    let id = match Id::deserialize(d)? {
        Id::Text(s) => s,
        Id::Number(n) => n.to_string(),
    };
    if id.len() > MAX_ID_LEN {
        return Err(serde::de::Error::custom(format!(
            "id longer than {MAX_ID_LEN} bytes"
        )));
    }
    Ok(id)
}

fn bounded_token<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let token = String::deserialize(d)?;
    if token.len() > MAX_TOKEN_LEN {
        return Err(serde::de::Error::custom(format!(
            "token longer than {MAX_TOKEN_LEN} bytes"
        )));
    }
    Ok(token)
}

/// A feature list: at most [`MAX_FEATURES`] names of at most [`MAX_ID_LEN`] bytes; entries
/// that are not strings are skipped; `null` is absent.
fn feature_list<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    let Some(items) = Option::<Vec<serde_json::Value>>::deserialize(d)? else {
        return Ok(None);
    };
    if items.len() > MAX_FEATURES {
        return Err(serde::de::Error::custom(format!(
            "more than {MAX_FEATURES} features"
        )));
    }
    Ok(Some(
        items
            .into_iter()
            .filter_map(|v| match v {
                serde_json::Value::String(s) if s.len() <= MAX_ID_LEN => Some(s),
                serde_json::Value::String(_)
                | serde_json::Value::Null
                | serde_json::Value::Bool(_)
                | serde_json::Value::Number(_)
                | serde_json::Value::Array(_)
                | serde_json::Value::Object(_) => None,
            })
            .collect(),
    ))
}

fn text_or_null<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}
