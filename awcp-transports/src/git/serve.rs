//! One request of git's smart HTTP protocol, answered by `git http-backend` (the CGI program
//! git ships) for a delegator that serves the delegation's bare repository itself. The
//! request body is a file (the driver received it, size-capped), the response is written to
//! a file: the driver streams both, memory stays flat whatever the repository's size.
//!
//! Only the smart protocol is answered (`http.getanyfile=false`: no file of the repository
//! is served as such); pushes are checked object by object (`receive.fsckObjects`), may
//! neither delete nor rewind a branch, and never reach the delegator's own `refs/awcp/…`.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::{spawn_reader, Config, Git};
use crate::error::TransportError;

/// A request for `git http-backend`.
#[derive(Debug)]
pub struct CgiRequest<'a> {
    /// The directory holding the repository (`GIT_PROJECT_ROOT`).
    pub project_root: &'a Path,
    /// `/<repository>/<git path>`, e.g. `/dlg_x.git/info/refs` (`PATH_INFO`).
    pub path_info: &'a str,
    /// `GET` or `POST`.
    pub method: &'a str,
    /// The query string (`service=git-upload-pack`).
    pub query: &'a str,
    /// The request's `Content-Type`.
    pub content_type: Option<&'a str>,
    /// The request's `Content-Encoding` (git gzips large requests).
    pub content_encoding: Option<&'a str>,
    /// The request's `Git-Protocol` header (protocol v2).
    pub git_protocol: Option<&'a str>,
    /// The request body, if any.
    pub body: Option<&'a Path>,
    /// Whether pushes are answered.
    pub allow_push: bool,
}

/// `git http-backend`'s answer: status, headers, and the body in a file.
#[derive(Debug)]
pub struct CgiResponse {
    /// HTTP status.
    pub status: u16,
    /// Headers (CGI's `Status` taken out).
    pub headers: Vec<(String, String)>,
    /// The body (the caller removes the file).
    pub body: PathBuf,
}

/// Whether `path` (after the repository's name) is one git's smart HTTP client asks for:
/// the ref advertisement and the two RPCs. Nothing else is answered.
pub fn is_smart_path(method: &str, path: &str, query: &str) -> bool {
    match (method, path) {
        ("GET", "info/refs") => {
            query == "service=git-upload-pack" || query == "service=git-receive-pack"
        }
        ("POST", "git-upload-pack" | "git-receive-pack") => query.is_empty(),
        _ => false,
    }
}

/// Runs `git http-backend` for `req`, its output's body written to `body_out`.
pub fn run(
    git: &Git,
    req: &CgiRequest<'_>,
    body_out: &Path,
) -> Result<CgiResponse, TransportError> {
    let mut cmd = git.command(Config::Isolated);
    cmd.arg("http-backend")
        .env("GIT_PROJECT_ROOT", req.project_root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("PATH_INFO", req.path_info)
        .env("REQUEST_METHOD", req.method)
        .env("QUERY_STRING", req.query)
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("REMOTE_USER", "awcp-executor")
        .env("GATEWAY_INTERFACE", "CGI/1.1");
    let settings = [
        ("http.getanyfile", "false"),
        ("http.uploadpack", "true"),
        (
            "http.receivepack",
            if req.allow_push { "true" } else { "false" },
        ),
        ("receive.fsckObjects", "true"),
        ("receive.denyDeletes", "true"),
        ("receive.denyNonFastForwards", "true"),
        // Pushes reach branches only: never the delegator's own refs (`refs/awcp/base`),
        // tags or notes (the last matching entry wins: everything hidden, then the branches
        // shown again).
        ("receive.hideRefs", "refs/"),
        ("receive.hideRefs", "!refs/heads/"),
        ("uploadpack.allowFilter", "false"),
    ];
    cmd.env("GIT_CONFIG_COUNT", settings.len().to_string());
    for (i, (k, v)) in settings.iter().enumerate() {
        cmd.env(format!("GIT_CONFIG_KEY_{i}"), k)
            .env(format!("GIT_CONFIG_VALUE_{i}"), v);
    }
    if let Some(t) = req.content_type {
        cmd.env("CONTENT_TYPE", t);
    }
    if let Some(e) = req.content_encoding {
        cmd.env("HTTP_CONTENT_ENCODING", e);
    }
    if let Some(p) = req.git_protocol {
        cmd.env("GIT_PROTOCOL", p);
    }
    match req.body {
        Some(b) => {
            let f = std::fs::File::open(b).map_err(|e| TransportError::io("request body", e))?;
            let len = f
                .metadata()
                .map_err(|e| TransportError::io("request body", e))?
                .len();
            cmd.env("CONTENT_LENGTH", len.to_string()).stdin(f);
        }
        None => {
            cmd.stdin(Stdio::null());
        }
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| TransportError::io("running git http-backend", e))?;
    let err = child.stderr.take().map(spawn_reader);
    let mut out = BufReader::with_capacity(64 * 1024, child.stdout.take().expect("piped"));
    let parsed = (|| {
        let mut status = 200u16;
        let mut headers = Vec::new();
        loop {
            let mut line = String::new();
            if out.read_line(&mut line)? == 0 {
                break;
            }
            let line = line.trim_end_matches(['\r', '\n']);
            if line.is_empty() {
                break;
            }
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            let (k, v) = (k.trim(), v.trim());
            if k.eq_ignore_ascii_case("status") {
                status = v
                    .split(' ')
                    .next()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(500);
            } else {
                headers.push((k.to_owned(), v.to_owned()));
            }
        }
        let mut f = std::fs::File::create(body_out)?;
        std::io::copy(&mut out, &mut f)?;
        Ok::<_, std::io::Error>((status, headers))
    })();
    // Whatever happened, the child ends.
    let mut rest = Vec::new();
    let _ = out.read_to_end(&mut rest);
    let exit = child
        .wait()
        .map_err(|e| TransportError::io("waiting for git http-backend", e))?;
    let stderr = err
        .map(|h| h.join().unwrap_or_default())
        .unwrap_or_default();
    let (status, headers) = parsed.map_err(|e| TransportError::io("git http-backend output", e))?;
    if !exit.success() && status == 200 {
        let _ = std::fs::remove_file(body_out);
        return Err(super::failed("git http-backend", &stderr));
    }
    Ok(CgiResponse {
        status,
        headers,
        body: body_out.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_smart_protocol_is_answered() {
        assert!(is_smart_path("GET", "info/refs", "service=git-upload-pack"));
        assert!(is_smart_path("POST", "git-receive-pack", ""));
        for (m, p, q) in [
            ("GET", "info/refs", ""),
            ("GET", "HEAD", ""),
            ("GET", "objects/info/packs", ""),
            ("GET", "config", ""),
            ("POST", "git-upload-pack", "x=1"),
            ("PUT", "git-receive-pack", ""),
        ] {
            assert!(!is_smart_path(m, p, q), "{m} {p} {q}");
        }
    }
}
