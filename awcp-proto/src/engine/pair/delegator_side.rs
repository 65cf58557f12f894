//! The pair's in-memory world executing the delegator's outputs: requests to the executor,
//! transports, snapshots and events.

use super::*;

impl Pair {
    pub(super) fn on_delegator_output(&mut self, out: DelegatorOutput) {
        match out {
            DelegatorOutput::ScanWorkspace { id } => {
                self.note("d", || "ScanWorkspace".into());
                let mut stats = WorkspaceStats::default();
                stats.add_file("src/main.rs", 120);
                self.to_delegator.push_back(DelegatorInput::ScanCompleted {
                    id,
                    result: Ok(stats),
                });
            }
            DelegatorOutput::SendMessage {
                id,
                to: asked,
                message,
                dialect,
                ..
            } => {
                self.note("d", || format!("Send {}", message.type_str()));
                // Over the wire: encoded in the peer's dialect, decoded by the executor.
                let bytes = crate::wire::encode_message(&message, dialect);
                match crate::wire::decode_message(bytes.as_bytes()) {
                    Ok((m, d)) => self.post(&id, asked, Request::Message(Box::new(m), d)),
                    Err(e) => panic!("the executor cannot decode what the delegator sent: {e}"),
                }
            }
            DelegatorOutput::SendCancel { id, .. } => {
                self.note("d", || "SendCancel".into());
                self.post(&id.clone(), Outbound::Cancel, Request::Cancel(id));
            }
            DelegatorOutput::SendAck { id, .. } => {
                self.note("d", || "SendAck".into());
                self.post(&id.clone(), Outbound::Ack, Request::Ack(id));
            }
            DelegatorOutput::PrepareTransport {
                id,
                transport: TransportKind::Storage,
                expires_at,
                ..
            } => {
                self.note("d", || "PrepareTransport".into());
                let url = |key: &str| {
                    format!("http://s3.invalid/bucket/workspaces/{key}?X-Amz-Signature=00")
                };
                let handle = crate::wire::StorageHandle {
                    download_url: url(&format!("{id}.zip")),
                    upload_url: url(&format!("{id}-result.zip")),
                    checksum: "0".repeat(64),
                    expires_at: self.storage_urls_expire_at.unwrap_or(expires_at),
                    headers: Default::default(),
                };
                self.to_delegator
                    .push_back(DelegatorInput::TransportPrepared {
                        id,
                        result: Ok(Box::new(TransportHandle::Storage(handle))),
                        archive_token: None,
                    });
            }
            DelegatorOutput::PrepareTransport { id, .. } => {
                self.note("d", || "PrepareTransport".into());
                self.to_delegator
                    .push_back(DelegatorInput::TransportPrepared {
                        id,
                        result: Ok(Box::new(TransportHandle::Archive(ArchiveHandle {
                            data: ArchiveData {
                                base64: Some(EMPTY_ZIP.into()),
                                url: None,
                                local_file: None,
                                local_file_sha256: None,
                            },
                            checksum: "0".repeat(64),
                            size_bytes: Some(22),
                        }))),
                        archive_token: None,
                    });
            }
            DelegatorOutput::OpenEventStream {
                id, last_event_id, ..
            } => {
                self.note("d", || "OpenEventStream".into());
                let stream = StreamId(self.handle_id());
                self.streams.insert(stream, id.clone());
                self.to_executor.push_back(ExecutorInput::Subscribe {
                    stream,
                    id: id.clone(),
                    credential: None,
                    last_event_id,
                });
                self.to_delegator
                    .push_back(DelegatorInput::EventStreamOpened { id });
            }
            DelegatorOutput::CloseEventStream { id } => {
                self.note("d", || "CloseEventStream".into());
                let open: Vec<StreamId> = self
                    .streams
                    .iter()
                    .filter(|(_, i)| **i == id)
                    .map(|(s, _)| *s)
                    .collect();
                for stream in open {
                    self.streams.remove(&stream);
                    self.to_executor
                        .push_back(ExecutorInput::StreamClosed { stream });
                }
            }
            DelegatorOutput::FetchResult { id, .. } => {
                self.note("d", || "FetchResult".into());
                let request = RequestId(self.handle_id());
                self.requests.insert(request, (id.clone(), Asked::Result));
                self.to_executor.push_back(ExecutorInput::Request {
                    request,
                    credential: None,
                    origin: Some(ORIGIN.to_owned()),
                    body: Request::Result(id),
                });
            }
            DelegatorOutput::ApplySnapshot {
                id, snapshot_id, ..
            } => {
                self.note("d", || "ApplySnapshot".into());
                self.to_delegator
                    .push_back(DelegatorInput::SnapshotApplied {
                        id,
                        snapshot_id,
                        result: Ok(()),
                        left_out: Vec::new(),
                        changed: Vec::new(),
                    });
            }
            DelegatorOutput::StoreSnapshot {
                id,
                snapshot,
                source,
            } => {
                self.note("d", || "StoreSnapshot".into());
                self.stored_from.push(source);
                self.to_delegator.push_back(DelegatorInput::SnapshotStored {
                    id,
                    snapshot_id: snapshot.snapshot_id,
                    result: Ok(()),
                });
            }
            DelegatorOutput::DeleteStoredSnapshot { .. } => {
                self.note("d", || "DeleteStoredSnapshot".into());
            }
            DelegatorOutput::CloseApply { .. } => {
                self.note("d", || "CloseApply".into());
            }
            DelegatorOutput::ResultsSettled { .. } => {
                self.note("d", || "ResultsSettled".into());
            }
            DelegatorOutput::ReleaseTransport { id } => {
                self.note("d", || "ReleaseTransport".into());
                self.to_delegator
                    .push_back(DelegatorInput::TransportReleased {
                        id,
                        warnings: Vec::new(),
                    });
            }
            DelegatorOutput::Event(ev) => {
                self.note("d", || format!("Event {}", delegator_event_kind(&ev)));
                self.delegator_events.push(ev);
            }
        }
    }
}

fn delegator_event_kind(ev: &DelegatorEvent) -> String {
    match ev {
        DelegatorEvent::StateChanged { to, .. } => format!("StateChanged {to}"),
        DelegatorEvent::Ended { state, .. } => format!("Ended {state}"),
        DelegatorEvent::Progress { .. } => "Progress".into(),
        DelegatorEvent::Snapshot { .. } => "Snapshot".into(),
        DelegatorEvent::Forgotten { .. } => "Forgotten".into(),
        DelegatorEvent::PeerMisbehaved { .. } => "PeerMisbehaved".into(),
        DelegatorEvent::ConnectionLost { .. } => "ConnectionLost".into(),
    }
}
