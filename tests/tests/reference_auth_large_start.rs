//! Reference delegators on an executor with auth and a large workspace (issue 47 item 5).
//!
//! The TypeScript reference delegator sends its credential only in INVITE's `auth` field; its
//! START (which inlines the whole base64 workspace with the archive transport) carries no
//! header. Such a START is read whole once its first bytes name a delegation that INVITE
//! bound; a large body for an unknown delegation, or with a wrong credential, is refused with
//! a 401 the client can read (the executor discards the upload instead of resetting the
//! connection under a client that is still sending, which Node's fetch reports as "fetch
//! failed").
//!
//! Everything binds 127.0.0.1; each scenario runs on the tokio and on the smol driver. Raw
//! requests write their whole body before reading the answer, as Node's fetch does.

#[allow(dead_code, unused_macros)]
mod conformance;

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use awcp_proto::engine::executor::RequiredAuth;
use awcp_proto::AuthType;
use conformance::security::{call, read_event_stream, reference_start, start_with_archive};
use conformance::*;

const TOKEN: &str = "tok-0b1c2d3e4f5a69788796a5b4c3d2e1f0";

/// Well over the executor's default unauthenticated limit (1 MiB), and over what the
/// loopback socket buffers hold: a client cannot write it all to a server that stopped
/// reading.
const LARGE: usize = 24 << 20;

/// An executor requiring [`TOKEN`] as a bearer token, with its default body limits (1 MiB
/// without a credential header, 256 MiB with one).
fn auth_executor<R: TestRuntime>() -> Exec {
    start_executor_journalled::<R>(Arc::new(EditRunner), None, |c| {
        c.auth = Some(RequiredAuth {
            types: vec![AuthType::Bearer],
            credential: TOKEN.into(),
        })
    })
}

/// An INVITE as the reference delegator writes it: the credential in `auth`, nowhere else.
fn invite_with_auth_field(id: &str) -> String {
    format!(
        r#"{{"version":"1","type":"INVITE","delegationId":"{id}",
 "task":{{"description":"Large workspace","prompt":"Edit the files."}},
 "lease":{{"ttlSeconds":1800,"accessMode":"rw"}},"retentionMs":604800000,
 "environment":{{"resources":[{{"name":"workspace","type":"fs","mode":"rw"}}]}},
 "requirements":{{"transport":"archive"}},
 "auth":{{"type":"bearer","credential":"{TOKEN}"}}}}"#
    )
}

/// A START for `id` of about [`LARGE`] bytes whose inline archive is padding (its checksum
/// does not matter: it is refused or accepted before it is looked at).
fn large_start(id: &str) -> String {
    start_with_archive(id, &"A".repeat(LARGE), "00")
}

/// How a raw request sends its body.
#[derive(Clone, Copy, Debug)]
enum Framing {
    /// With `Content-Length`.
    Length,
    /// In 64 KiB chunks (`Transfer-Encoding: chunked`): the length is not announced.
    Chunked,
}

/// What a client that writes its whole request before reading (Node's fetch) gets: the
/// status and the rest of the response, or why it got none.
fn post_whole(
    addr: &str,
    extra: &str,
    body: &str,
    framing: Framing,
) -> Result<(u16, String), String> {
    let mut s = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
    let length = match framing {
        Framing::Length => format!("Content-Length: {}", body.len()),
        Framing::Chunked => "Transfer-Encoding: chunked".to_owned(),
    };
    write!(
        s,
        "POST /awcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n{extra}\
         {length}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("writing the head: {e}"))?;
    let written = match framing {
        Framing::Length => s.write_all(body.as_bytes()),
        Framing::Chunked => body
            .as_bytes()
            .chunks(64 << 10)
            .try_for_each(|c| {
                write!(s, "{:x}\r\n", c.len())?;
                s.write_all(c)?;
                s.write_all(b"\r\n")
            })
            .and_then(|()| s.write_all(b"0\r\n\r\n")),
    };
    written.map_err(|e| format!("writing the {}-byte body ({framing:?}): {e}", body.len()))?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)
        .map_err(|e| format!("reading the answer: {e} (got {out:?})"))?;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("no HTTP answer: {text:?}"))?;
    Ok((status, text))
}

async fn post_whole_on<R: TestRuntime>(
    addr: &str,
    extra: &str,
    body: String,
    framing: Framing,
) -> Result<(u16, String), String> {
    let (addr, extra) = (addr.to_owned(), extra.to_owned());
    awcp_driver::runtime::blocking(&R::default(), move || {
        post_whole(&addr, &extra, &body, framing)
    })
    .await
}

fn addr_of(ex: &Exec) -> String {
    ex.base.trim_start_matches("http://").to_owned()
}

