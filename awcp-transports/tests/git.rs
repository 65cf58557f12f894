//! The git transport's mechanisms against the real `git` binary: a base commit written from a
//! workspace ZIP, the executor's checkout (no `.git/` in the work directory), its commit and
//! push, and the delegator's delta ZIP of the result, hostile results refused.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use awcp_transports::archive::{ExtractLimits, DELTA_ENTRY};
use awcp_transports::git::{base, result, serve, work, Config, Credential, Git, Identity};
use zip::write::SimpleFileOptions;

fn zip_of(path: &Path, files: &[(&str, &[u8], u32)]) {
    let mut z = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    for (name, bytes, mode) in files {
        z.start_file(*name, SimpleFileOptions::default().unix_permissions(*mode))
            .unwrap();
        z.write_all(bytes).unwrap();
    }
    z.finish().unwrap();
}

fn git_ok(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A delegator repository holding one base commit on `awcp/d1`; its id.
fn base_repo(tmp: &Path, repo: &Path) -> String {
    let git = Git::new();
    let z = tmp.join("ws.zip");
    zip_of(
        &z,
        &[
            ("a.txt", b"alpha\n", 0o644),
            ("run.sh", b"#!/bin/sh\necho hi\n", 0o755),
            ("dir/b.txt", b"beta\n", 0o644),
            ("gone.txt", b"to delete\n", 0o644),
            (".awcp/manifest.json", b"{}", 0o644),
        ],
    );
    base::init_bare(&git, repo).unwrap();
    base::commit_zip(
        &git,
        &base::BaseCommit {
            repo,
            zip: &z,
            branch_ref: "refs/heads/awcp/d1",
            parent: None,
            message: "AWCP: workspace of d1",
            identity: &Identity::delegator(),
            time: 1_700_000_000,
        },
    )
    .unwrap()
}

#[test]
fn a_workspace_goes_out_as_a_commit_and_comes_back_as_a_delta_zip() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("d1.git");
    let base_id = base_repo(tmp.path(), &repo);
    assert!(awcp_transports::git::is_object_id(&base_id));
    // The tree: the files, modes kept, `.awcp/` left out.
    let tree = git_ok(&repo, &["ls-tree", "-r", "--name-only", &base_id]);
    assert_eq!(tree, "a.txt\ndir/b.txt\ngone.txt\nrun.sh");
    let modes = git_ok(&repo, &["ls-tree", &base_id, "run.sh"]);
    assert!(modes.starts_with("100755"), "{modes}");

    // The executor: file remote allowed here only.
    let git = Git::new();
    let gd = tmp.path().join("exec.git");
    let wd = tmp.path().join("work");
    std::fs::create_dir(&wd).unwrap();
    let url = repo.to_string_lossy().into_owned();
    let c = work::Checkout {
        git_dir: &gd,
        work_dir: &wd,
        url: &url,
        credential: &Credential::None,
    };
    work::clone_base(&git, &c, "awcp/d1", &base_id, "awcp/d1").unwrap();
    assert!(!wd.join(".git").exists(), "no .git in the work directory");
    assert_eq!(std::fs::read(wd.join("a.txt")).unwrap(), b"alpha\n");
    use std::os::unix::fs::PermissionsExt;
    let m = std::fs::metadata(wd.join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_ne!(m & 0o111, 0, "executable bit kept");

    std::fs::write(wd.join("a.txt"), b"alpha, edited\n").unwrap();
    std::fs::write(wd.join("new.txt"), b"new\n").unwrap();
    std::fs::remove_file(wd.join("gone.txt")).unwrap();
    let who = Identity {
        name: "Exec Utor".into(),
        email: "exec@example.org".into(),
    };
    let pushed =
        work::commit_and_push(&git, &c, "awcp/d1", &base_id, "the task's work", &who).unwrap();
    assert_eq!(pushed.changed_files, vec!["a.txt", "gone.txt", "new.txt"]);
    assert_eq!(
        git_ok(&repo, &["log", "-1", "--format=%an <%ae>|%s", "awcp/d1"]),
        "Exec Utor <exec@example.org>|the task's work"
    );

    // The delegator reads the branch back.
    let tip = result::commit_of(&git, &repo, "refs/heads/awcp/d1").unwrap();
    assert_eq!(tip, pushed.commit);
    assert!(result::descends_from(&git, &repo, &tip, &base_id).unwrap());
    let out = tmp.path().join("delta.zip");
    let none = result::LocalWorkspace::None;
    let d = result::delta_zip(
        &git,
        &repo,
        &base_id,
        &tip,
        &out,
        &ExtractLimits::default(),
        &none,
    )
    .unwrap();
    assert_eq!(d.changed, vec!["a.txt", "new.txt"]);
    assert_eq!(d.deleted, vec!["gone.txt"]);
    let mut z = zip::ZipArchive::new(std::fs::File::open(&out).unwrap()).unwrap();
    let mut names: Vec<_> = z.file_names().map(str::to_owned).collect();
    names.sort();
    assert_eq!(names, vec![".awcp/delta.json", "a.txt", "new.txt"]);
    let mut s = String::new();
    std::io::Read::read_to_string(&mut z.by_name(DELTA_ENTRY).unwrap(), &mut s).unwrap();
    assert!(s.contains("gone.txt"), "{s}");

    // A commit that does not descend from the base is told apart.
    let unrelated = git_ok(
        &repo,
        &["commit-tree", "-m", "x", &git_ok(&repo, &["write-tree"])],
    );
    assert!(!result::descends_from(&git, &repo, &unrelated, &base_id).unwrap());
}

#[test]
fn submodules_git_paths_and_oversize_files_are_refused_and_links_named() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("d1.git");
    let base_id = base_repo(tmp.path(), &repo);
    // A hostile executor's commit, made with plumbing.
    let hostile = |entries: &[(&str, &str, &str)]| -> String {
        let idx = tmp.path().join("idx");
        let _ = std::fs::remove_file(&idx);
        let run = |args: &[&str]| {
            let out = Command::new("git")
                .current_dir(&repo)
                .env("GIT_INDEX_FILE", &idx)
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                .args(args)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap().trim().to_owned()
        };
        run(&["read-tree", &base_id]);
        for (mode, id, path) in entries {
            run(&[
                "update-index",
                "--add",
                "--cacheinfo",
                &format!("{mode},{id},{path}"),
            ]);
        }
        let tree = run(&["write-tree"]);
        run(&["commit-tree", "-p", &base_id, "-m", "hostile", &tree])
    };
    let blob = |bytes: &[u8]| -> String {
        let mut c = Command::new("git")
            .current_dir(&repo)
            .args(["hash-object", "-w", "--stdin"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(bytes).unwrap();
        String::from_utf8(c.wait_with_output().unwrap().stdout)
            .unwrap()
            .trim()
            .to_owned()
    };
    let git = Git::new();
    let out = tmp.path().join("delta.zip");
    let lim = ExtractLimits::default();
    let none = result::LocalWorkspace::None;

    let sub = hostile(&[("160000", &base_id, "vendor/lib")]);
    let e = result::delta_zip(&git, &repo, &base_id, &sub, &out, &lim, &none).unwrap_err();
    assert!(e.to_string().contains("submodule"), "{e}");
    assert!(!out.exists(), "nothing written for a refused result");

    let gm = hostile(&[("100644", &blob(b"[submodule]"), ".gitmodules")]);
    let e = result::delta_zip(&git, &repo, &base_id, &gm, &out, &lim, &none).unwrap_err();
    assert!(e.to_string().contains(".gitmodules"), "{e}");

    let big = hostile(&[("100644", &blob(&vec![b'x'; 5000]), "big.bin")]);
    let small = ExtractLimits {
        max_file_bytes: 4096,
        ..ExtractLimits::default()
    };
    let e = result::delta_zip(&git, &repo, &base_id, &big, &out, &small, &none).unwrap_err();
    assert!(e.to_string().contains("big.bin"), "{e}");
    assert!(!out.exists());

    let link = hostile(&[("120000", &blob(b"/etc/passwd"), "escape")]);
    let d = result::delta_zip(&git, &repo, &base_id, &link, &out, &lim, &none).unwrap();
    assert_eq!(d.links, vec!["escape"]);
    assert!(d.changed.is_empty());
}

#[test]
fn a_workspace_repository_is_the_base_commits_parent_and_stays_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    git_ok(&ws, &["init", "-q"]);
    std::fs::write(ws.join("a.txt"), b"committed\n").unwrap();
    git_ok(&ws, &["add", "a.txt"]);
    git_ok(&ws, &["commit", "-q", "-m", "first"]);
    let head = git_ok(&ws, &["rev-parse", "HEAD"]);
    let refs_before = git_ok(&ws, &["for-each-ref"]);
    let git = Git::new();
    let (h, objects) = base::repository_head(&git, &ws).expect("a repository");
    assert_eq!(h, head);
    // A subdirectory is not the top of the repository.
    std::fs::create_dir(ws.join("sub")).unwrap();
    assert!(base::repository_head(&git, &ws.join("sub")).is_none());
    assert!(base::repository_head(&git, tmp.path()).is_none());

    let repo = tmp.path().join("d.git");
    base::init_bare(&git, &repo).unwrap();
    base::add_alternate(&repo, &objects).unwrap();
    let z = tmp.path().join("ws.zip");
    zip_of(&z, &[("a.txt", b"committed, then edited\n", 0o644)]);
    let id = base::commit_zip(
        &git,
        &base::BaseCommit {
            repo: &repo,
            zip: &z,
            branch_ref: "refs/heads/awcp/d2",
            parent: Some(&head),
            message: "uncommitted changes",
            identity: &Identity::delegator(),
            time: 1_700_000_000,
        },
    )
    .unwrap();
    assert_eq!(git_ok(&repo, &["rev-parse", &format!("{id}^")]), head);
    assert_eq!(
        git_ok(&ws, &["for-each-ref"]),
        refs_before,
        "no ref of the workspace changed"
    );
}

#[test]
fn http_backend_answers_the_ref_advertisement_and_nothing_else() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("d1.git");
    base_repo(tmp.path(), &repo);
    assert!(serve::is_smart_path(
        "GET",
        "info/refs",
        "service=git-upload-pack"
    ));
    assert!(!serve::is_smart_path("GET", "config", ""));
    let git = Git::new();
    let body = tmp.path().join("resp");
    let r = serve::run(
        &git,
        &serve::CgiRequest {
            project_root: tmp.path(),
            path_info: "/d1.git/info/refs",
            method: "GET",
            query: "service=git-upload-pack",
            content_type: None,
            content_encoding: None,
            git_protocol: None,
            body: None,
            allow_push: false,
        },
        &body,
    )
    .unwrap();
    assert_eq!(r.status, 200);
    assert!(r
        .headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("content-type")
            && v == "application/x-git-upload-pack-advertisement"));
    let text = std::fs::read(&body).unwrap();
    assert!(String::from_utf8_lossy(&text).contains("refs/heads/awcp/d1"));
    // Pushes refused when not allowed.
    let r = serve::run(
        &git,
        &serve::CgiRequest {
            query: "service=git-receive-pack",
            ..serve::CgiRequest {
                project_root: tmp.path(),
                path_info: "/d1.git/info/refs",
                method: "GET",
                query: "",
                content_type: None,
                content_encoding: None,
                git_protocol: None,
                body: None,
                allow_push: false,
            }
        },
        &body,
    )
    .unwrap();
    assert_eq!(r.status, 403);
    let _ = Config::User;
}

