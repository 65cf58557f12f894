//! Kept connections (keep-alive) and per-peer request caps of an [`HttpClient`].

use super::{split_url, ClientBody, HttpClient, IDLE_FOR_AT_MOST, MAX_IDLE_PER_PEER};
use crate::runtime::Runtime;

/// Which connections may serve a request.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Peer {
    pub(super) tls: bool,
    pub(super) host: String,
    pub(super) port: u16,
}

/// Kept connections, newest last per peer.
#[derive(Default)]
pub(super) struct Pool {
    peers: std::sync::Mutex<std::collections::HashMap<Peer, Vec<Kept>>>,
    /// With a request cap, the slots of each peer a request is waiting for or holds (entries
    /// nobody uses are dropped whenever a slot is taken).
    slots: std::sync::Mutex<std::collections::HashMap<Peer, std::sync::Arc<async_lock::Semaphore>>>,
}

struct Kept {
    sender: hyper::client::conn::http1::SendRequest<ClientBody>,
    since: std::time::Instant,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept: usize = self.lock().values().map(Vec::len).sum();
        write!(f, "Pool({kept} kept)")
    }
}

impl Pool {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<Peer, Vec<Kept>>> {
        self.peers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The newest kept connection to `peer` that is idle now; closed and expired ones are
    /// dropped on the way, busy ones (a response still being read) stay.
    pub(super) fn checkout(
        &self,
        peer: &Peer,
    ) -> Option<hyper::client::conn::http1::SendRequest<ClientBody>> {
        let mut peers = self.lock();
        let kept = peers.get_mut(peer)?;
        kept.retain(|k| !k.sender.is_closed() && k.since.elapsed() <= IDLE_FOR_AT_MOST);
        let i = kept.iter().rposition(|k| k.sender.is_ready())?;
        let k = kept.remove(i);
        if kept.is_empty() {
            peers.remove(peer);
        }
        Some(k.sender)
    }

    /// Keeps `sender` for later requests to `peer` (it serves one once its response is read).
    pub(super) fn checkin(
        &self,
        peer: Peer,
        sender: hyper::client::conn::http1::SendRequest<ClientBody>,
    ) {
        let mut peers = self.lock();
        let kept = peers.entry(peer).or_default();
        if kept.len() >= MAX_IDLE_PER_PEER {
            kept.remove(0);
        }
        kept.push(Kept {
            sender,
            since: std::time::Instant::now(),
        });
    }
}

impl<R: Runtime> HttpClient<R> {
    /// How many kept connections could take a request now (open, idle, not expired).
    pub fn idle_connections(&self) -> usize {
        let peers = self.pool.lock();
        let idle = |k: &&Kept| {
            k.sender.is_ready() && !k.sender.is_closed() && k.since.elapsed() <= IDLE_FOR_AT_MOST
        };
        peers
            .values()
            .map(|kept| kept.iter().filter(idle).count())
            .sum()
    }

    /// A request slot of `url`'s peer, held until dropped, once one is free; none without a
    /// cap (or for a URL that cannot be sent to: the request fails on it).
    pub(super) async fn slot(&self, url: &str) -> Option<async_lock::SemaphoreGuardArc> {
        let max = self.max_requests_per_peer?;
        let t = split_url(url).ok()?;
        let peer = Peer {
            tls: t.tls,
            host: t.host,
            port: t.port,
        };
        let slots = {
            let mut all = self.pool.slots.lock().unwrap_or_else(|e| e.into_inner());
            // Peers nobody holds or waits for a slot of (only the map refers to them).
            all.retain(|_, s| std::sync::Arc::strong_count(s) > 1);
            all.entry(peer)
                .or_insert_with(|| std::sync::Arc::new(async_lock::Semaphore::new(max)))
                .clone()
        };
        Some(slots.acquire_arc().await)
    }
}
