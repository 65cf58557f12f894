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

    /// Runs `main` on a new multi-threaded runtime (one worker per core). A panic in `main`
    /// propagates; blocking tasks still running are not waited for.
    fn block_on<F: Future>(main: F) -> F::Output {
        let rt = tokio::runtime::Builder::new_multi_thread()
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
