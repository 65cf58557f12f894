//! [`TokioRuntime`]: the runtime on tokio.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio_util::compat::{Compat, TokioAsyncReadCompatExt};

use crate::runtime::{BorrowedFuture, BoxFuture, Host, Runtime};

/// The tokio implementation of [`Runtime`]. Use it inside a tokio runtime.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioRuntime;

impl Runtime for TokioRuntime {
    type Io = Compat<tokio::net::TcpStream>;
    type Listener = tokio::net::TcpListener;

    fn spawn(&self, fut: BoxFuture<()>) {
        tokio::spawn(fut);
    }

    fn spawn_blocking<T: Send + 'static>(
        &self,
        f: Box<dyn FnOnce() -> T + Send + 'static>,
    ) -> BoxFuture<T> {
        let h = tokio::task::spawn_blocking(f);
        Box::pin(async move {
            match h.await {
                Ok(v) => v,
                Err(e) => std::panic::resume_unwind(e.into_panic()),
            }
        })
    }

    fn sleep(&self, d: Duration) -> BoxFuture<()> {
        Box::pin(tokio::time::sleep(d))
    }

    fn connect(&self, host: String, port: u16) -> BoxFuture<io::Result<Self::Io>> {
        Box::pin(async move {
            let s = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
            let _ = s.set_nodelay(true);
            Ok(s.compat())
        })
    }

    fn listen(&self, listener: std::net::TcpListener) -> io::Result<Self::Listener> {
        listener.set_nonblocking(true)?;
        tokio::net::TcpListener::from_std(listener)
    }

    fn accept<'a>(
        &self,
        listener: &'a Self::Listener,
    ) -> BorrowedFuture<'a, io::Result<(Self::Io, SocketAddr)>> {
        Box::pin(async move {
            let (s, peer) = listener.accept().await?;
            let _ = s.set_nodelay(true);
            Ok((s.compat(), peer))
        })
    }

    fn listener_addr(listener: &Self::Listener) -> io::Result<SocketAddr> {
        listener.local_addr()
    }
}

impl Host for TokioRuntime {
    const NAME: &'static str = "tokio";

    /// Runs `main` on a new runtime: by default a single-threaded one, whose tasks all run on
    /// the calling thread, while file and archive work goes to tokio's blocking pool (which
    /// grows with the load). With `TOKIO_WORKER_THREADS` set (tokio's own variable, e.g. `4`),
    /// a multi-threaded runtime with that many workers instead.
    ///
    /// Why one thread: the async side of a delegation is short bursts of HTTP, JSON and engine
    /// work between hand-offs to the blocking pool; with a worker per core, each burst woke a
    /// second worker to look for work to steal. Measured with the `delegations` bench
    /// (`tiny-daemon-sequential` on tmpfs, BENCHMARKS.md), one thread cut the CPU per tiny
    /// delegation by about a fifth in the daemon and an eighth in the executor, and the wall
    /// time by about a tenth, with no loss on the 51 MB rows. The cost: 50 delegations at once
    /// on a slow disk were 6–16 % slower, as a process's journal syncs (on its loop's thread)
    /// now pause its HTTP too, where a second worker carried on with other delegations.
    ///
    /// A panic in `main` propagates; blocking tasks still running are not waited for.
    fn block_on<F: Future>(main: F) -> F::Output {
        let mut builder = match worker_threads() {
            Some(n) => {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(n);
                b
            }
            None => tokio::runtime::Builder::new_current_thread(),
        };
        let rt = builder
            .enable_all()
            .build()
            .expect("the tokio runtime starts");
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rt.block_on(main)));
        // Dropping the runtime would wait for every blocking task (a task runner that never
        // finishes would hang the program, or a failed test).
        rt.shutdown_background();
        out.unwrap_or_else(|p| std::panic::resume_unwind(p))
    }

    fn shutdown_signal() -> BoxFuture<()> {
        shutdown_signal()
    }
}

/// `TOKIO_WORKER_THREADS` as a worker count; `None` when unset. A value that is not a positive
/// number is reported on stderr and ignored (tokio itself would panic on it).
fn worker_threads() -> Option<usize> {
    let v = std::env::var_os("TOKIO_WORKER_THREADS")?;
    let n = parse_worker_threads(&v);
    if n.is_none() {
        eprintln!(
            "warning: TOKIO_WORKER_THREADS={} is not a positive number; running on one thread",
            v.to_string_lossy()
        );
    }
    n
}

fn parse_worker_threads(v: &std::ffi::OsStr) -> Option<usize> {
    v.to_str()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .filter(|n| *n > 0)
}

/// Resolves on SIGINT or SIGTERM. The handlers are installed when this is called (inside the
/// runtime), not when the future is first polled: a signal that arrives in between is not lost
/// (nor does it kill the process with the default action).
pub fn shutdown_signal() -> BoxFuture<()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate()).ok();
        let int = signal(SignalKind::interrupt()).ok();
        Box::pin(async move {
            let wait = |s: Option<tokio::signal::unix::Signal>| async move {
                match s {
                    Some(mut s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = wait(term) => {},
                _ = wait(int) => {},
            }
        })
    }
    #[cfg(not(unix))]
    Box::pin(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_threads_takes_only_a_positive_count() {
        let p = |s: &str| parse_worker_threads(std::ffi::OsStr::new(s));
        assert_eq!(p("4"), Some(4));
        assert_eq!(p(" 2 "), Some(2));
        assert_eq!(p("0"), None);
        assert_eq!(p("-1"), None);
        assert_eq!(p("many"), None);
        assert_eq!(p(""), None);
    }

    #[test]
    fn block_on_runs_spawned_and_blocking_work_on_one_thread_by_default() {
        // The test process does not set TOKIO_WORKER_THREADS.
        if std::env::var_os("TOKIO_WORKER_THREADS").is_some() {
            return;
        }
        let main = std::thread::current().id();
        let (spawned_on, blocking_on) = TokioRuntime::block_on(async move {
            let (tx, rx) = futures::channel::oneshot::channel();
            TokioRuntime.spawn(Box::pin(async move {
                let _ = tx.send(std::thread::current().id());
            }));
            let spawned_on = rx.await.expect("the spawned task ran");
            let blocking_on = TokioRuntime
                .spawn_blocking(Box::new(|| std::thread::current().id()))
                .await;
            (spawned_on, blocking_on)
        });
        assert_eq!(spawned_on, main, "spawned tasks run on the calling thread");
        assert_ne!(blocking_on, main, "blocking work runs on the blocking pool");
    }
}
