//! Issue 15, item 5: the errors a user meets, said as they happened and with what to do, run
//! through the real `awcp` binary. Each row: the command, its exit code, what the user must be
//! told (stdout and stderr) and what must not be said.

mod support;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use support::{announced, start_executor, workspace};

fn awcp(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_awcp"))
        .arg("--quiet")
        .args(args)
        .env("AWCP_HOME", home)
        .env_remove("AWCP_DAEMON_TOKEN")
        .env_remove("AWCP_DAEMON_URL")
        .env_remove("AWCP_PEER")
        .output()
        .unwrap()
}

/// A port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Row<'a> {
    what: &'a str,
    args: Vec<String>,
    exit: i32,
    says: &'a [&'a str],
    never: &'a [&'a str],
}

#[test]
fn every_user_facing_error_says_what_happened_and_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let ws = workspace(dir.path()).to_str().unwrap().to_owned();
    let (_executor, exec_url) = start_executor(dir.path());
    let exec_base = exec_url.trim_end_matches("/awcp").to_owned();
    let dstate = dir.path().join("daemon-state");
    let (_daemon, daemon_url) = announced(
        env!("CARGO_BIN_EXE_awcp"),
        &[
            "--quiet",
            "daemon",
            "--listen",
            "127.0.0.1:0",
            "--state-dir",
            dstate.to_str().unwrap(),
        ],
        "awcp daemon listening on ",
    );
    let token = std::fs::read_to_string(dstate.join("daemon.token"))
        .unwrap()
        .trim()
        .to_owned();
    let refused = format!("http://127.0.0.1:{}/awcp", closed_port());
    let no_daemon = format!("http://127.0.0.1:{}", closed_port());
    let (_guarded, guarded_url) = announced(
        env!("CARGO_BIN_EXE_awcp-executor"),
        &[
            "--listen",
            "127.0.0.1:0",
            "--quiet",
            "--work-root",
            dir.path().join("gwork").to_str().unwrap(),
            "--state-dir",
            dir.path().join("gstate").to_str().unwrap(),
            "--auth-token",
            "s3cret",
        ],
        "awcp-executor listening on ",
    );
    let secret_ws = dir.path().join("secret-ws");
    std::fs::create_dir_all(&secret_ws).unwrap();
    std::fs::write(secret_ws.join(".env"), "KEY=1\n").unwrap();
    std::fs::write(secret_ws.join("b.txt"), "b\n").unwrap();
    let secret_ws = secret_ws.to_str().unwrap().to_owned();
    let empty_state = dir.path().join("empty-state").to_str().unwrap().to_owned();
    let unknown_id = "dlg_00000000000000000000000000000000";
    let bad_config = dir.path().join("awcp.json");
    std::fs::write(&bad_config, r#"{"peers": "http://x"}"#).unwrap();
    let bad_config = bad_config.to_str().unwrap().to_owned();
    let peer_config = dir.path().join("peer.json");
    std::fs::write(&peer_config, format!(r#"{{"peer": "{refused}"}}"#)).unwrap();
    let peer_config = peer_config.to_str().unwrap().to_owned();
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    let rows = [
        Row {
            what: "a malformed --peer is refused while parsing the flags",
            args: s(&["delegate", &ws, "--peer", "not a url", "--prompt", "x"]),
            exit: 2,
            says: &[
                "--peer",
                "is not an executor URL",
                "http(s)://host[:port]/awcp",
            ],
            never: &["INVITE", "TIMEOUT"],
        },
        Row {
            what: "connection refused is UNREACHABLE, not a timeout",
            args: s(&["delegate", &ws, "--peer", &refused, "--prompt", "x"]),
            exit: 5,
            says: &[
                "UNREACHABLE",
                "Connection refused",
                "could not be reached",
                "--peer",
            ],
            never: &["TIMEOUT", "timed out"],
        },
        Row {
            what: "an executor given as --daemon-url is named as one",
            args: s(&["--daemon-url", &exec_base, "--daemon-token", "t", "list"]),
            exit: 2,
            says: &["is an AWCP executor, not a delegator daemon", "--peer"],
            never: &["request failed"],
        },
        Row {
            what: "an executor's /awcp URL given as --daemon-url is named as one",
            args: s(&["--daemon-url", &exec_url, "--daemon-token", "t", "list"]),
            exit: 2,
            says: &["is an AWCP executor, not a delegator daemon"],
            never: &["request failed"],
        },
        Row {
            what: "an unknown delegation's hint names the CLI command",
            args: s(&[
                "--daemon-url",
                &daemon_url,
                "--daemon-token",
                &token,
                "status",
                "dlg_00000000000000000000000000000000",
            ]),
            exit: 2,
            says: &["unknown delegation", "awcp list"],
            never: &[],
        },
        Row {
            what: "an unknown config key names the file and the key",
            args: s(&[
                "delegate",
                &ws,
                &format!("--config={bad_config}"),
                "--prompt",
                "x",
            ]),
            exit: 2,
            says: &["awcp.json", "unknown key \"peers\""],
            never: &[],
        },
        Row {
            what: "a config file's flag is used (here: its unreachable peer)",
            args: s(&["delegate", &ws, "--config", &peer_config, "--prompt", "x"]),
            exit: 5,
            says: &["could not be reached", &refused],
            never: &["unknown key"],
        },
        Row {
            what: "a missing workspace is a usage error",
            args: s(&[
                "delegate",
                "/nonexistent/workspace",
                "--peer",
                &exec_url,
                "--prompt",
                "x",
            ]),
            exit: 2,
            says: &[
                "WORKSPACE_NOT_FOUND",
                "/nonexistent/workspace",
                "No such file",
            ],
            never: &["TIMEOUT"],
        },
        Row {
            what: "no daemon at --daemon-url: unreachable, and how to start one",
            args: s(&["--daemon-url", &no_daemon, "--daemon-token", "t", "list"]),
            exit: 5,
            says: &[
                "Connection refused",
                "is the daemon running at",
                "awcp daemon",
            ],
            never: &["TIMEOUT"],
        },
        Row {
            what: "no daemon token: where the token comes from",
            args: s(&["--daemon-url", &daemon_url, "list"]),
            exit: 1,
            says: &[
                "missing or invalid daemon token",
                "--daemon-token",
                "--state-dir",
            ],
            never: &[],
        },
        Row {
            what: "a wrong daemon token is named as refused",
            args: s(&[
                "--daemon-url",
                &daemon_url,
                "--daemon-token",
                "wrong",
                "list",
            ]),
            exit: 1,
            says: &["the daemon token was refused"],
            never: &[],
        },
        Row {
            what: "an executor that wants a credential: AUTH_FAILED and the flag that gives it",
            args: s(&["delegate", &ws, "--peer", &guarded_url, "--prompt", "x"]),
            exit: 3,
            says: &["AUTH_FAILED", "--token"],
            never: &["TIMEOUT", "UNREACHABLE"],
        },
        Row {
            what: "secret-looking files are named, with the ways out",
            args: s(&[
                "delegate",
                &secret_ws,
                "--peer",
                &guarded_url,
                "--token",
                "s3cret",
                "--prompt",
                "x",
            ]),
            exit: 3,
            says: &[
                "SENSITIVE_FILES",
                "workspace/.env",
                ".awcpignore",
                "--allow-sensitive",
            ],
            never: &[],
        },
        Row {
            what: "a workspace over a limit names the limit's flag",
            args: s(&[
                "delegate",
                &ws,
                "--peer",
                &exec_url,
                "--max-file-count",
                "0",
                "--prompt",
                "x",
            ]),
            exit: 3,
            says: &["WORKSPACE_TOO_LARGE", "too many files", "--max-file-count"],
            never: &[],
        },
        Row {
            what: "--transport sshfs without its configuration",
            args: s(&[
                "delegate",
                &ws,
                "--peer",
                &exec_url,
                "--transport",
                "sshfs",
                "--prompt",
                "x",
            ]),
            exit: 2,
            says: &["--sshfs-config"],
            never: &[],
        },
        Row {
            what: "a zero lease is refused while parsing the flags, naming the flag",
            args: s(&[
                "delegate", &ws, "--peer", &exec_url, "--ttl", "0", "--prompt", "x",
            ]),
            exit: 2,
            says: &["--ttl"],
            never: &["ttl_seconds"],
        },
        Row {
            what:
                "an unknown delegation through the daemon (apply): the CLI command that lists them",
            args: s(&[
                "--daemon-url",
                &daemon_url,
                "--daemon-token",
                &token,
                "apply",
                unknown_id,
                "snap_1",
            ]),
            exit: 2,
            says: &["unknown delegation", "awcp list"],
            never: &[],
        },
        Row {
            what: "an unknown delegation in a state directory: which directory, and what to give",
            args: s(&["status", unknown_id, "--state-dir", &empty_state]),
            exit: 2,
            says: &[
                "unknown delegation",
                &empty_state,
                "--state-dir the delegation ran with",
            ],
            never: &[],
        },
        Row {
            what: "the daemon cannot reach the executor: UNREACHABLE, naming --peer",
            args: s(&[
                "--daemon-url",
                &daemon_url,
                "--daemon-token",
                &token,
                "delegate",
                &ws,
                "--daemon",
                "--peer",
                &refused,
                "--prompt",
                "x",
            ]),
            exit: 5,
            says: &["UNREACHABLE", "Connection refused", "--peer"],
            never: &["TIMEOUT"],
        },
    ];
    let mut failures = Vec::new();
    for row in &rows {
        let args: Vec<&str> = row.args.iter().map(String::as_str).collect();
        let o = awcp(&home, &args);
        // What the user sees: the record on stdout (a failed delegation's error and hint are
        // part of it) and the errors on stderr.
        let err = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        let mut wrong = Vec::new();
        if o.status.code() != Some(row.exit) {
            wrong.push(format!("exit {:?}, want {}", o.status.code(), row.exit));
        }
        for s in row.says {
            if !err.contains(s) {
                wrong.push(format!("does not say {s:?}"));
            }
        }
        for s in row.never {
            if err.contains(s) {
                wrong.push(format!("says {s:?}"));
            }
        }
        if !wrong.is_empty() {
            failures.push(format!(
                "{}: {}\n  stderr: {err}",
                row.what,
                wrong.join("; ")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Issue 15, item 8 (part): the prompt comes from `--prompt`, a file, or standard input
/// (`--prompt-file -`); an empty prompt and an unknown `--snapshot-mode` are refused before
/// anything is delegated.
#[test]
fn the_prompt_comes_from_a_flag_a_file_or_stdin() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let ws = workspace(dir.path());
    let (_executor, url) = start_executor(dir.path());
    let ws_s = ws.to_str().unwrap();
    // From standard input.
    let mut child = Command::new(env!("CARGO_BIN_EXE_awcp"))
        .args([
            "--quiet",
            "--json",
            "delegate",
            ws_s,
            "--peer",
            &url,
            "--prompt-file",
            "-",
        ])
        .env("AWCP_HOME", &home)
        .env_remove("AWCP_PEER")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"List the files\nand write notes\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let v: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&o.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(v["state"], "completed", "{v}");
    assert_eq!(v["task"]["description"], "List the files", "{v}");
    // From a file; an empty one is refused.
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "  \n").unwrap();
    let o = awcp(
        &home,
        &[
            "delegate",
            ws_s,
            "--peer",
            &url,
            "--prompt-file",
            empty.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("the prompt is empty"));
    // Neither, or both: refused while parsing.
    let o = awcp(&home, &["delegate", ws_s, "--peer", &url]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("--prompt"));
    let o = awcp(
        &home,
        &[
            "delegate",
            ws_s,
            "--peer",
            &url,
            "--prompt",
            "x",
            "--snapshot-mode",
            "later",
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--snapshot-mode") && err.contains("staged"),
        "{err}"
    );
}

/// Issue 47, item 9: lending `/` (through the daemon, its HTTP API with `source: "/"`, or
/// in-process) is refused in plain words: the filesystem root is named as such, and the text
/// is neither mangled (every `/` once became `<workspace>`) nor escaped JSON.
#[test]
fn lending_the_filesystem_root_is_refused_in_plain_words() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let dstate = dir.path().join("daemon-state");
    let (_daemon, daemon_url) = announced(
        env!("CARGO_BIN_EXE_awcp"),
        &[
            "--quiet",
            "daemon",
            "--listen",
            "127.0.0.1:0",
            "--state-dir",
            dstate.to_str().unwrap(),
        ],
        "awcp daemon listening on ",
    );
    let token = std::fs::read_to_string(dstate.join("daemon.token"))
        .unwrap()
        .trim()
        .to_owned();
    let peer = format!("http://127.0.0.1:{}/awcp", closed_port());
    let plain = |what: &str, text: &str| {
        for word in [
            "WORKSPACE_INVALID",
            "`/` is the filesystem root",
            "lend the directory of the project",
        ] {
            assert!(
                text.contains(word),
                "{what}: does not say {word:?}:\n{text}"
            );
        }
        for bad in ["<workspace>", "\\\"", "{", "}", "proc/"] {
            assert!(!text.contains(bad), "{what}: says {bad:?}:\n{text}");
        }
    };
    let through_daemon = [
        "--daemon-url",
        &daemon_url,
        "--daemon-token",
        &token,
        "delegate",
        "/",
        "--daemon",
        "--peer",
        &peer,
        "--prompt",
        "x",
    ];
    let o = awcp(&home, &through_daemon);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    plain(
        "awcp delegate / --daemon",
        &String::from_utf8_lossy(&o.stderr),
    );
    let o = awcp(&home, &["delegate", "/", "--peer", &peer, "--prompt", "x"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    plain(
        "awcp delegate / (in-process)",
        &format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    );

    // The daemon's HTTP API: a JSON answer whose `error` is the same plain sentence.
    let body = serde_json::json!({
        "executorUrl": peer,
        "environment": {"resources": [{"name": "root", "type": "fs", "source": "/"}]},
        "task": {"description": "x", "prompt": "x"},
    })
    .to_string();
    let hostport = daemon_url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(hostport).unwrap();
    write!(
        s,
        "POST /delegate HTTP/1.1\r\nHost: {hostport}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    let json = &answer[answer.find('{').unwrap()..=answer.rfind('}').unwrap()];
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(v["code"], "WORKSPACE_INVALID", "{v}");
    let text = format!(
        "{} {}",
        v["code"].as_str().unwrap(),
        v["error"].as_str().unwrap()
    );
    plain("POST /delegate {source: \"/\"}", &text);
}
