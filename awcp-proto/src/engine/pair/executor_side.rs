//! The pair's in-memory world executing the executor's outputs: answers, SSE events, tasks,
//! and the journal a driver keeps by the write-ahead rule ([`JournalModel`]).

use super::*;

impl Pair {
    /// Applies `out`'s journaling to [`Pair::executor_journal`] (when recording).
    fn journal_executor_output(&mut self, out: &ExecutorOutput) {
        if !self.record {
            return;
        }
        let record = |ex: &Executor, id: &DelegationId| {
            ex.assignment_record(id)
                .map(|r| serde_json::to_string(&r).unwrap_or_default())
        };
        let j = &mut self.executor_journal;
        if let Some(id) = out.journaled() {
            match record(&self.executor, id) {
                Some(text) if j.written.get(id) == Some(&text) => {}
                Some(text) => {
                    if j.written.contains_key(id) {
                        j.unsynced.insert(id.clone());
                    } else {
                        j.durable.insert(id.clone(), text.clone());
                    }
                    j.written.insert(id.clone(), text);
                }
                None => {
                    j.written.remove(id);
                    j.durable.remove(id);
                    j.unsynced.remove(id);
                }
            }
        }
        match out.journaling() {
            Journaling::Sync => {
                for id in std::mem::take(&mut j.unsynced) {
                    if let Some(text) = j.written.get(&id) {
                        j.durable.insert(id, text.clone());
                        j.syncs += 1;
                    }
                }
                // A capture is exempt: the outcome it is for is not what a restarted executor
                // needs (an assignment still active is failed at restart); its file is led to
                // by the snapshot event, durable before that event goes out. And a record the
                // engine already forgot is not stale: keeping it longer only retains more.
                let exempt = matches!(out, ExecutorOutput::CaptureSnapshot { .. });
                let stale: Vec<DelegationId> = j
                    .durable
                    .iter()
                    .filter(|(id, text)| {
                        !exempt
                            && record(&self.executor, id).is_some_and(|current| current != **text)
                    })
                    .map(|(id, _)| id.clone())
                    .collect();
                let kind = format!("{out:?}").chars().take(40).collect::<String>();
                for id in stale {
                    self.executor_journal.stale.push((kind.clone(), id));
                }
            }
            Journaling::Write | Journaling::Remove | Journaling::None => {}
        }
    }