/// (a) A reference delegator's INVITE (credential only in `auth`), then its START with a
/// workspace over the unauthenticated limit and no header: read whole and run to `done`.
/// (c) Before it, the same large START with a wrong bearer token is refused with a readable
/// 401 and leaves the delegation waiting for its START.
async fn a_reference_start_over_the_unauthenticated_limit_is_read_whole<R: TestRuntime>() {
    let ex = auth_executor::<R>();
    let addr = addr_of(&ex);
    let id = "dlg_7a6b5c4d3e2f10918273645546372819";
    let (s, body) = call::<R>(
        http::Method::POST,
        &ex.peer,
        &[],
        Some(invite_with_auth_field(id)),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    assert!(body.contains("\"type\":\"ACCEPT\""), "{body}");

    // (c) A wrong credential in a header is refused even for the bound delegation, and the
    // client reads the refusal.
    let (s, text) = post_whole_on::<R>(
        &addr,
        "Authorization: Bearer nope\r\n",
        large_start(id),
        Framing::Length,
    )
    .await
    .unwrap_or_else(|e| panic!("a wrong bearer token with a large START: {e}"));
    assert_eq!(s, 401, "{text}");
    assert!(text.contains("AUTH_FAILED"), "{text}");

    // A workspace whose archive is over 1 MiB of base64 (random bytes do not compress).
    let src = workspace();
    let mut noise = vec![0u8; 2 << 20];
    awcp_tests::rng::Rng::from_clock().fill(&mut noise);
    std::fs::write(src.path().join("noise.bin"), &noise).unwrap();
    let start = reference_start(id, src.path());
    assert!(start.len() > 2 << 20, "{} bytes", start.len());

    let events_url = format!("{}/awcp/tasks/{id}/events", ex.base);
    let stream = spawn::<R, _>(async move { read_event_stream::<R>(&events_url, &[]).await });
    let (s, text) = post_whole_on::<R>(&addr, "", start, Framing::Length)
        .await
        .unwrap_or_else(|e| panic!("the reference START without a header: {e}"));
    assert_eq!(s, 200, "{text}");
    assert!(text.ends_with(r#"{"ok":true}"#), "{text}");
    let events = timeout::<R, _>(Duration::from_secs(120), stream)
        .await
        .expect("the event stream ended");
    assert!(events.contains("\"type\":\"done\""), "{events}");
    let (s, body) = call::<R>(
        http::Method::POST,
        &format!("{}/awcp/tasks/{id}/ack", ex.base),
        &[("content-type", "application/json".into())],
        None,
    )
    .await;
    assert_eq!((s, body.as_str()), (200, r#"{"ok":true}"#));
    wait_released::<R>(&ex).await;
}

/// (b) A large body without a header naming a delegation the executor does not know is
/// refused with a 401 that a client writing its whole body reads, whether its length was
/// announced or not; so is one whose first bytes name no delegation at all. The executor
/// stays usable.
async fn a_large_body_for_an_unknown_delegation_gets_a_readable_401<R: TestRuntime>() {
    let ex = auth_executor::<R>();
    let addr = addr_of(&ex);
    let unknown = large_start("dlg_00000000000000000000000000000009");
    let no_id = format!(r#"{{"padding":"{}"}}"#, "A".repeat(LARGE));
    for (what, body, framing) in [
        ("an unknown delegation", unknown.clone(), Framing::Length),
        ("an unknown delegation", unknown, Framing::Chunked),
        ("no delegation", no_id, Framing::Length),
    ] {
        let (s, text) = post_whole_on::<R>(&addr, "", body, framing)
            .await
            .unwrap_or_else(|e| panic!("a large body for {what} ({framing:?}): {e}"));
        assert_eq!(s, 401, "{what} ({framing:?}): {text}");
        assert!(text.contains("AUTH_FAILED"), "{what} ({framing:?}): {text}");
    }
    // Small requests are answered as before.
    let (s, _) = call::<R>(
        http::Method::GET,
        &format!("{}/awcp/status", ex.base),
        &[("authorization", format!("Bearer {TOKEN}"))],
        None,
    )
    .await;
    assert_eq!(s, 200);
}

macro_rules! on_both_runtimes {
    ($($name:ident),* $(,)?) => {
        mod tokio_driver {
            $(
                #[test]
                fn $name() {
                    <awcp_tokio::TokioRuntime as awcp_driver::Driver>::block_on(
                        super::$name::<awcp_tokio::TokioRuntime>(),
                    );
                }
            )*
        }
        mod smol_driver {
            $(
                #[test]
                fn $name() {
                    <awcp_smol::SmolRuntime as awcp_driver::Driver>::block_on(
                        super::$name::<awcp_smol::SmolRuntime>(),
                    );
                }
            )*
        }
    };
}

on_both_runtimes!(
    a_reference_start_over_the_unauthenticated_limit_is_read_whole,
    a_large_body_for_an_unknown_delegation_gets_a_readable_401,
);
