//! The start-up check of `awcp-executor --agent-cmd`: whether the programs the command would
//! run exist, so a typo is reported when the executor starts rather than as a failed task.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// Shells whose `-c SCRIPT` is looked into for the program the script starts.
const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "mksh", "ash"];

/// Words at the start of a shell command that are not the program it runs (builtins,
/// keywords): a script starting with one of them is not checked.
const SHELL_BUILTINS: &[&str] = &[
    "cd", "if", "for", "while", "until", "case", "set", "export", "unset", "echo", "printf",
    "test", "[", "true", "false", ":", ".", "source", "eval", "trap", "read", "exit", "return",
    "shift", "umask", "ulimit", "wait", "!", "{", "(", "local", "type", "hash", "alias",
];

/// How a program word of the agent command resolves, as the task's `exec` will resolve it.
#[derive(Debug, PartialEq, Eq)]
enum Resolved {
    /// An executable file.
    Found(PathBuf),
    /// Not there, or not an executable file: why.
    Missing(String),
    /// A relative path with a `/`: resolved in each task's work directory, not checkable here.
    Relative,
    /// Holds a placeholder or shell syntax: known only when a task runs.
    Unknown,
}

/// Whether `p` is a file some execute bit is set on (what `exec` needs; ownership aside);
/// if not, why, as a predicate ("does not exist", "is not executable", …).
fn executable_file(p: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(p) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err("does not exist".into()),
        Err(e) => Err(format!("cannot be examined ({e})")),
        Ok(m) if !m.is_file() => Err("is not a file".into()),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => Err("is not executable".into()),
        Ok(_) => Ok(()),
    }
}

/// Resolves the program `word` as `execvp` does: a word with a `/` is a path (an absolute
/// one is checked; a relative one would be resolved in the task's work directory), any other
/// word is the first executable file of that name in a directory of `path` (the agent's
/// `PATH`; `/bin:/usr/bin` when it has none, glibc's default).
fn resolve_program(word: &str, path: Option<&OsStr>) -> Resolved {
    if word.is_empty() || word.contains(['{', '$', '`', '*', '?', '[', '~']) {
        return Resolved::Unknown;
    }
    if word.contains('/') {
        let p = Path::new(word);
        if !p.is_absolute() {
            return Resolved::Relative;
        }
        return match executable_file(p) {
            Ok(()) => Resolved::Found(p.to_path_buf()),
            Err(e) => Resolved::Missing(e),
        };
    }
    let path = path.unwrap_or(OsStr::new("/bin:/usr/bin"));
    let mut not_executable = None;
    // An empty entry would be the task's work directory: not checkable here, so skipped.
    for dir in std::env::split_paths(path).filter(|d| !d.as_os_str().is_empty()) {
        let candidate = dir.join(word);
        match executable_file(&candidate) {
            Ok(()) => return Resolved::Found(candidate),
            Err(e) if candidate.exists() => {
                not_executable = not_executable.or(Some(format!("{} {e}", candidate.display())))
            }
            Err(_) => {}
        }
    }
    Resolved::Missing(match not_executable {
        Some(e) => format!("not found on PATH ({}); {e}", path.to_string_lossy()),
        None => format!("not found on PATH ({})", path.to_string_lossy()),
    })
}

