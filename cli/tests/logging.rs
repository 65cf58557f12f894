//! Issue 15, item 8 (part): log lines on stderr carry no ANSI escape codes when stderr is not
//! a terminal, and `--log-format json` writes one JSON object per log line with the
//! delegation id as a field; a failed delegation is logged at WARN when logs are asked for
//! (`RUST_LOG`), and by default said once, not logged again (issue 48.8). Runs the real `awcp` against a port nothing listens on.

use std::process::Command;

/// A temporary directory with a one-file workspace `ws` in it, and a port nothing listens on.
fn workspace_and_closed_port() -> (tempfile::TempDir, std::path::PathBuf, u16) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    (dir, ws, port)
}

/// `awcp [extra] delegate` to a closed port, with `RUST_LOG` as given (`None`: unset, the
/// default filter); stdout and stderr, after checking the exit code (5, unreachable).
fn run_to_nowhere(extra: &[&str], rust_log: Option<&str>) -> (String, String) {
    let (dir, ws, port) = workspace_and_closed_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_awcp"));
    cmd.args(extra)
        .arg("delegate")
        .arg(&ws)
        .args([
            "--peer",
            &format!("http://127.0.0.1:{port}/awcp"),
            "--prompt",
            "x",
        ])
        .env("AWCP_HOME", dir.path().join("home"))
        .env_remove("AWCP_LOG_FORMAT");
    match rust_log {
        Some(filter) => cmd.env("RUST_LOG", filter),
        None => cmd.env_remove("RUST_LOG"),
    };
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), Some(5), "{o:?}");
    (
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8(o.stderr).unwrap(),
    )
}

/// [`run_to_nowhere`]'s stderr with the WARN logs asked for: the engine's log of the end is
/// off by default for a command that prints its outcome (issue 48.8: each error said once),
/// and asked for here, to check how logs are written.
fn delegate_to_nowhere(extra: &[&str]) -> String {
    run_to_nowhere(extra, Some("warn")).1
}

#[test]
fn logs_to_a_pipe_have_no_colour_codes() {
    let err = delegate_to_nowhere(&[]);
    assert!(err.contains("delegation ended"), "{err}");
    assert!(
        !err.contains('\u{1b}'),
        "ANSI escape in piped stderr: {err:?}"
    );
}

#[test]
fn json_logs_are_one_object_per_line_with_the_delegation_id() {
    let err = delegate_to_nowhere(&["--log-format", "json"]);
    let logs: Vec<serde_json::Value> = err
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let ended = logs
        .iter()
        .find(|v| v["fields"]["message"] == "delegation ended")
        .unwrap_or_else(|| panic!("no 'delegation ended' log line: {err}"));
    assert!(
        ended["fields"]["delegation"]
            .as_str()
            .is_some_and(|d| d.starts_with("dlg_")),
        "{ended}"
    );
    // A failure is logged at WARN, with its code and why.
    assert_eq!(ended["level"], "WARN", "{ended}");
    assert_eq!(ended["fields"]["error"], "UNREACHABLE", "{ended}");
    assert!(
        ended["fields"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("INVITE failed")),
        "{ended}"
    );
}

/// Issue 15, item 6 (part): on a terminal, a log line never lands on the progress line. The
/// real `awcp` runs under `script` (util-linux, a pseudo-terminal), so stderr is a terminal
/// and progress is one line redrawn in place; the delegation fails, which is logged at WARN
/// while that line is shown. The log record must start on a cleared line (not after
/// `state: …`), and the progress line must be drawn again after it.
#[test]
fn on_a_terminal_log_lines_never_break_the_progress_line() {
    let (dir, ws, port) = workspace_and_closed_port();
    let cmd = format!(
        "{} --quiet delegate {} --peer http://127.0.0.1:{port}/awcp --prompt x",
        env!("CARGO_BIN_EXE_awcp"),
        ws.display()
    );
    let o = Command::new("script")
        .args(["-q", "-e", "-f", "-c", &cmd, "/dev/null"])
        .env("AWCP_HOME", dir.path().join("home"))
        .env_remove("AWCP_LOG_FORMAT")
        // The engine's log of the end is off by default for a command that prints its outcome
        // (issue 48.8: each error said once); asked for here, to check how logs are written.
        .env("RUST_LOG", "warn")
        .output()
        .expect("script (util-linux) runs");
    let screen = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(5), "{screen:?}");
    let clear = "\r\x1b[2K";
    let at = screen
        .find("delegation ended")
        .unwrap_or_else(|| panic!("no WARN record: {screen:?}"));
    // From the last line break (or clear) before the record to the record: no progress text.
    let line_start = screen[..at].rfind('\n').map_or(0, |i| i + 1);
    let before = &screen[line_start..at];
    let after_clear = before.rsplit(clear).next().unwrap_or(before);
    assert!(
        before.contains(clear) && !after_clear.contains("state:"),
        "the log record shares a line with the progress text: {before:?}"
    );
    // The progress line comes back below the record.
    let rest = &screen[at..];
    let next_line = &rest[rest.find('\n').expect("the record ends its line") + 1..];
    assert!(
        next_line.starts_with("[") && next_line.contains("state:"),
        "the progress line is not drawn again after the record: {rest:?}"
    );
}

/// Issue 48.8: by default `awcp delegate` says its error once (the record's `error:` line and
/// the explanation), with no log line repeating it.
#[test]
fn by_default_a_failed_delegation_is_not_logged_again() {
    let (out, err) = run_to_nowhere(&[], None);
    let all = format!("{out}{err}");
    assert!(!all.contains("delegation ended"), "{all}");
    assert!(!all.contains(" WARN "), "{all}");
    assert_eq!(all.matches("UNREACHABLE").count(), 1, "{all}");
}

/// Issue 48.9: `NO_COLOR` turns colour off on a terminal too. Under `script` (a
/// pseudo-terminal) the WARN record is coloured unless `NO_COLOR` is set; with it, the only
/// escape sequence left is the progress line's clear-line.
#[test]
fn no_color_turns_colour_off_on_a_terminal() {
    let run = |no_color: bool| {
        let (dir, ws, port) = workspace_and_closed_port();
        let cmd = format!(
            "{} delegate {} --peer http://127.0.0.1:{port}/awcp --prompt x",
            env!("CARGO_BIN_EXE_awcp"),
            ws.display()
        );
        let mut c = Command::new("script");
        c.args(["-q", "-e", "-f", "-c", &cmd, "/dev/null"])
            .env("AWCP_HOME", dir.path().join("home"))
            .env_remove("AWCP_LOG_FORMAT")
            .env("RUST_LOG", "warn");
        if no_color {
            c.env("NO_COLOR", "1");
        } else {
            c.env_remove("NO_COLOR");
        }
        let o = c.output().expect("script (util-linux) runs");
        String::from_utf8_lossy(&o.stdout).replace("\r\x1b[2K", "")
    };
    assert!(run(false).contains("\x1b["), "coloured without NO_COLOR");
    let plain = run(true);
    assert!(plain.contains("delegation ended"), "{plain:?}");
    assert!(!plain.contains('\x1b'), "{plain:?}");
}