#[test]
fn an_executor_follows_no_local_or_command_url_and_no_option_shaped_one() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("d1.git");
    let base_id = base_repo(tmp.path(), &repo);
    let git = Git::new().allow_protocols(awcp_transports::git::EXECUTOR_PROTOCOLS);
    let gd = tmp.path().join("exec.git");
    let wd = tmp.path().join("work");
    std::fs::create_dir(&wd).unwrap();
    let marker = tmp.path().join("ran");
    for url in [
        repo.to_string_lossy().into_owned(),
        format!("file://{}", repo.display()),
        format!("ext::sh -c touch% {}", marker.display()),
        "--upload-pack=touch /tmp/x".to_owned(),
    ] {
        let c = work::Checkout {
            git_dir: &gd,
            work_dir: &wd,
            url: &url,
            credential: &Credential::None,
        };
        let e = work::clone_base(&git, &c, "awcp/d1", &base_id, "awcp/d1").unwrap_err();
        assert!(
            !e.to_string().is_empty() && std::fs::read_dir(&wd).unwrap().next().is_none(),
            "{url}: {e}"
        );
        let _ = std::fs::remove_dir_all(&gd);
    }
    assert!(!marker.exists(), "no command ran");
    // A base branch that moved is refused.
    let git = Git::new();
    let url = repo.to_string_lossy().into_owned();
    let c = work::Checkout {
        git_dir: &gd,
        work_dir: &wd,
        url: &url,
        credential: &Credential::None,
    };
    let e = work::clone_base(&git, &c, "awcp/d1", &"0".repeat(40), "awcp/d1").unwrap_err();
    assert!(e.to_string().contains("moved"), "{e}");
}