    pub(super) fn on_executor_output(&mut self, out: ExecutorOutput) {
        self.journal_executor_output(&out);
        match out {
            ExecutorOutput::Respond { request, response } => {
                self.note("e", || "Respond".into());
                let Some((id, asked)) = self.requests.remove(&request) else {
                    return;
                };
                // Over the wire: the executor's encoder, the delegator's decoder.
                let (status, body) = crate::http_binding::encode_response(&response);
                match asked {
                    Asked::Post(to) => self.to_delegator.push_back(DelegatorInput::Reply {
                        id,
                        to,
                        reply: crate::http_binding::decode_reply(status, body.as_bytes()),
                    }),
                    Asked::Result => {
                        let result = serde_json::from_str(&body)
                            .map_err(|e| e.to_string())
                            .and_then(|v| crate::http_binding::decode_result(&id, &v))
                            .map_err(crate::engine::delegator::RequestFailure::Unusable);
                        self.to_delegator
                            .push_back(DelegatorInput::ResultFetched { id, result });
                    }
                }
            }
            ExecutorOutput::StreamEvent {
                stream,
                event,
                dialect,
                event_id,
            } => {
                self.note("e", || format!("StreamEvent {}", event.kind.type_str()));
                if !self.streams.contains_key(&stream) {
                    return;
                }
                let bytes = crate::wire::encode_event(&event, dialect);
                match crate::wire::decode_event(bytes.as_bytes()) {
                    Ok((event, _)) => self.to_delegator.push_back(DelegatorInput::TaskEvent {
                        event: Box::new(event),
                        event_id,
                    }),
                    Err(e) => panic!("the delegator cannot decode what the executor sent: {e}"),
                }
            }
            ExecutorOutput::CloseStream { stream } => {
                self.note("e", || "CloseStream".into());
                if let Some(id) = self.streams.remove(&stream) {
                    self.to_delegator
                        .push_back(DelegatorInput::EventStreamClosed { id, reason: None });
                }
            }
            ExecutorOutput::AllocateWorkDir { id, .. } => {
                self.note("e", || "AllocateWorkDir".into());
                self.to_executor
                    .push_back(ExecutorInput::WorkDirAllocated { id, result: Ok(()) });
            }
            ExecutorOutput::SetupTransport { id, .. } => {
                self.note("e", || "SetupTransport".into());
                self.to_executor.push_back(ExecutorInput::SetupCompleted {
                    id,
                    result: Ok(WorkspaceLayout::PerResource),
                });
            }
            ExecutorOutput::RunTask { id, .. } => {
                self.note("e", || "RunTask".into());
                let result = match &self.task {
                    TaskScript::Succeed => Ok(TaskOutcome {
                        summary: "done".into(),
                        highlights: vec!["src/main.rs".into()],
                    }),
                    TaskScript::Fail(m) => Err(TaskFailure::Failed(m.clone())),
                    TaskScript::Hang => return,
                };
                self.to_executor
                    .push_back(ExecutorInput::TaskFinished { id, result });
            }
            ExecutorOutput::StopTask { id } => {
                self.note("e", || "StopTask".into());
                self.to_executor.push_back(ExecutorInput::TaskFinished {
                    id,
                    result: Err(TaskFailure::Stopped),
                });
            }
            ExecutorOutput::CaptureSnapshot {
                id,
                snapshot_id,
                delivery,
                ..
            } => {
                self.note("e", || "CaptureSnapshot".into());
                self.captures.push(delivery.clone());
                let data = match delivery {
                    SnapshotDelivery::Inline => ArchiveData {
                        base64: Some(EMPTY_ZIP.into()),
                        url: None,
                        local_file: None,
                        local_file_sha256: None,
                    },
                    SnapshotDelivery::ByUrl { base } => ArchiveData {
                        base64: None,
                        url: Some(crate::http_binding::snapshot_url(&base, &id, &snapshot_id)),
                        local_file: None,
                        local_file_sha256: None,
                    },
                    SnapshotDelivery::Upload { url } => ArchiveData {
                        base64: Some(crate::wire::storage_result_text(&url)),
                        ..ArchiveData::default()
                    },
                    SnapshotDelivery::Push => ArchiveData {
                        base64: Some(crate::wire::git_result_text(&crate::wire::GitResult {
                            branch: format!("awcp/{id}"),
                            commit_hash: "c".repeat(40),
                            base_commit: "b".repeat(40),
                            changed_files: vec!["a.txt".into()],
                        })),
                        ..ArchiveData::default()
                    },
                };
                self.to_executor.push_back(ExecutorInput::SnapshotCaptured {
                    id,
                    result: Ok(Box::new(CapturedSnapshot {
                        data,
                        checksum: Some("0".repeat(64)),
                        metadata: BTreeMap::new(),
                    })),
                });
            }
            ExecutorOutput::Release { id, .. } => {
                self.note("e", || "Release".into());
                self.to_executor
                    .push_back(ExecutorInput::Released { id, result: Ok(()) });
            }
            ExecutorOutput::RemoveEmptyWorkDir { id, .. } => {
                self.note("e", || "RemoveEmptyWorkDir".into());
                self.to_executor
                    .push_back(ExecutorInput::Released { id, result: Ok(()) });
            }
            ExecutorOutput::EndTask { id, .. } => {
                self.note("e", || "EndTask".into());
                self.to_executor.push_back(ExecutorInput::TaskFinished {
                    id,
                    result: Err(TaskFailure::Stopped),
                });
            }
            ExecutorOutput::DropSnapshot { .. } => self.note("e", || "DropSnapshot".into()),
            ExecutorOutput::Event(ev) => {
                self.note("e", || format!("Event {}", executor_event_kind(&ev)));
                self.executor_events.push(ev);
            }
        }
    }
}

fn executor_event_kind(ev: &ExecutorEvent) -> String {
    match ev {
        ExecutorEvent::InviteReceived { .. } => "InviteReceived".into(),
        ExecutorEvent::StateChanged { to, .. } => format!("StateChanged {to}"),
        ExecutorEvent::Forgotten { .. } => "Forgotten".into(),
        ExecutorEvent::RecordChanged { .. } => "RecordChanged".into(),
        ExecutorEvent::PeerMisbehaved { .. } => "PeerMisbehaved".into(),
        ExecutorEvent::Ended { state, .. } => format!("Ended {state}"),
    }
}
