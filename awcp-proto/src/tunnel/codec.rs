//! From WebSocket frames to tunnel messages and back: text frames are JSON [`Message`]s,
//! binary frames are [`DataFrame`]s (extension body bytes).
//!
//! ## Binary frame layout (extension)
//!
//! ```text
//! byte 0      kind   0x01 = DATA (every other value is refused)
//! byte 1      flags  bit 0 = END: the last bytes of this body; bits 1–7 reserved
//!                    (sent as 0, ignored when read)
//! bytes 2..6  stream number, u32 big-endian
//! bytes 6..   payload: 0 or more bytes of the body
//! ```
//!
//! Six bytes of overhead per frame, against a third more bytes plus JSON escaping for base64
//! in a text frame: bodies are archives of megabytes.
//!
//! Nothing here panics on bad input: every malformed frame is a [`FrameError`].

use serde::Deserialize;

use super::frames::{Message, StreamNo};

/// The kind byte of a DATA frame.
pub const DATA_KIND: u8 = 0x01;
/// The END flag of a DATA frame.
pub const FLAG_END: u8 = 0x01;
/// The length of a DATA frame's header.
pub const DATA_HEADER_LEN: usize = 6;

/// One WebSocket message (RFC 6455), as a driver reads and writes it. `Close` is not a frame
/// here: a machine asks for it with a `Close` output and learns of it from a `Disconnected` /
/// `Closed` input.
#[derive(Clone, PartialEq, Eq)]
pub enum WsFrame {
    /// A text frame: one JSON [`Message`].
    Text(String),
    /// A binary frame: one [`DataFrame`] (extension only).
    Binary(Vec<u8>),
    /// A WebSocket ping control frame. WebSocket libraries (Node's `ws`, tungstenite) answer
    /// one with a pong by themselves, so a machine uses it to keep a reference peer's
    /// connection alive and checked.
    Ping(Vec<u8>),
    /// A WebSocket pong control frame.
    Pong(Vec<u8>),
}

impl WsFrame {
    /// The text frame of `message`.
    pub fn message(message: &Message) -> WsFrame {
        WsFrame::Text(message.to_json())
    }

    /// The payload's length in bytes.
    pub fn len(&self) -> usize {
        match self {
            WsFrame::Text(t) => t.len(),
            WsFrame::Binary(b) | WsFrame::Ping(b) | WsFrame::Pong(b) => b.len(),
        }
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Shows the kind and length (and text frames' first 80 bytes, which may hold a token only
/// in `AUTH`, whose token is hidden).
impl core::fmt::Debug for WsFrame {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            WsFrame::Text(t) if t.contains("\"AUTH\"") => write!(f, "Text(AUTH …)"),
            WsFrame::Text(t) => {
                let mut end = t.len().min(80);
                while !t.is_char_boundary(end) {
                    end -= 1;
                }
                write!(
                    f,
                    "Text({:?}{})",
                    &t[..end],
                    if end < t.len() { "…" } else { "" }
                )
            }
            WsFrame::Binary(b) => write!(f, "Binary({} bytes)", b.len()),
            WsFrame::Ping(b) => write!(f, "Ping({} bytes)", b.len()),
            WsFrame::Pong(b) => write!(f, "Pong({} bytes)", b.len()),
        }
    }
}

/// A malformed frame. The machines never panic on one: a frame that cannot be read is
/// reported and dropped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The text is not a JSON object.
    #[error("frame is not a JSON object: {0}")]
    InvalidJson(String),
    /// The object has no string `type`.
    #[error("frame has no \"type\"")]
    MissingType,
    /// The `type` is not one this implementation knows.
    #[error("unknown frame type {0:?}")]
    UnknownType(String),
    /// A known `type` whose fields are missing or of the wrong kind (an id too long, a
    /// number out of range, …).
    #[error("malformed {frame_type} frame: {detail}")]
    InvalidFields {
        /// The frame's `type`.
        frame_type: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// A frame larger than the receiver accepts.
    #[error("frame of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// The frame's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A binary frame shorter than the DATA header.
    #[error("binary frame of {len} bytes is shorter than the {DATA_HEADER_LEN}-byte header")]
    ShortHeader {
        /// The frame's length.
        len: usize,
    },
    /// A binary frame whose kind byte is not DATA.
    #[error("unknown binary frame kind {0:#04x}")]
    UnknownKind(u8),
    /// A binary frame from a peer that did not negotiate the extension.
    #[error("binary frame without the extension")]
    UnexpectedBinary,
}

/// One extension body frame.
#[derive(Clone, PartialEq, Eq)]
pub struct DataFrame {
    /// The stream whose body this is.
    pub stream: StreamNo,
    /// The last bytes of the body.
    pub end: bool,
    /// The bytes.
    pub payload: Vec<u8>,
}

impl core::fmt::Debug for DataFrame {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DataFrame")
            .field("stream", &self.stream)
            .field("end", &self.end)
            .field("len", &self.payload.len())
            .finish()
    }
}

