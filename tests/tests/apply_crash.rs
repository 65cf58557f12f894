//! A delegator killed with SIGKILL in the middle of applying a large result, and restarted: the
//! real `awcp` binary (alternately `awcp daemon` and `awcp apply --state-dir`), a real staged
//! snapshot of 300 changed files produced by a real `awcp-executor`.
//!
//! Each try resets the workspace and the delegator's state directory to the moment the result
//! was stored, starts the apply, kills the process at a random point (a random delay, or just
//! after the apply journal reaches `committing`, so the swap itself is hit), restarts the
//! delegator and checks, after its start-up recovery: the workspace is byte for byte entirely
//! old or entirely new, no staging directory is left, the record says `applied` exactly when
//! the workspace is new, and a snapshot left pending is re-appliable (a re-apply yields the
//! new tree). The run fails if no kill landed inside the swap.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use awcp_tests::bins::{self, awcp, show, KillOnDrop as Proc};
use awcp_tests::rng::Rng;
use awcp_tests::strace::{self, first_quoted, is_rename, second_quoted};
use serde_json::Value;

/// Tries (each a kill and a restart).
const TRIES: usize = 24;
/// Files in the workspace, and bytes per file: the swap renames every file, so the file count
/// makes the commit window; the bytes are kept small so a try stays short.
const FILES: usize = 300;
const FILE_BYTES: usize = 16 * 1024;

/// The agent rewrites every file, deletes ten and adds eleven (one in new directories).
const AGENT: &str = r#"#!/bin/sh
set -e
for f in $(find . -type f -name '*.dat'); do
  printf 'rewritten by the agent\n' >> "$f"
done
rm -f d0/f0.dat d1/f1.dat d2/f2.dat d3/f3.dat d4/f4.dat d5/f5.dat d6/f6.dat d7/f7.dat d8/f8.dat d9/f9.dat
for i in 0 1 2 3 4 5 6 7 8 9; do echo "new $i" > "new$i.txt"; done
mkdir -p fresh/deeper && echo "new and nested" > fresh/deeper/n.txt
echo "rewrote everything"
"#;

type Tree = BTreeMap<String, Vec<u8>>;

fn tree(root: &Path) -> Tree {
    fn walk(root: &Path, dir: &Path, out: &mut Tree) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let ft = e.file_type().unwrap();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if ft.is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = Tree::new();
    walk(root, root, &mut out);
    out
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).unwrap();
        }
    }
}

fn reset(dir: &Path, from: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    copy_tree(from, dir);
}

/// Entries of `parent` that are staging of an apply.
fn staging(parent: &Path) -> Vec<String> {
    std::fs::read_dir(parent)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".awcp-apply-") || n.starts_with(".awcp-stage-"))
        .collect()
}

fn start_daemon(state: &Path) -> (Proc, String) {
    let (child, url) = bins::spawn_daemon(state);
    (Proc(child), url)
}

/// Sends `POST …/apply` (with the daemon's `token`) to the daemon at `url` without waiting
/// for the answer.
fn post_apply(url: &str, token: &str, id: &str, sid: &str) -> std::net::TcpStream {
    let hostport = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(hostport).unwrap();
    write!(
        s,
        "POST /delegation/{id}/snapshots/{sid}/apply HTTP/1.1\r\nHost: {hostport}\r\nAuthorization: Bearer {token}\r\nContent-Length: 0\r\n\r\n"
    )
    .unwrap();
    s
}

/// The state of the apply journal of `id` under `parent`, if one exists.
fn journal_state(parent: &Path, id: &str) -> Option<String> {
    let mut f = std::fs::File::open(parent.join(format!(".awcp-apply-{id}/journal.json"))).ok()?;
    let mut s = String::new();
    f.read_to_string(&mut s).ok()?;
    let v: Value = serde_json::from_str(&s).ok()?;
    v["state"].as_str().map(str::to_owned)
}

/// A real delegation whose result is stored, not applied: a workspace of `files` files of
/// [`FILE_BYTES`] random bytes in 30 directories, which the [`AGENT`] rewrites.
struct Staged {
    base: tempfile::TempDir,
    parent: std::path::PathBuf,
    ws: std::path::PathBuf,
    state: std::path::PathBuf,
    id: String,
    sid: String,
}

