//! The small runtime trait every driver implements (tokio, smol): spawn, blocking pool, sleep,
//! TCP connect and the wall clock. Everything else in this crate is runtime-neutral.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use awcp_proto::Timestamp;

/// A boxed, sendable future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What the driver core needs from an async runtime.
pub trait Runtime: Clone + Send + Sync + 'static {
    /// A connected TCP stream usable by hyper.
    type Io: hyper::rt::Read + hyper::rt::Write + Send + Unpin + 'static;

    /// Runs a future in the background.
    fn spawn(&self, fut: BoxFuture<()>);

    /// Runs blocking work (file system, transports, task runners) off the async threads.
    fn spawn_blocking<T: Send + 'static>(
        &self,
        f: Box<dyn FnOnce() -> T + Send + 'static>,
    ) -> BoxFuture<T>;

    /// Completes after `d`.
    fn sleep(&self, d: Duration) -> BoxFuture<()>;

    /// Opens a TCP connection.
    fn connect(&self, host: String, port: u16) -> BoxFuture<io::Result<Self::Io>>;

    /// The wall clock as a protocol timestamp. Overridable for simulated time.
    fn now(&self) -> Timestamp {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Timestamp::from_unix_millis(ms)
    }
}

/// Runs a closure on the runtime's blocking pool.
pub fn blocking<R: Runtime, T: Send + 'static>(
    rt: &R,
    f: impl FnOnce() -> T + Send + 'static,
) -> BoxFuture<T> {
    rt.spawn_blocking(Box::new(f))
}

/// Sleeps until `at` (immediately if it is past).
pub fn sleep_until<R: Runtime>(rt: &R, at: Timestamp) -> BoxFuture<()> {
    let d = at.saturating_duration_since(rt.now());
    rt.sleep(d)
}
