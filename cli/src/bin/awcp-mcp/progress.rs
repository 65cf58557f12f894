//! What the in-process delegator reports while a delegation runs: the executor's latest status
//! message and the bytes moved, kept per delegation for `delegate_output` and broadcast to a
//! foreground `delegate` that turns them into MCP `notifications/progress`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use awcp_driver::DelegatorHandle;
use awcp_proto::engine::delegator::DelegatorEvent;
use futures::StreamExt;
use tokio::sync::broadcast;

/// The latest progress of one delegation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Latest {
    /// The executor's latest status message.
    pub message: Option<String>,
    /// Its latest progress figure (0..1), if it sends one.
    pub progress: Option<f64>,
    /// Bytes of the workspace archive sent.
    pub bytes_sent: u64,
    /// Bytes of snapshots received.
    pub bytes_received: u64,
}

impl Latest {
    /// One line for a person: the message and the bytes moved.
    pub fn line(&self) -> String {
        let mut parts = Vec::new();
        if let Some(m) = &self.message {
            parts.push(format!("executor: {m}"));
        }
        if let Some(p) = self.progress {
            parts.push(format!("{:.0}%", p * 100.0));
        }
        if self.bytes_sent > 0 {
            parts.push(format!("workspace sent: {} bytes", self.bytes_sent));
        }
        if self.bytes_received > 0 {
            parts.push(format!("snapshot received: {} bytes", self.bytes_received));
        }
        parts.join("; ")
    }
}

/// Progress of every delegation of the in-process delegator.
pub struct Hub {
    latest: Mutex<HashMap<String, Latest>>,
    tx: broadcast::Sender<(String, Latest)>,
}

impl Hub {
    /// Subscribes to `d`'s events and transfers.
    pub fn start(d: &DelegatorHandle) -> Arc<Hub> {
        let hub = Arc::new(Hub {
            latest: Mutex::new(HashMap::new()),
            tx: broadcast::channel(256).0,
        });
        let mut events = d.events();
        let h = hub.clone();
        tokio::spawn(async move {
            while let Some(e) = events.next().await {
                if let DelegatorEvent::Progress {
                    id,
                    message,
                    progress,
                } = e
                {
                    h.update(id.as_str(), |l| {
                        if message.is_some() {
                            l.message = message;
                        }
                        if progress.is_some() {
                            l.progress = progress;
                        }
                    });
                }
            }
        });
        let mut transfers = d.transfers();
        let h = hub.clone();
        tokio::spawn(async move {
            while let Some(t) = transfers.next().await {
                h.update(t.id.as_str(), |l| {
                    if t.what == "snapshot" {
                        l.bytes_received += t.bytes;
                    } else {
                        l.bytes_sent += t.bytes;
                    }
                });
            }
        });
        hub
    }

    fn update(&self, id: &str, f: impl FnOnce(&mut Latest)) {
        let now = {
            let mut m = self.latest.lock().unwrap_or_else(|e| e.into_inner());
            let l = m.entry(id.to_owned()).or_default();
            f(l);
            l.clone()
        };
        let _ = self.tx.send((id.to_owned(), now));
    }

    /// The latest progress of `id`, if any arrived.
    pub fn latest(&self, id: &str) -> Option<Latest> {
        self.latest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned()
    }

    /// Every update from now on: `(delegation id, its latest progress)`.
    pub fn subscribe(&self) -> broadcast::Receiver<(String, Latest)> {
        self.tx.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_names_message_and_bytes() {
        let l = Latest {
            message: Some("step two".into()),
            progress: None,
            bytes_sent: 10,
            bytes_received: 0,
        };
        assert_eq!(l.line(), "executor: step two; workspace sent: 10 bytes");
        assert_eq!(Latest::default().line(), "");
    }
}
