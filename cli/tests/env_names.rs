//! The environment variables of the six binaries, read from their own `--help` (`[env: …]`),
//! against README's table (issue 48.9): every variable is documented with its flag and the
//! binaries that read it; a variable names one flag; and a variable read by several binaries is
//! one that means the same in each (an exported `AWCP_STATE_DIR` used to move the executor
//! into the daemon's state directory).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use support::BINS;

/// Names that several binaries read, each meaning the same thing in all of them.
const SHARED: &[&str] = &[
    // The client side of TLS (which CAs to trust, which identity to present).
    "AWCP_CA_FILE",
    "AWCP_CLIENT_CERT",
    "AWCP_CLIENT_KEY",
    "AIP_CA_FILE",
    "AIP_CLIENT_CERT",
    "AIP_CLIENT_KEY",
    "AIP_AMQP_CA",
    "AIP_AMQP_CERT",
    "AIP_AMQP_KEY",
    // Which delegator daemon to talk to, and its token.
    "AWCP_DAEMON_URL",
    "AWCP_DAEMON_TOKEN",
    "AWCP_DAEMON_TOKEN_FILE",
    // The delegator's admission limits (awcp and awcp-mcp both delegate).
    "AWCP_MAX_FILE_BYTES",
    "AWCP_MAX_FILE_COUNT",
    "AWCP_MAX_TOTAL_BYTES",
    // How the process runs and logs.
    "AWCP_RUNTIME",
    "AIP_RUNTIME",
    "AWCP_LOG_FORMAT",
    "AWCP_QUIET",
];

fn help(bin: &str, args: &[&str]) -> String {
    let o = Command::new(bin).args(args).arg("--help").output().unwrap();
    assert!(o.status.success(), "{bin} {args:?} --help");
    String::from_utf8(o.stdout).unwrap()
}

/// `(variable, flag)` pairs of one help text: each option's block runs from its `-x, --flag`
/// or `--flag` line to the next one.
fn pairs(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut flag = None;
    for line in text.lines() {
        let t = line.trim_start();
        let indent = line.len() - t.len();
        if (2..=6).contains(&indent) && t.starts_with('-') {
            flag = t
                .split([' ', ','])
                .find(|w| w.starts_with("--"))
                .map(|w| w.trim_end_matches(['=', '<']).to_owned());
        }
        let mut rest = line;
        while let Some(i) = rest.find("[env: ") {
            let name: String = rest[i + 6..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if !name.is_empty() && name != "NAME" {
                let f = flag.clone().unwrap_or_else(|| panic!("no flag for {name}"));
                out.push((name, f));
            }
            rest = &rest[i + 6..];
        }
    }
    out
}

/// The subcommands a help text lists.
fn subcommands(text: &str) -> Vec<String> {
    let Some(start) = text.find("Commands:\n") else {
        return Vec::new();
    };
    text[start + 10..]
        .lines()
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_variable_is_documented_names_one_flag_and_is_shared_only_with_one_meaning() {
    // variable -> (flags, binaries)
    let mut seen: BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)> = BTreeMap::new();
    for (name, bin) in BINS {
        let top = help(bin, &[]);
        let mut texts = vec![top.clone()];
        for sub in subcommands(&top) {
            texts.push(help(bin, &[&sub]));
        }
        for text in texts {
            for (var, flag) in pairs(&text) {
                let e = seen.entry(var).or_default();
                e.0.insert(flag);
                e.1.insert(name.to_owned());
            }
        }
    }
    assert!(seen.len() >= 130, "variables found: {}", seen.len());
    for (var, (flags, bins)) in &seen {
        assert_eq!(flags.len(), 1, "{var} is read by several flags: {flags:?}");
        assert!(
            bins.len() == 1 || SHARED.contains(&var.as_str()),
            "{var} is read by {bins:?}: one binary's setting must not configure another"
        );
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let mut documented = BTreeMap::new();
    for line in readme.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let var = cells[1].trim_matches('`');
        if !var
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        {
            continue;
        }
        let bins: BTreeSet<String> = cells[3].split(", ").map(str::to_owned).collect();
        documented.insert(
            var.to_owned(),
            (cells[2].trim_matches('`').to_owned(), bins),
        );
    }
    for (var, (flags, bins)) in &seen {
        let Some((flag, doc_bins)) = documented.get(var) else {
            panic!("{var} ({flags:?}, {bins:?}) is not in README's table");
        };
        assert!(
            flags.contains(flag),
            "{var}: README says {flag}, --help {flags:?}"
        );
        assert_eq!(doc_bins, bins, "{var}: README's binaries");
    }
    for var in documented.keys() {
        assert!(
            seen.contains_key(var),
            "README documents {var}, which nothing reads"
        );
    }
}

/// Issue 48.9: "every flag reads an environment variable" (it did not for `--prompt`, `--ttl`,
/// `--snapshot-mode`, `--card-skill` or `awcp-mcp --peers`), `--config` and `--completions`
/// on every binary.
#[test]
fn every_flag_reads_a_variable_and_every_binary_has_config_and_completions() {
    for (name, bin) in BINS {
        let top = help(bin, &[]);
        assert!(top.contains("--config"), "{name} has no --config");
        assert!(top.contains("--completions"), "{name} has no --completions");
        let o = Command::new(bin)
            .args(["--completions", "bash"])
            .output()
            .unwrap();
        assert!(
            o.status.success() && o.stdout.len() > 500,
            "{name} --completions bash"
        );
        let mut texts = vec![top.clone()];
        for sub in subcommands(&top) {
            texts.push(help(bin, &[&sub]));
        }
        for text in texts {
            let mut flag: Option<String> = None;
            let mut has_env = true;
            let check = |flag: &Option<String>, has_env: bool| {
                if let Some(f) = flag {
                    let exempt = ["--config", "--completions", "--help", "--version"];
                    assert!(
                        has_env || exempt.contains(&f.as_str()),
                        "{name} {f} reads no variable"
                    );
                }
            };
            for line in text.lines() {
                let t = line.trim_start();
                let indent = line.len() - t.len();
                if (2..=6).contains(&indent) && t.starts_with('-') {
                    check(&flag, has_env);
                    flag = t
                        .split([' ', ','])
                        .find(|w| w.starts_with("--"))
                        .map(|w| w.trim_end_matches(['=', '<']).to_owned());
                    has_env = false;
                }
                has_env |= line.contains("[env: ");
            }
            check(&flag, has_env);
        }
    }
}
