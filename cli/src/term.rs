//! Standard error shared by log lines and the live progress line. On a terminal the progress
//! line is redrawn in place (`\r`, clear line); a log line written meanwhile first clears it,
//! is written whole, and the progress line is drawn again below it, so a log line never ends
//! up glued to the progress text and the progress line is never lost.

use std::io::Write;
use std::sync::{Mutex, MutexGuard};

/// The progress line on screen now (only on a terminal).
static SHOWN: Mutex<Option<String>> = Mutex::new(None);

fn shown() -> MutexGuard<'static, Option<String>> {
    SHOWN.lock().unwrap_or_else(|e| e.into_inner())
}

const CLEAR: &[u8] = b"\r\x1b[2K";

/// Draws `line` as the terminal's progress line (replacing the one shown).
pub(crate) fn draw_progress(line: &str) {
    let mut g = shown();
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(CLEAR);
    let _ = err.write_all(line.as_bytes());
    let _ = err.flush();
    *g = Some(line.to_owned());
}

/// Ends the progress line: what it last said stays on screen, the cursor moves below it.
pub(crate) fn end_progress() {
    if shown().take().is_some() {
        eprintln!();
    }
}

/// What a log record is written as, given the progress line on screen.
fn framed(record: &[u8], progress: Option<&str>) -> Vec<u8> {
    match progress {
        None => record.to_vec(),
        Some(line) => [CLEAR, record, line.as_bytes()].concat(),
    }
}

/// A log record on its way to stderr (the tracing subscriber's writer, one per record): it is
/// written when dropped, around the progress line.
#[derive(Default)]
pub struct LogWriter(Vec<u8>);

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let g = shown();
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(&framed(&self.0, g.as_deref()));
        let _ = err.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_record_clears_the_progress_line_and_draws_it_again_below() {
        assert_eq!(framed(b"WARN x\n", None), b"WARN x\n");
        assert_eq!(
            framed(b"WARN x\n", Some("[ 1.0s] state: running")),
            b"\r\x1b[2KWARN x\n[ 1.0s] state: running"
        );
    }
}