impl DataFrame {
    /// The binary frame's bytes (header, then payload).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(DATA_HEADER_LEN + self.payload.len());
        out.push(DATA_KIND);
        out.push(if self.end { FLAG_END } else { 0 });
        out.extend_from_slice(&self.stream.to_be_bytes());
        out.extend_from_slice(&self.payload);
        out
    }

    /// `encode` for a payload taken from `bytes`, without building a [`DataFrame`] first.
    pub fn encode_parts(stream: StreamNo, end: bool, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(DATA_HEADER_LEN + bytes.len());
        out.push(DATA_KIND);
        out.push(if end { FLAG_END } else { 0 });
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend_from_slice(bytes);
        out
    }

    /// Reads a binary frame (the payload is moved out of `bytes`, not copied, apart from the
    /// shift over the header).
    pub fn decode(mut bytes: Vec<u8>) -> Result<DataFrame, FrameError> {
        let Some(header) = bytes.get(..DATA_HEADER_LEN) else {
            return Err(FrameError::ShortHeader { len: bytes.len() });
        };
        let [kind, flags, a, b, c, d] = [
            header[0], header[1], header[2], header[3], header[4], header[5],
        ];
        if kind != DATA_KIND {
            return Err(FrameError::UnknownKind(kind));
        }
        let stream = u32::from_be_bytes([a, b, c, d]);
        bytes.drain(..DATA_HEADER_LEN);
        Ok(DataFrame {
            stream,
            end: flags & FLAG_END != 0,
            payload: bytes,
        })
    }
}

/// Reads one text frame.
pub fn decode_text(text: &str) -> Result<Message, FrameError> {
    #[derive(Deserialize)]
    struct Tag<'a> {
        #[serde(rename = "type", borrow, default)]
        ty: Option<std::borrow::Cow<'a, str>>,
    }
    // serde would read a struct from a JSON array too: only an object is a message.
    if !text.trim_start().starts_with('{') {
        return Err(FrameError::InvalidJson("not an object".into()));
    }
    let tag: Tag<'_> =
        serde_json::from_str(text).map_err(|e| FrameError::InvalidJson(short(&e)))?;
    let ty = tag.ty.ok_or(FrameError::MissingType)?;
    fn body<'a, T: Deserialize<'a>>(
        text: &'a str,
        frame_type: &'static str,
        wrap: fn(T) -> Message,
    ) -> Result<Message, FrameError> {
        serde_json::from_str::<T>(text)
            .map(wrap)
            .map_err(|e| FrameError::InvalidFields {
                frame_type,
                detail: short(&e),
            })
    }
    match ty.as_ref() {
        "AUTH" => body(text, "AUTH", Message::Auth),
        "AUTH_OK" => body(text, "AUTH_OK", Message::AuthOk),
        "AUTH_ERROR" => body(text, "AUTH_ERROR", Message::AuthError),
        "HTTP_REQUEST" => body(text, "HTTP_REQUEST", Message::HttpRequest),
        "HTTP_RESPONSE" => body(text, "HTTP_RESPONSE", Message::HttpResponse),
        "SSE_OPEN" => body(text, "SSE_OPEN", Message::SseOpen),
        "SSE_EVENT" => body(text, "SSE_EVENT", Message::SseEvent),
        "SSE_END" => body(text, "SSE_END", Message::SseEnd),
        "SSE_CLOSE" => body(text, "SSE_CLOSE", Message::SseClose),
        "PING" => body(text, "PING", Message::Ping),
        "PONG" => body(text, "PONG", Message::Pong),
        "HTTP_REQUEST_HEAD" => body(text, "HTTP_REQUEST_HEAD", Message::RequestHead),
        "HTTP_RESPONSE_HEAD" => body(text, "HTTP_RESPONSE_HEAD", Message::ResponseHead),
        "WINDOW" => body(text, "WINDOW", Message::Window),
        "RESET" => body(text, "RESET", Message::Reset),
        other => Err(FrameError::UnknownType(other.chars().take(64).collect())),
    }
}

