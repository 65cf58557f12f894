//! `awcp diff` and MCP `delegate_snapshots`: a snapshot preview (what applying it would do,
//! `GET /delegation/{id}/snapshots/{sid}/diff`) as text for a person or a model.

use awcp_driver::delegator::daemon::api::Snapshot;
use awcp_driver::delegator::{ChangeKind, Preview};

/// The snapshot `awcp diff ID` previews when none is named: the only pending one, or the
/// pending one the executor recommended, or else the last pending one. `Err` says why there
/// is none.
pub fn pick_pending(snapshots: &[Snapshot]) -> Result<String, String> {
    let pending: Vec<&Snapshot> = snapshots.iter().filter(|s| s.status == "pending").collect();
    let pick = pending.iter().find(|s| s.recommended).or(pending.last());
    match pick {
        Some(s) => Ok(s.id.clone()),
        None => Err(
            "no pending snapshot to preview (applied and discarded snapshots leave nothing to \
             diff; list them with `awcp snapshots ID`)"
                .into(),
        ),
    }
}

/// The preview as text: a summary line per file (`A`dded, `M`odified, `D`eleted), the local
/// edits it conflicts with and what it refuses, then the unified diffs.
pub fn render(v: &Preview) -> String {
    let mut out = String::new();
    if v.files.is_empty() {
        out.push_str("no changes to apply\n");
    }
    for f in &v.files {
        let mark = match f.change {
            ChangeKind::Added => 'A',
            ChangeKind::Deleted => 'D',
            ChangeKind::Modified => 'M',
        };
        out.push_str(&format!("{mark} {}", f.path));
        if let Some(n) = &f.note {
            out.push_str(&format!("  ({n})"));
        }
        out.push('\n');
    }
    for (list, what) in [
        (
            &v.conflicts,
            "conflict (edited locally; the apply refuses until resolved)",
        ),
        (&v.refused, "refused (never written)"),
    ] {
        for p in list {
            out.push_str(&format!("! {what}: {p}\n"));
        }
    }
    if v.truncated {
        out.push_str("(some diffs left out: raise --max-bytes to see them)\n");
    }
    for d in v.files.iter().filter_map(|f| f.diff.as_deref()) {
        out.push('\n');
        out.push_str(d);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use awcp_driver::delegator::FileChange;

    fn snap(id: &str, status: &str, recommended: bool) -> Snapshot {
        Snapshot {
            id: id.into(),
            status: status.into(),
            recommended,
            ..Default::default()
        }
    }

    #[test]
    fn the_pending_snapshot_is_picked_recommended_first() {
        let s = [
            snap("snap_1", "applied", false),
            snap("snap_2", "pending", true),
            snap("snap_3", "pending", false),
        ];
        assert_eq!(pick_pending(&s).unwrap(), "snap_2");
        let s = [
            snap("snap_1", "pending", false),
            snap("snap_3", "pending", false),
        ];
        assert_eq!(pick_pending(&s).unwrap(), "snap_3");
        assert!(pick_pending(&[snap("snap_1", "applied", false)]).is_err());
    }

    #[test]
    fn a_preview_renders_as_a_file_list_then_the_diffs() {
        let file = |path: &str, change, diff: Option<&str>, note: Option<&str>| FileChange {
            path: path.into(),
            change,
            diff: diff.map(Into::into),
            note: note.map(Into::into),
        };
        let v = Preview {
            files: vec![
                file(
                    "w/a.txt",
                    ChangeKind::Modified,
                    Some("--- a/w/a.txt\n+++ b/w/a.txt\n@@ -1 +1 @@\n-x\n+y\n"),
                    None,
                ),
                file("w/b.bin", ChangeKind::Added, None, Some("binary, 3 bytes")),
                file("w/c.txt", ChangeKind::Deleted, None, None),
            ],
            conflicts: vec!["w/d.txt".into()],
            ..Default::default()
        };
        let t = render(&v);
        assert!(t.starts_with("M w/a.txt\nA w/b.bin  (binary, 3 bytes)\nD w/c.txt\n! conflict"));
        assert!(t.ends_with("-x\n+y\n"));
    }
}