fn staged_result(files: usize) -> Staged {
    staged_result_via(files, &[])
}

/// [`staged_result`] lent with `transport` arguments of `awcp delegate` (e.g. the git
/// transport, whose result is stored as a delta snapshot that the same apply writes).
fn staged_result_via(files: usize, transport: &[&str]) -> Staged {
    let base = tempfile::tempdir().unwrap();
    let parent = base.path().join("projects");
    let ws = parent.join("ws");
    let state = base.path().join("state");
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..files {
        let d = ws.join(format!("d{}", i % 30));
        std::fs::create_dir_all(&d).unwrap();
        let mut data = vec![0u8; FILE_BYTES];
        for b in data.iter_mut() {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            *b = seed as u8;
        }
        std::fs::write(d.join(format!("f{i}.dat")), data).unwrap();
    }

    let exdir = tempfile::tempdir().unwrap();
    std::fs::write(exdir.path().join("agent.sh"), AGENT).unwrap();
    let agent = format!("sh {}", exdir.path().join("agent.sh").display());
    let (ex, peer) = bins::spawn_announcing(
        &mut bins::executor_command(exdir.path(), &agent),
        bins::EXECUTOR_ANNOUNCES,
    );
    let ex = Proc(ex);
    let mut args = vec![
        "--json",
        "delegate",
        ws.to_str().unwrap(),
        "--peer",
        &peer,
        "--prompt",
        "rewrite",
        "--snapshot-mode",
        "staged",
        "--state-dir",
        state.to_str().unwrap(),
    ];
    args.extend_from_slice(transport);
    let o = awcp(&args);
    drop(ex);
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let v: Value = serde_json::from_slice(o.stdout.trim_ascii_end()).unwrap();
    let id = v["id"].as_str().unwrap().to_owned();
    let sid = v["snapshots"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(v["snapshots"][0]["status"], "pending", "{v}");
    Staged {
        base,
        parent,
        ws,
        state,
        id,
        sid,
    }
}

#[test]
fn sigkill_during_a_large_apply_then_restart_leaves_all_old_or_all_new() {
    kill_during_apply(staged_result(FILES), TRIES);
}

/// The same with the git transport: its result branch is stored as a delta snapshot, applied
/// by the same journalled swap.
#[test]
fn sigkill_during_a_large_git_apply_then_restart_leaves_all_old_or_all_new() {
    let git = ["--transport", "git", "--serve-archives", "127.0.0.1:0"];
    kill_during_apply(staged_result_via(FILES, &git), TRIES / 2);
}

/// Kills the apply of `staged` `tries` times (see the module docs).
fn kill_during_apply(staged: Staged, tries: usize) {
    // The workspace: 300 files in 30 directories, incompressible; the result stored.
    let Staged {
        base,
        parent,
        ws,
        state,
        id,
        sid,
    } = staged;

    // Pristine copies: the workspace before, the state with the stored result.
    let ws0 = base.path().join("ws0");
    let state0 = base.path().join("state0");
    copy_tree(&ws, &ws0);
    copy_tree(&state, &state0);
    let old = tree(&ws);

    // One uninterrupted apply gives the new tree and the duration of an apply.
    let t0 = Instant::now();
    let o = awcp(&["apply", &id, &sid, "--state-dir", state.to_str().unwrap()]);
    let apply_ms = t0.elapsed().as_millis() as u64;
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let new = tree(&ws);
    assert_ne!(new, old);
    assert_eq!(new.len(), FILES + 1, "300 - 10 deleted + 11 added");
    assert!(staging(&parent).is_empty());

    let mut rng = Rng::from_clock();
    eprintln!("apply takes {apply_ms} ms; rng seed {}", rng.0);
    let (mut mid_swap, mut ended_old, mut ended_new) = (0, 0, 0);
    for attempt in 0..tries {
        reset(&ws, &ws0);
        reset(&state, &state0);
        let daemon = attempt % 2 == 0;
        // Half the tries kill just after the swap starts; the others at a random moment.
        let at_commit = attempt % 4 < 2;
        let delay = Duration::from_millis(rng.below(apply_ms + 20));
        let (mut victim, _conn) = if daemon {
            let (p, url) = start_daemon(&state);
            let conn = post_apply(&url, &bins::daemon_token(&state), &id, &sid);
            (p, Some(conn))
        } else {
            let child = Command::new(bins::path("awcp"))
                .args(["--quiet", "apply", &id, &sid, "--state-dir"])
                .arg(&state)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            (Proc(child), None)
        };
        let started = Instant::now();
        if at_commit {
            // Until the journal says `committing` (or the apply is over: the journal came and
            // went, or the process ended).
            let mut seen = false;
            while started.elapsed() < Duration::from_secs(60)
                && victim.0.try_wait().unwrap().is_none()
            {
                match journal_state(&parent, &id).as_deref() {
                    Some("committing") => break,
                    Some(_) => seen = true,
                    None if seen => break,
                    None => {}
                }
                std::hint::spin_loop();
            }
        } else {
            while started.elapsed() < delay && victim.0.try_wait().unwrap().is_none() {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        let _ = victim.0.kill();
        let _ = victim.0.wait();
        drop(victim);
        let at_kill = tree(&ws);
        let mixed = at_kill != old && at_kill != new;
        if mixed {
            mid_swap += 1;
        }

        // Restart: the daemon, or an in-process command, recovers before anything else.
        let status = if attempt % 3 == 0 {
            let (p, url) = start_daemon(&state);
            let o = bins::awcp_on_daemon(&url, &state, &["--json", "status", &id]);
            drop(p);
            o
        } else {
            awcp(&[
                "--json",
                "status",
                &id,
                "--state-dir",
                state.to_str().unwrap(),
            ])
        };
        assert_eq!(status.status.code(), Some(0), "{}", show(&status));
        let after = tree(&ws);
        assert!(
            after == old || after == new,
            "try {attempt}: the workspace is half old, half new after the restart \
             (killed mid-swap: {mixed})"
        );
        assert!(
            staging(&parent).is_empty(),
            "try {attempt}: staging left: {:?}",
            staging(&parent)
        );
        let rec: Value = serde_json::from_slice(status.stdout.trim_ascii_end()).unwrap();
        let snap = rec["snapshots"][0]["status"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        // The record tells the truth about the workspace: a swap that finished (before the
        // kill, or by the start-up recovery) is recorded applied, not pending.
        if after == old {
            ended_old += 1;
            assert_eq!(snap, "pending", "try {attempt}: re-appliable\n{rec}");
        } else {
            ended_new += 1;
            assert_eq!(
                snap, "applied",
                "try {attempt}: the workspace is new\n{rec}"
            );
        }
        if snap == "pending" {
            let o = awcp(&["apply", &id, &sid, "--state-dir", state.to_str().unwrap()]);
            assert_eq!(o.status.code(), Some(0), "try {attempt}: {}", show(&o));
            assert!(tree(&ws) == new, "try {attempt}: re-applied, not all new");
            assert!(staging(&parent).is_empty());
        }
        eprintln!(
            "try {attempt}: {} killed {}; {} at the kill; {} after the restart; snapshot {snap}",
            if daemon { "daemon" } else { "awcp apply" },
            if at_commit {
                "once committing".to_owned()
            } else {
                format!("after {delay:?}")
            },
            if mixed {
                "mixed"
            } else if at_kill == new {
                "new"
            } else {
                "old"
            },
            if after == new { "new" } else { "old" },
        );
    }
    eprintln!("{mid_swap} kills mid-swap; {ended_old} ended old, {ended_new} ended new");
    assert!(
        mid_swap > 0,
        "no kill landed inside the swap: the test did not exercise the commit window"
    );
}

/// After a power loss only what was synced is on disk. The recovery of an apply redoes its swap
/// from the staged files, and what the swap replaces is gone once it ends, so every staged file
/// must be durable before the `committing` journal is, else a power loss in or after the swap
/// can leave files empty. Checked on the system calls of a real `awcp apply` (`strace`): with
/// few staged files, each is synced; with many, their file system is (`syncfs`). And the swap's
/// renames are durable (their directories synced) before the record says the result is applied.
#[test]
fn an_apply_makes_its_staged_files_durable_before_the_swap_begins() {
    if !strace::available("an_apply_makes_its_staged_files_durable_before_the_swap_begins") {
        return;
    }
    // 20 files: 10 rewritten and 11 added are staged (each synced); 300: 301 (one syncfs).
    for (files, each) in [(20, true), (FILES, false)] {
        let st = staged_result(files);
        // The workspace's directories before the apply.
        let mut old_dirs = std::collections::BTreeSet::new();
        let mut stack = vec![st.ws.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let e = e.unwrap();
                if e.file_type().unwrap().is_dir() {
                    stack.push(e.path());
                }
            }
            old_dirs.insert(d.display().to_string());
        }
        let log = st.base.path().join("strace.log");
        let o = strace::command(&bins::path("awcp"), &log)
            .args(["--quiet", "apply", &st.id, &st.sid, "--state-dir"])
            .arg(&st.state)
            .output()
            .expect("strace runs (.ci/run installs it)");
        assert_eq!(o.status.code(), Some(0), "{}", show(&o));
        let lines = strace::lines(&log);
        let text = lines.join("\n");
        let apply_dir = format!("/.awcp-apply-{}/", st.id);
        let staged = format!("{apply_dir}new/");
        // The swap begins with the first staged file moved into the workspace.
        let moves: Vec<usize> = (0..lines.len())
            .filter(|&i| is_rename(&lines[i]) && first_quoted(&lines[i]).contains(&staged))
            .collect();
        assert!(
            moves.len() >= 20,
            "{files} files: the swap moved too little:\n{text}"
        );
        // The journal renamed into place last before it says `committing`.
        let committing = lines[..moves[0]]
            .iter()
            .rposition(|l| is_rename(l) && l.contains(&format!("{apply_dir}journal.json\"")))
            .expect("a journal written before the swap");
        let before = &lines[..committing];
        if each {
            for &i in &moves {
                let path = first_quoted(&lines[i]);
                let rel = &path[path.find(&staged).unwrap()..];
                let synced = before.iter().any(|l| strace::syncs(l, rel));
                assert!(
                    synced,
                    "{files} files: {rel} moved in without being synced before the \
                     `committing` journal:\n{text}"
                );
            }
        } else {
            assert!(
                before.iter().any(|l| l.contains("syncfs(")),
                "{files} files: no syncfs before the `committing` journal:\n{text}"
            );
        }
        // Then every workspace directory the swap renamed into or out of is synced before the
        // record says the snapshot is applied: a rename is durable once its directory is.
        let in_ws = |p: &str| p.contains("/projects/ws/");
        let swap: Vec<usize> = (0..lines.len())
            .filter(|&i| {
                is_rename(&lines[i])
                    && (in_ws(first_quoted(&lines[i])) || in_ws(second_quoted(&lines[i])))
            })
            .collect();
        let last = *swap.last().expect("the swap renamed in the workspace");
        let recorded = (last..lines.len())
            .find(|&i| strace::syncs(&lines[i], &format!("/delegations/{}.json", st.id)))
            .unwrap_or_else(|| panic!("{files} files: no record synced after the swap:\n{text}"));
        // The directories holding what was renamed and, for each directory the swap made
        // (absent before the apply), the one it was made in.
        let mut dirs = std::collections::BTreeSet::new();
        for &i in &swap {
            for p in [first_quoted(&lines[i]), second_quoted(&lines[i])] {
                if !in_ws(p) {
                    continue;
                }
                let mut d = &p[..p.rfind('/').unwrap()];
                dirs.insert(d);
                while in_ws(d) && !old_dirs.contains(d) {
                    d = &d[..d.rfind('/').unwrap()];
                    dirs.insert(d);
                }
            }
        }
        assert!(
            dirs.iter().any(|d| d.ends_with("/ws/fresh")),
            "the new directory's parent: {dirs:?}"
        );
        for d in dirs {
            assert!(
                lines[last..recorded].iter().any(|l| strace::syncs(l, d)),
                "{files} files: {d} not synced between the swap and the record:\n{text}"
            );
        }
    }
}
