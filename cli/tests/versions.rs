//! Every binary of this package answers `--version` with its name and the package version
//! (issue 15, item 8), exit 0, on stdout.

mod support;

use std::process::Command;

#[test]
fn every_binary_answers_version() {
    for (name, path) in support::BINS {
        let o = Command::new(path).arg("--version").output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{name} --version failed: {o:?}");
        assert_eq!(
            out.trim(),
            format!("{name} {}", env!("CARGO_PKG_VERSION")),
            "{name} --version"
        );
    }
}

/// Issue 15, item 8: `awcp-executor --help` states the `--agent-cmd` contract.
#[test]
fn executor_help_states_the_agent_command_contract() {
    let o = Command::new(env!("CARGO_BIN_EXE_awcp-executor"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&o.stdout);
    for needle in [
        "{prompt_file}",
        "{work_dir}",
        "AWCP_DELEGATION_ID",
        "AWCP_PROMPT_FILE",
        "last stdout line is the summary",
        "TASK_FAILED",
    ] {
        assert!(help.contains(needle), "--help does not mention {needle:?}");
    }
}

/// Issue 15, item 8: shell completions for the two main binaries.
#[test]
fn completions_are_printed_for_awcp_and_awcp_executor() {
    let o = Command::new(env!("CARGO_BIN_EXE_awcp"))
        .args(["completions", "bash"])
        .output()
        .unwrap();
    let script = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{o:?}");
    assert!(
        script.contains("_awcp()") && script.contains("delegate"),
        "{script}"
    );
    let o = Command::new(env!("CARGO_BIN_EXE_awcp-executor"))
        .args(["--completions", "zsh"])
        .output()
        .unwrap();
    let script = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{o:?}");
    assert!(script.contains("#compdef awcp-executor") && script.contains("--agent-cmd"));
}