/// What one received WebSocket frame is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Incoming {
    /// A text frame's message.
    Message(Message),
    /// A binary frame's body bytes.
    Data(DataFrame),
    /// A WebSocket control frame (ping or pong): proof of life, nothing else.
    Control,
}

/// Reads one received frame: text frames of at most `max_text` bytes, binary frames (when
/// `binary_allowed`, i.e. the extension was agreed), control frames.
pub fn decode_frame(
    frame: WsFrame,
    max_text: usize,
    binary_allowed: bool,
) -> Result<Incoming, FrameError> {
    match frame {
        WsFrame::Text(t) if t.len() > max_text => Err(FrameError::TooLarge {
            len: t.len(),
            max: max_text,
        }),
        WsFrame::Text(t) => decode_text(&t).map(Incoming::Message),
        WsFrame::Binary(_) if !binary_allowed => Err(FrameError::UnexpectedBinary),
        WsFrame::Binary(b) => DataFrame::decode(b).map(Incoming::Data),
        WsFrame::Ping(_) | WsFrame::Pong(_) => Ok(Incoming::Control),
    }
}

/// A serde error's text, bounded (it may quote input).
fn short(e: &serde_json::Error) -> String {
    let mut s = e.to_string();
    if s.len() > 200 {
        let mut end = 200;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_frames_round_trip_and_short_headers_are_errors() {
        let f = DataFrame {
            stream: 0x0102_0304,
            end: true,
            payload: b"abc".to_vec(),
        };
        let bytes = f.encode();
        assert_eq!(&bytes[..6], &[1, 1, 1, 2, 3, 4]);
        assert_eq!(DataFrame::decode(bytes).unwrap(), f);
        for n in 0..DATA_HEADER_LEN {
            assert_eq!(
                DataFrame::decode(vec![1; n]),
                Err(FrameError::ShortHeader { len: n })
            );
        }
        assert_eq!(
            DataFrame::decode(vec![7, 0, 0, 0, 0, 1]),
            Err(FrameError::UnknownKind(7))
        );
        // Reserved flag bits are ignored; an empty payload is fine.
        let f = DataFrame::decode(vec![1, 0xFE, 0, 0, 0, 9]).unwrap();
        assert_eq!((f.stream, f.end, f.payload.len()), (9, false, 0));
    }

    #[test]
    fn text_errors_are_typed() {
        assert!(matches!(
            decode_text("nope"),
            Err(FrameError::InvalidJson(_))
        ));
        assert!(matches!(
            decode_text("[1]"),
            Err(FrameError::InvalidJson(_))
        ));
        assert_eq!(decode_text("{}"), Err(FrameError::MissingType));
        assert_eq!(
            decode_text(r#"{"type":"HELLO"}"#),
            Err(FrameError::UnknownType("HELLO".into()))
        );
        assert!(matches!(
            decode_text(r#"{"type":"WINDOW","stream":1}"#),
            Err(FrameError::InvalidFields {
                frame_type: "WINDOW",
                ..
            })
        ));
        assert!(matches!(
            decode_text(r#"{"type":"WINDOW","stream":99999999999,"increment":1}"#),
            Err(FrameError::InvalidFields { .. })
        ));
    }

    #[test]
    fn frame_limits_and_binary_without_extension_are_errors() {
        let text = WsFrame::Text(r#"{"type":"PING"}"#.into());
        assert!(matches!(
            decode_frame(text.clone(), 4, true),
            Err(FrameError::TooLarge { len: 15, max: 4 })
        ));
        assert!(decode_frame(text, 100, false).is_ok());
        assert_eq!(
            decode_frame(WsFrame::Binary(vec![1, 0, 0, 0, 0, 1]), 100, false),
            Err(FrameError::UnexpectedBinary)
        );
        assert_eq!(
            decode_frame(WsFrame::Pong(vec![]), 100, false),
            Ok(Incoming::Control)
        );
    }
}