/// Whether `w` is a shell variable assignment (`NAME=value`).
fn is_assignment(w: &str) -> bool {
    w.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// The script of a shell's arguments `args` (after the shell's own name) when they hold
/// `-c`: `sh -c SCRIPT`, `bash -lc SCRIPT`, `sh -e -c SCRIPT`, `bash -o pipefail -c SCRIPT`.
fn shell_script(args: &[String]) -> Option<&str> {
    let mut has_c = false;
    let mut i = 0;
    while let Some(a) = args.get(i) {
        if a == "--" {
            i += 1;
            break;
        }
        if !(a.starts_with('-') || a.starts_with('+')) || a.len() < 2 {
            break;
        }
        if a == "-o" || a == "+o" {
            i += 1; // its option name
        } else if !a.starts_with("--") && a[1..].contains('c') {
            has_c = true;
        }
        i += 1;
    }
    has_c.then(|| args.get(i).map(String::as_str)).flatten()
}

/// The program a shell script starts with: its first word after variable assignments and
/// `exec`/`command`/`nohup`/`time`/`env` (and env's options and assignments), cut at the first
/// operator. `None` for a builtin, a keyword, or a script that cannot be split.
fn script_program(script: &str) -> Option<String> {
    let words = awcp_transports::command::split_command(script).ok()?;
    let mut words = words.iter().map(String::as_str).peekable();
    let mut in_env = false;
    let word = loop {
        let w = words.next()?;
        let w = &w[..w
            .find([';', '&', '|', '<', '>', '(', ')'])
            .unwrap_or(w.len())];
        if w.is_empty() {
            return None;
        }
        if is_assignment(w) || (in_env && w.starts_with('-')) {
            continue;
        }
        if matches!(w, "exec" | "command" | "nohup" | "time") {
            continue;
        }
        if Path::new(w).file_name().is_some_and(|n| n == "env") {
            in_env = true;
            continue;
        }
        break w;
    };
    (!SHELL_BUILTINS.contains(&word)).then(|| word.to_owned())
}

/// The words of the agent command `argv` that name programs to run: the command's own
/// program; after `env [OPTIONS] [NAME=VALUE]…`, the program env runs; for a shell run with
/// `-c SCRIPT`, also the first program of the script (only the first: later commands of a
/// script are not looked at).
fn agent_programs(argv: &[String]) -> Vec<(String, &'static str)> {
    let mut out = Vec::new();
    let mut words = argv;
    while let Some((first, rest)) = words.split_first() {
        out.push((first.clone(), ""));
        let name = Path::new(first)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("");
        if name == "env" {
            let skip = rest
                .iter()
                .take_while(|w| w.starts_with('-') || is_assignment(w))
                .count();
            words = &rest[skip..];
            continue;
        }
        if SHELLS.contains(&name) {
            if let Some(p) = shell_script(rest).and_then(script_program) {
                out.push((p, " (the first command of its -c script)"));
            }
        }
        break;
    }
    out
}

/// Warnings about the agent command `cmd` at start-up: each program it names that the
/// task's `exec` will not find (looked up in `path`, the agent's `PATH`), or that is given by
/// a relative path. Empty when every program checkable now is there.
pub fn agent_command_warnings(cmd: &str, path: Option<&OsStr>) -> Vec<String> {
    let Ok(argv) = awcp_transports::command::split_command(cmd) else {
        return Vec::new();
    };
    agent_programs(&argv)
        .into_iter()
        .filter_map(|(word, role)| match resolve_program(&word, path) {
            Resolved::Found(_) | Resolved::Unknown => None,
            Resolved::Missing(why) if word.contains('/') => Some(format!(
                "--agent-cmd: the program {word:?}{role} {why}: every task will fail until \
                 it is there"
            )),
            Resolved::Missing(why) => Some(format!(
                "--agent-cmd: the program {word:?}{role} is {why}: every task will fail \
                 until it is installed there, the agent's PATH is changed \
                 (--agent-env PATH=...) or the command names it by its absolute path"
            )),
            Resolved::Relative => Some(format!(
                "--agent-cmd: the program {word:?}{role} is a relative path: it is resolved in \
                 each task's work directory (the lent workspace), not in the executor's; give \
                 an absolute path"
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        awcp_transports::command::split_command(s).unwrap()
    }

    /// A directory holding an executable `tool` and a non-executable `plain`.
    fn bin_dir() -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        for (name, mode) in [("tool", 0o755), ("plain", 0o644)] {
            let p = dir.path().join(name);
            std::fs::write(&p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        dir
    }

    #[test]
    fn a_plain_word_is_looked_up_on_path_in_order() {
        let (a, b) = (bin_dir(), bin_dir());
        let path = std::env::join_paths([a.path(), b.path()]).unwrap();
        assert_eq!(
            resolve_program("tool", Some(&path)),
            Resolved::Found(a.path().join("tool"))
        );
        // Not executable: skipped, as execvp skips it; said so when nothing else is found.
        match resolve_program("plain", Some(&path)) {
            Resolved::Missing(why) => {
                assert!(why.contains("not found on PATH"), "{why}");
                assert!(why.contains("is not executable"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        match resolve_program("no-such-program-xyz", Some(&path)) {
            Resolved::Missing(why) => assert!(why.contains("not found on PATH"), "{why}"),
            other => panic!("{other:?}"),
        }
        // Without a PATH: execvp's default.
        assert!(matches!(resolve_program("sh", None), Resolved::Found(_)));
        // An empty PATH entry (the work directory) is not searched here.
        assert!(matches!(
            resolve_program("tool", Some(OsStr::new(""))),
            Resolved::Missing(_)
        ));
    }

    #[test]
    fn a_path_is_checked_as_given() {
        let d = bin_dir();
        let tool = d.path().join("tool");
        assert_eq!(
            resolve_program(tool.to_str().unwrap(), None),
            Resolved::Found(tool.clone())
        );
        for (p, why) in [
            (d.path().join("plain"), "is not executable"),
            (d.path().to_path_buf(), "is not a file"),
            (d.path().join("gone"), "does not exist"),
        ] {
            match resolve_program(p.to_str().unwrap(), None) {
                Resolved::Missing(m) => assert!(m.contains(why), "{m}"),
                other => panic!("{p:?}: {other:?}"),
            }
        }
        assert_eq!(resolve_program("./agent.sh", None), Resolved::Relative);
        assert_eq!(resolve_program("bin/agent", None), Resolved::Relative);
        assert_eq!(resolve_program("{work_dir}/x", None), Resolved::Unknown);
        assert_eq!(resolve_program("$HOME/x", None), Resolved::Unknown);
    }

    #[test]
    fn the_programs_of_a_command_include_env_targets_and_shell_scripts() {
        let progs = |s: &str| -> Vec<String> {
            agent_programs(&words(s))
                .into_iter()
                .map(|(w, _)| w)
                .collect()
        };
        assert_eq!(progs("claude -p --permission-mode acceptEdits"), ["claude"]);
        assert_eq!(
            progs("/usr/bin/env FOO=1 -i codex exec -"),
            ["/usr/bin/env", "codex"]
        );
        assert_eq!(
            progs("sh -c 'exec claude -p \"$AWCP_PROMPT\"'"),
            ["sh", "claude"]
        );
        assert_eq!(
            progs("bash -lc \"A=1 B=2 aider --yes-always\""),
            ["bash", "aider"]
        );
        assert_eq!(progs("sh -e -c 'my-agent; echo done'"), ["sh", "my-agent"]);
        assert_eq!(progs("bash -o pipefail -c 'tool|tee x'"), ["bash", "tool"]);
        assert_eq!(progs("sh -c 'env -i X=1 nohup tool'"), ["sh", "tool"]);
        // Builtins and unknowable words are not programs to look up.
        assert_eq!(progs("sh -c 'cd src && make'"), ["sh"]);
        assert_eq!(progs("sh -c '$AGENT run'"), ["sh", "$AGENT"]);
        // A script file, not -c: only the shell.
        assert_eq!(progs("sh ./run.sh"), ["sh"]);
        assert_eq!(progs("python3 -c 'print(1)'"), ["python3"]);
    }

    #[test]
    fn warnings_name_what_is_missing_and_nothing_else() {
        let d = bin_dir();
        let path = d.path().as_os_str().to_owned();
        let path = Some(path.as_os_str());
        assert!(agent_command_warnings("tool --prompt-file {prompt_file}", path).is_empty());
        let w = agent_command_warnings("no-such-program-xyz", path);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("\"no-such-program-xyz\" is not found on PATH"),
            "{w:?}"
        );
        // `sh` is not on this PATH either; the script's program is named as such.
        let w = agent_command_warnings("sh -c 'missing-agent --x'", path);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[1].contains("\"missing-agent\" (the first command of its -c script)"));
        let w = agent_command_warnings("/nonexistent/agent --x", path);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("\"/nonexistent/agent\" does not exist"),
            "{w:?}"
        );
        let w = agent_command_warnings("./agent.sh {prompt_file}", path);
        assert!(w[0].contains("relative path"), "{w:?}");
    }
}
