//! Executing the engine's outputs, by family: messages to the executor here, transports in
//! `transport.rs`, snapshots in `snapshots.rs`, event streams and results in `receive.rs`.

use super::*;

impl<R: Runtime> Loop<R> {
    pub(super) fn execute(&mut self, out: DelegatorOutput) {
        self.journal_for(&out);
        match out {
            DelegatorOutput::ScanWorkspace { id } => self.scan(id),
            DelegatorOutput::SendMessage {
                id,
                to,
                peer,
                message,
                dialect,
            } => {
                // A large archive is streamed from its file; otherwise START's inline
                // archive becomes the body's buffer: never held twice.
                let body = match encode_message_split(&message, dialect) {
                    Some(split) => OutBody::Split(split),
                    None => OutBody::Text(encode_message_owned(*message, dialect)),
                };
                self.post(id, to, peer.to_string(), body);
            }
            DelegatorOutput::SendCancel { id, peer } => {
                let url = wire_http::cancel_url(&peer, &id);
                self.post(id, Outbound::Cancel, url, OutBody::None);
            }
            DelegatorOutput::SendAck { id, peer } => {
                let url = wire_http::ack_url(&peer, &id);
                self.post(id, Outbound::Ack, url, OutBody::None);
            }
            DelegatorOutput::PrepareTransport {
                id,
                transport,
                access_mode,
                expires_at,
                layout,
                delivery: _,
            } if transport.is_live() => {
                self.prepare_live(id, transport, access_mode, expires_at, layout)
            }
            DelegatorOutput::PrepareTransport {
                id,
                transport,
                access_mode,
                expires_at,
                layout,
                delivery,
            } => {
                let via = match transport {
                    TransportKind::Storage => Via::Storage(expires_at),
                    TransportKind::Git => Via::Git,
                    _ => Via::Archive,
                };
                self.prepare_archive(id, access_mode, layout, delivery, via)
            }
            DelegatorOutput::OpenEventStream {
                id,
                peer,
                last_event_id,
            } => self.open_stream(id, peer, last_event_id),
            DelegatorOutput::CloseEventStream { id } => {
                if let Some(h) = self.streams.remove(&id) {
                    h.abort();
                }
            }
            DelegatorOutput::FetchResult { id, peer } => self.fetch_result(id, peer),
            DelegatorOutput::ApplySnapshot {
                id,
                snapshot_id,
                layout,
                access_mode,
                checksum,
                rebaseline,
            } => self.apply(id, snapshot_id, layout, access_mode, checksum, rebaseline),
            DelegatorOutput::StoreSnapshot {
                id,
                snapshot,
                source,
            } => self.store(id, snapshot, source),
            DelegatorOutput::CloseApply { id } => self.close_apply(id),
            DelegatorOutput::DeleteStoredSnapshot { id, snapshot_id } => {
                self.delete_stored(id, snapshot_id)
            }
            DelegatorOutput::ResultsSettled { id } => self.settle_git(id),
            DelegatorOutput::ReleaseTransport { id } => self.release(id),
            DelegatorOutput::Event(ev) => self.on_event(ev),
        }
    }
}
