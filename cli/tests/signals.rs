//! SIGTERM the moment a server says it is listening ends it cleanly (exit 0, after its
//! shutdown path), never by the signal's default action: the handlers are installed before
//! the URL is printed. Before the fix, about one `awcp-executor` in three died of the signal.

mod support;

use std::process::Command;

fn term_right_after_start(bin: &str, args: &[&str], prefix: &str) {
    for round in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let (mut child, _url) = support::spawn_announcing(
            Command::new(bin)
                .args(args)
                .args(["--state-dir", dir.path().join("state").to_str().unwrap()])
                .env("AWCP_HOME", dir.path())
                .current_dir(dir.path()),
            prefix,
        );
        let st = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        let st = child.wait().unwrap();
        assert!(
            st.success(),
            "{bin} round {round}: {st:?} (killed by the signal, no shutdown)"
        );
    }
}

#[test]
fn the_executor_shuts_down_on_sigterm_right_after_start() {
    let work = tempfile::tempdir().unwrap();
    term_right_after_start(
        env!("CARGO_BIN_EXE_awcp-executor"),
        &[
            "--listen",
            "127.0.0.1:0",
            "--quiet",
            "--work-root",
            work.path().to_str().unwrap(),
        ],
        "awcp-executor listening on ",
    );
}

#[test]
fn the_daemon_shuts_down_on_sigterm_right_after_start() {
    term_right_after_start(
        env!("CARGO_BIN_EXE_awcp"),
        &["--quiet", "daemon", "--listen", "127.0.0.1:0"],
        "awcp daemon listening on ",
    );
}
