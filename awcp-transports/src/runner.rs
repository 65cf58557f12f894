//! A built-in demo task runner for quickstarts.

use std::fs;

use awcp_proto::AccessMode;

use crate::cancel::CancelFlag;
use crate::traits::{TaskContext, TaskOutcome, TaskRunner};
use crate::walk::{walk, WalkOptions};

/// Name of the file the demo runner writes.
pub const NOTES_FILE: &str = "AWCP_NOTES.md";

/// Lists the workspace's files and, under `rw`, writes them with the task into
/// [`NOTES_FILE`] at the work-directory root.
#[derive(Clone, Copy, Debug, Default)]
pub struct DemoRunner;

impl TaskRunner for DemoRunner {
    fn run(
        &self,
        ctx: &TaskContext,
        progress: &dyn Fn(String),
        cancel: &CancelFlag,
    ) -> Result<TaskOutcome, awcp_proto::TaskFailure> {
        progress("scanning workspace".into());
        let w = walk(&ctx.work_dir, &WalkOptions::default(), cancel).map_err(|e| e.to_string())?;
        cancel.check().map_err(|e| e.to_string())?;
        let mut notes = format!(
            "# AWCP notes\n\nTask: {}\n\n{}\n\nFiles ({}):\n",
            ctx.description,
            ctx.prompt,
            w.files.len()
        );
        for f in &w.files {
            if f.rel != NOTES_FILE {
                notes.push_str(&format!("- {} ({} bytes)\n", f.rel, f.size));
            }
        }
        let mut highlights = Vec::new();
        if ctx.access_mode == AccessMode::Rw {
            progress(format!("writing {NOTES_FILE}"));
            fs::write(ctx.work_dir.join(NOTES_FILE), notes).map_err(|e| e.to_string())?;
            highlights.push(NOTES_FILE.to_owned());
        }
        Ok(TaskOutcome {
            summary: format!("Listed {} files.", w.files.len()),
            highlights,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use awcp_proto::{DelegationId, Timestamp};

    #[test]
    fn demo_runner_writes_notes_only_when_rw() {
        let t = tempfile::tempdir().unwrap();
        fs::write(t.path().join("a.txt"), b"a").unwrap();
        let mut ctx = TaskContext {
            delegation_id: DelegationId::new("d1").unwrap(),
            work_dir: t.path().to_path_buf(),
            description: "demo".into(),
            prompt: "list".into(),
            expires_at: Timestamp::from_unix_millis(0),
            access_mode: AccessMode::Ro,
            round: 1,
            earlier: Vec::new(),
        };
        let seen = std::sync::Mutex::new(Vec::new());
        let p = |m: String| seen.lock().unwrap().push(m);
        let out = DemoRunner.run(&ctx, &p, &CancelFlag::new()).unwrap();
        assert!(out.highlights.is_empty());
        assert!(!t.path().join(NOTES_FILE).exists());
        ctx.access_mode = AccessMode::Rw;
        let out = DemoRunner.run(&ctx, &p, &CancelFlag::new()).unwrap();
        assert_eq!(out.highlights, vec![NOTES_FILE]);
        assert!(fs::read_to_string(t.path().join(NOTES_FILE))
            .unwrap()
            .contains("a.txt"));
        assert!(!seen.lock().unwrap().is_empty());
        let c = CancelFlag::new();
        c.cancel();
        assert!(DemoRunner.run(&ctx, &p, &c).is_err());
    }
}
