//! The commands `awcp` tells a user to run after a result was not applied (`awcp apply ID
//! SNAPSHOT …`, `awcp discard …`): they must reach the same delegator, with the same daemon
//! token, exactly as printed, and never print the token itself.

use std::path::{Path, PathBuf};

/// Where the `awcp` client found the daemon token it used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DaemonTokenSource {
    /// A token file (`--daemon-token-file`, `AWCP_DAEMON_TOKEN_FILE`).
    File(PathBuf),
    /// `AWCP_DAEMON_TOKEN` in the environment.
    Environment,
    /// `--daemon-token` on the command line, in no file this process knows of.
    CommandLine,
    /// `<dir>/daemon.token`.
    StateDir {
        /// The state directory.
        dir: PathBuf,
        /// Whether `dir` is the default one (neither `--state-dir` nor `AWCP_STATE_DIR`
        /// chose it): a later command finds the token there by itself.
        default: bool,
    },
    /// No token was found.
    None,
}

/// What a printed command needs to reach the same delegator: words before `awcp`, arguments
/// after the command's own, and a note to print after it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RetryTarget {
    /// Put before `awcp` (e.g. `env -u AWCP_STATE_DIR `), or empty.
    pub prefix: String,
    /// Put after the command's arguments (`--state-dir DIR`, `--daemon-url URL …`).
    pub args: String,
    /// What the user must know for the command to work, if anything.
    pub note: Option<String>,
}

impl RetryTarget {
    /// The in-process delegator of state directory `dir`.
    pub fn state_dir(dir: &Path) -> Self {
        RetryTarget {
            args: format!("--state-dir {}", sh(&absolute(dir).to_string_lossy())),
            ..Default::default()
        }
    }

    /// The daemon at `url`, whose token the client found as `token` says.
    /// `state_dir_in_env`: `AWCP_STATE_DIR` is set, which would make `awcp apply` work
    /// in-process on that directory instead of asking the daemon, so the command unsets it.
    pub fn daemon(url: &str, token: &DaemonTokenSource, state_dir_in_env: bool) -> Self {
        let mut args = format!("--daemon-url {}", sh(url));
        let token_file = |path: &Path| {
            format!(
                " --daemon-token-file {}",
                sh(&absolute(path).to_string_lossy())
            )
        };
        let mut note = None;
        match token {
            DaemonTokenSource::File(path) => args.push_str(&token_file(path)),
            DaemonTokenSource::StateDir {
                dir,
                default: false,
            } => args.push_str(&token_file(&awcp_driver::security::daemon_token_path(dir))),
            DaemonTokenSource::Environment => {
                note = Some(
                    "(the daemon token is read from AWCP_DAEMON_TOKEN, as for this command)".into(),
                )
            }
            DaemonTokenSource::CommandLine => {
                args.push_str(" --daemon-token-file TOKEN_FILE");
                note = Some(
                    "(TOKEN_FILE: a file, mode 0600, holding the daemon token you gave with \
                     --daemon-token, which is not printed here; or drop the flag and set \
                     AWCP_DAEMON_TOKEN)"
                        .into(),
                )
            }
            DaemonTokenSource::StateDir { default: true, .. } | DaemonTokenSource::None => {}
        }
        RetryTarget {
            prefix: if state_dir_in_env {
                "env -u AWCP_STATE_DIR ".into()
            } else {
                String::new()
            },
            args,
            note,
        }
    }

    /// The command line `awcp <command> <target's arguments>`, e.g. for `apply ID SNAPSHOT`.
    pub fn command(&self, command: &str) -> String {
        format!("{}awcp {command} {}", self.prefix, self.args)
    }
}

/// `path` made absolute against the current directory (as it is if that fails), so a printed
/// command works from anywhere.
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Quotes `s` for a POSIX shell if it needs it.
pub fn sh(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-:=@%+,".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_daemon_command_says_where_its_token_is_and_never_the_token() {
        let url = "http://127.0.0.1:3100";
        let t = |source| RetryTarget::daemon(url, &source, false);
        let file = t(DaemonTokenSource::File(PathBuf::from("/run/awcp token")));
        assert_eq!(
            file.command("apply I S"),
            "awcp apply I S --daemon-url http://127.0.0.1:3100 --daemon-token-file '/run/awcp token'"
        );
        assert_eq!(file.note, None);
        let dir = t(DaemonTokenSource::StateDir {
            dir: PathBuf::from("/srv/awcp"),
            default: false,
        });
        assert!(
            dir.args
                .ends_with("--daemon-token-file /srv/awcp/daemon.token"),
            "{dir:?}"
        );
        let default = t(DaemonTokenSource::StateDir {
            dir: PathBuf::from("/home/u/.awcp/delegator"),
            default: true,
        });
        assert_eq!(default.args, "--daemon-url http://127.0.0.1:3100");
        let env = t(DaemonTokenSource::Environment);
        assert!(env.note.unwrap().contains("AWCP_DAEMON_TOKEN"));
        let given = t(DaemonTokenSource::CommandLine);
        assert!(given.args.ends_with("--daemon-token-file TOKEN_FILE"));
        assert!(given.note.unwrap().contains("TOKEN_FILE"));
        let in_env = RetryTarget::daemon(url, &DaemonTokenSource::None, true);
        assert!(in_env
            .command("discard I S")
            .starts_with("env -u AWCP_STATE_DIR awcp discard I S"));
    }

    #[test]
    fn an_in_process_command_names_the_state_directory() {
        assert_eq!(
            RetryTarget::state_dir(Path::new("/tmp/it's")).command("apply I S"),
            "awcp apply I S --state-dir '/tmp/it'\\''s'"
        );
    }
}
