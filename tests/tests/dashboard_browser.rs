//! Issue 53: the dashboards in a real browser. Debian's headless Chromium, driven by
//! playwright-core from npm (`tests/dashboard/dashboard.test.mjs`), against the real
//! `awcp daemon` and `awcp-executor` (with `--auth-token`) that this test starts on
//! 127.0.0.1 port 0: sign-in by one-time link only, a delegation started from the CLI
//! appearing and progressing live, the executor's page, a staged result's diff, apply by
//! keyboard, discard, cancel, a delegation from the form, a page of another origin that
//! tries every action with the browser's cookie, phone width and dark mode. Screenshots of
//! every step are kept in `<target>/dashboard-shots/`.
//!
//! Skipped with a notice where Chromium, node or the npm registry is missing, unless
//! `AWCP_REQUIRE_BROWSER_TEST=1` (set by `.ci/run`, which installs Chromium), which makes
//! that a failure. Every process the test starts (daemon, executor, node and its browser, in
//! their own process group) is killed before it ends, and the test checks none is left.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use awcp_tests::bins::{self, KillOnDrop};

/// The driver version the test pins (what `npm install` fetches; it drives the system
/// Chromium, never a browser of its own).
const PLAYWRIGHT: &str = "playwright-core@1.65.1";

/// The token the executor requires.
const EXECUTOR_TOKEN: &str = "dashboard-test-executor-token";

/// Prints its first line and a line of hostile HTML, waits until the test releases its
/// prompt, then edits the work directory: a changed, an added, a removed, a binary file and a
/// directory made a file.
const AGENT: &str = r#"#!/bin/sh
echo "step 1: reading"
echo "<img src=x onerror=\"document.title='pwned'\">"
while [ ! -e "GATE/$AWCP_PROMPT" ]; do sleep 0.1; done
echo "step 2: writing"
echo "changed by the agent" > a.txt
echo "brand new" > added.txt
rm -f gone.txt
printf 'PNG\000\001\002' > logo.bin
rm -rf docs && echo "now a file" > docs
echo "done: edited a.txt"
"#;

fn required() -> bool {
    std::env::var("AWCP_REQUIRE_BROWSER_TEST").is_ok_and(|v| v == "1")
}

fn skip_or_fail(why: &str) {
    if required() {
        panic!("the dashboard browser test cannot run: {why}");
    }
    eprintln!(
        "SKIPPED dashboard_browser: {why} (set AWCP_REQUIRE_BROWSER_TEST=1 to make this fatal)"
    );
}

fn chromium() -> Option<PathBuf> {
    std::env::var_os("AWCP_CHROMIUM")
        .map(PathBuf::from)
        .into_iter()
        .chain(["/usr/bin/chromium", "/usr/bin/chromium-browser"].map(PathBuf::from))
        .find(|p| p.exists())
}

/// playwright-core under `<target>/dashboard-node`, installed on first use.
fn playwright(target: &Path) -> Result<PathBuf, String> {
    let prefix = target.join("dashboard-node");
    let dir = prefix.join("node_modules/playwright-core");
    if dir.join("package.json").exists() {
        return Ok(dir);
    }
    std::fs::create_dir_all(&prefix).map_err(|e| e.to_string())?;
    let o = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--silent", "--prefix"])
        .arg(&prefix)
        .arg(PLAYWRIGHT)
        .output()
        .map_err(|e| format!("npm not found: {e}"))?;
    if o.status.success() && dir.join("package.json").exists() {
        Ok(dir)
    } else {
        Err(format!(
            "npm install {PLAYWRIGHT} failed: {}",
            bins::show(&o)
        ))
    }
}

fn workspace(root: &Path, name: &str) -> PathBuf {
    let ws = root.join(name);
    std::fs::create_dir_all(ws.join("docs")).unwrap();
    std::fs::write(ws.join("a.txt"), "lent\n").unwrap();
    std::fs::write(ws.join("gone.txt"), "to be removed\n").unwrap();
    std::fs::write(ws.join("logo.bin"), b"PNG\0\0").unwrap();
    std::fs::write(ws.join("docs/inner.md"), "# inner\n").unwrap();
    ws
}