/// An SSH key in a handle lives in a 0600 file in the executor's own directory while the
/// work directory is set up, never in the work directory, and goes at release (and when the
/// setup fails).
#[test]
fn an_ssh_key_from_a_handle_is_a_0600_file_outside_the_work_directory_until_release() {
    use awcp_proto::wire::{GitAuth, GitHandle};
    use awcp_proto::{DelegationId, ResourceName, TransportHandle};
    use awcp_transports::ExecutorTransport;
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("d1.git");
    let base_id = base_repo(tmp.path(), &repo);
    let root = tmp.path().join("exec-git");
    // `file://` allowed here only to reach the test's repository without a server.
    let ex = awcp_transports::git::GitExecutor::new(&root).with_git(Git::new());
    let key = "-----BEGIN OPENSSH PRIVATE KEY-----\nnot-a-real-key-4d2c\n-----END OPENSSH PRIVATE KEY-----";
    let id = DelegationId::new("dlg_key").unwrap();
    let names = [ResourceName::new("workspace").unwrap()];
    let handle = |url: String| {
        TransportHandle::Git(GitHandle {
            repo_url: url,
            base_branch: "awcp/d1".into(),
            base_commit: base_id.clone(),
            auth: Some(GitAuth::Ssh {
                private_key: Some(key.into()),
                host_key: None,
            }),
        })
    };
    let wd = tmp.path().join("work");
    std::fs::create_dir(&wd).unwrap();
    ex.setup_git(
        &id,
        &wd,
        &handle(repo.to_string_lossy().into_owned()),
        &names,
    )
    .unwrap();
    let key_file = root.join("work.key");
    let mode = std::fs::metadata(&key_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let in_work: Vec<_> = walk_files(&wd)
        .into_iter()
        .filter(|p| {
            std::fs::read(p)
                .unwrap()
                .windows(8)
                .any(|w| w == b"4d2c\n---")
        })
        .collect();
    assert!(in_work.is_empty(), "{in_work:?}");
    ex.release(&wd).unwrap();
    assert!(!key_file.exists());
    assert!(!root.join("work.git").exists());
    // A failed setup leaves no key either.
    let wd2 = tmp.path().join("work2");
    std::fs::create_dir(&wd2).unwrap();
    let e = ex
        .setup_git(
            &id,
            &wd2,
            &handle("ssh://127.0.0.1:1/none.git".into()),
            &names,
        )
        .unwrap_err();
    assert!(!e.to_string().contains("4d2c"), "{e}");
    assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0);
}

fn walk_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if e.file_type().unwrap().is_dir() {
            out.extend(walk_files(&p));
        } else {
            out.push(p);
        }
    }
    out
}
