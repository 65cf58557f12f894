//! Peer bodies in error messages: what a peer answered instead of the protocol (a web page,
//! a proxy's error) is described in one line, never echoed whole, so that a wrong URL reads as
//! one clear sentence in a terminal or a log.

/// A short, one-line description of a body that is not JSON, for an error message: its size
/// and the start of its first non-blank line (at most 60 characters, control characters
/// dropped), never the whole of a web page.
pub fn describe_foreign_body(body: &[u8]) -> String {
    if body.is_empty() {
        return "an empty body".to_owned();
    }
    let text = String::from_utf8_lossy(&body[..body.len().min(512)]);
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let mut start: String = first.chars().filter(|c| !c.is_control()).take(60).collect();
    if first.chars().count() > 60 {
        start.push('…');
    }
    format!(
        "a body that is not JSON ({} bytes, starting `{start}`)",
        body.len()
    )
}
