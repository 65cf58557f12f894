//! `awcp diff` and MCP `delegate_snapshots`: a snapshot preview (what applying it would do,
//! `GET /delegation/{id}/snapshots/{sid}/diff`) as text for a person or a model.

use serde_json::Value;

/// The snapshot `awcp diff ID` previews when none is named: the only pending one, or the
/// pending one the executor recommended, or else the last pending one. `Err` says why there
/// is none.
pub fn pick_pending(snapshots: &Value) -> Result<String, String> {
    let pending: Vec<&Value> = snapshots
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["status"] == "pending")
        .collect();
    let pick = pending
        .iter()
        .find(|s| s["recommended"] == true)
        .or(pending.last());
    match pick.and_then(|s| s["id"].as_str()) {
        Some(id) => Ok(id.to_owned()),
        None => Err(
            "no pending snapshot to preview (applied and discarded snapshots leave nothing to \
             diff; list them with `awcp snapshots ID`)"
                .into(),
        ),
    }
}

/// The preview as text: a summary line per file (`A`dded, `M`odified, `D`eleted), the local
/// edits it conflicts with and what it refuses, then the unified diffs.
pub fn render(v: &Value) -> String {
    let mut out = String::new();
    let files = v["files"].as_array().cloned().unwrap_or_default();
    if files.is_empty() {
        out.push_str("no changes to apply\n");
    }
    for f in &files {
        let mark = match f["change"].as_str() {
            Some("added") => 'A',
            Some("deleted") => 'D',
            _ => 'M',
        };
        out.push_str(&format!("{mark} {}", f["path"].as_str().unwrap_or("?")));
        if let Some(n) = f["note"].as_str() {
            out.push_str(&format!("  ({n})"));
        }
        out.push('\n');
    }
    for (key, what) in [
        (
            "conflicts",
            "conflict (edited locally; the apply refuses until resolved)",
        ),
        ("refused", "refused (never written)"),
    ] {
        for p in v[key].as_array().into_iter().flatten() {
            out.push_str(&format!("! {what}: {}\n", p.as_str().unwrap_or("?")));
        }
    }
    if v["truncated"] == true {
        out.push_str("(some diffs left out: raise --max-bytes to see them)\n");
    }
    for f in &files {
        if let Some(d) = f["diff"].as_str() {
            out.push('\n');
            out.push_str(d);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_pending_snapshot_is_picked_recommended_first() {
        let s = json!([
            {"id": "snap_1", "status": "applied"},
            {"id": "snap_2", "status": "pending", "recommended": true},
            {"id": "snap_3", "status": "pending"},
        ]);
        assert_eq!(pick_pending(&s).unwrap(), "snap_2");
        let s =
            json!([{"id": "snap_1", "status": "pending"}, {"id": "snap_3", "status": "pending"}]);
        assert_eq!(pick_pending(&s).unwrap(), "snap_3");
        assert!(pick_pending(&json!([{"id": "snap_1", "status": "applied"}])).is_err());
    }

    #[test]
    fn a_preview_renders_as_a_file_list_then_the_diffs() {
        let v = json!({
            "files": [
                {"path": "w/a.txt", "change": "modified", "diff": "--- a/w/a.txt\n+++ b/w/a.txt\n@@ -1 +1 @@\n-x\n+y\n"},
                {"path": "w/b.bin", "change": "added", "note": "binary, 3 bytes"},
                {"path": "w/c.txt", "change": "deleted"},
            ],
            "conflicts": ["w/d.txt"], "refused": [], "truncated": false,
        });
        let t = render(&v);
        assert!(t.starts_with("M w/a.txt\nA w/b.bin  (binary, 3 bytes)\nD w/c.txt\n! conflict"));
        assert!(t.ends_with("-x\n+y\n"));
    }
}