/// Whether any process of group `pgid` is still there.
fn group_alive(pgid: u32) -> bool {
    Command::new("pgrep")
        .args(["-g", &pgid.to_string()])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn the_dashboards_in_a_real_browser() {
    let Some(chromium) = chromium() else {
        return skip_or_fail("no Chromium (apt-get install chromium)");
    };
    if Command::new("node").arg("--version").output().is_err() {
        return skip_or_fail("node not found");
    }
    let target = bins::profile_dir().parent().unwrap().to_path_buf();
    let playwright = match playwright(&target) {
        Ok(p) => p,
        Err(e) => return skip_or_fail(&e),
    };
    let shots = target.join("dashboard-shots");
    let _ = std::fs::remove_dir_all(&shots);
    std::fs::create_dir_all(&shots).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let gate = root.join("gate");
    std::fs::create_dir(&gate).unwrap();
    let agent = root.join("agent.sh");
    std::fs::write(&agent, AGENT.replace("GATE", gate.to_str().unwrap())).unwrap();
    let spaces: Vec<(&str, PathBuf)> = [
        "WS_APPLY",
        "WS_DISCARD",
        "WS_FORM",
        "WS_CANCEL",
        "WS_HOSTILE",
    ]
    .into_iter()
    .map(|k| (k, workspace(root, &k.to_ascii_lowercase())))
    .collect();

    let mut cmd = bins::executor_command(root, &format!("sh {}", agent.display()));
    cmd.env("AWCP_AUTH_TOKEN", EXECUTOR_TOKEN);
    let (child, executor_url) = bins::spawn_announcing(&mut cmd, bins::EXECUTOR_ANNOUNCES);
    let _executor = KillOnDrop(child);
    let dstate = root.join("dstate");
    let (child, daemon_url) = bins::spawn_daemon(&dstate);
    let _daemon = KillOnDrop(child);

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("dashboard/dashboard.test.mjs");
    let mut node = Command::new("node");
    node.arg(&script)
        .env("AWCP", bins::path("awcp"))
        .env("DAEMON_URL", daemon_url.trim_end_matches('/'))
        .env("DAEMON_STATE", &dstate)
        .env("EXECUTOR_URL", &executor_url)
        .env("EXECUTOR_TOKEN", EXECUTOR_TOKEN)
        .env("GATE", &gate)
        .env("SHOTS", &shots)
        .env("CHROMIUM", &chromium)
        .env("PLAYWRIGHT", &playwright)
        .env_remove("AWCP_DAEMON_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in &spaces {
        node.env(k, v);
    }
    std::os::unix::process::CommandExt::process_group(&mut node, 0);
    let child = node.spawn().expect("node runs");
    let pgid = child.id();
    let out = child.wait_with_output().expect("node ends");
    // Whatever the outcome, nothing the browser test started may outlive it.
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stderr(Stdio::null())
        .status();
    let show = bins::show(&out);
    assert!(out.status.success(), "the browser test failed:\n{show}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("all steps passed"),
        "{show}"
    );
    for _ in 0..50 {
        if !group_alive(pgid) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(!group_alive(pgid), "the browser outlived its test");

    // What the clicks did, read from disk here too.
    let ws = |k: &str| spaces.iter().find(|(n, _)| *n == k).unwrap().1.clone();
    assert_eq!(
        std::fs::read_to_string(ws("WS_APPLY").join("a.txt")).unwrap(),
        "changed by the agent\n"
    );
    assert!(ws("WS_APPLY").join("docs").is_file());
    assert_eq!(
        std::fs::read_to_string(ws("WS_FORM").join("a.txt")).unwrap(),
        "changed by the agent\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws("WS_DISCARD").join("a.txt")).unwrap(),
        "lent\n"
    );
    // Left alone by the foreign page, then applied from the CLI.
    assert_eq!(
        std::fs::read_to_string(ws("WS_HOSTILE").join("a.txt")).unwrap(),
        "changed by the agent\n"
    );
    let kept = std::fs::read_dir(&shots).unwrap().count();
    assert!(kept >= 10, "{kept} screenshots kept in {}", shots.display());
}
