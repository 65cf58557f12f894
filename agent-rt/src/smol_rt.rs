//! [`SmolRuntime`]: the runtime on smol (and under async-std, which shares its reactor).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use smol::net::{TcpListener, TcpStream};

use crate::runtime::{BorrowedFuture, BoxFuture, Host, Runtime};

/// The smol implementation of [`Runtime`]: tasks on smol's global executor, blocking work on
/// the `blocking` pool, timers and sockets on `async-io`. Works under async-std too.
#[derive(Clone, Copy, Debug, Default)]
pub struct SmolRuntime;

impl Runtime for SmolRuntime {
    type Io = TcpStream;
    type Listener = TcpListener;

    fn spawn(&self, fut: BoxFuture<()>) {
        smol::spawn(fut).detach();
    }

    fn spawn_blocking<T: Send + 'static>(
        &self,
        f: Box<dyn FnOnce() -> T + Send + 'static>,
    ) -> BoxFuture<T> {
        Box::pin(smol::unblock(f))
    }

    fn sleep(&self, d: Duration) -> BoxFuture<()> {
        Box::pin(async move {
            smol::Timer::after(d).await;
        })
    }

    fn connect(&self, host: String, port: u16) -> BoxFuture<io::Result<Self::Io>> {
        Box::pin(async move {
            let s = TcpStream::connect((host.as_str(), port)).await?;
            let _ = s.set_nodelay(true);
            Ok(s)
        })
    }

    fn listen(&self, listener: std::net::TcpListener) -> io::Result<Self::Listener> {
        TcpListener::try_from(listener)
    }

    fn accept<'a>(
        &self,
        listener: &'a Self::Listener,
    ) -> BorrowedFuture<'a, io::Result<(Self::Io, SocketAddr)>> {
        Box::pin(async move {
            let (s, peer) = listener.accept().await?;
            let _ = s.set_nodelay(true);
            Ok((s, peer))
        })
    }

    fn listener_addr(listener: &Self::Listener) -> io::Result<SocketAddr> {
        listener.local_addr()
    }
}

impl Host for SmolRuntime {
    const NAME: &'static str = "smol";

    /// Runs `main` with [`smol::block_on`]; spawned tasks run on smol's global executor.
    fn block_on<F: Future>(main: F) -> F::Output {
        smol::block_on(main)
    }

    fn shutdown_signal() -> BoxFuture<()> {
        shutdown_signal()
    }
}

/// Resolves on SIGINT or SIGTERM (on non-Unix platforms, never). The handlers are installed
/// when this is called, not when the future is first polled: a signal that arrives in between
/// is not lost.
pub fn shutdown_signal() -> BoxFuture<()> {
    #[cfg(unix)]
    {
        use async_signal::{Signal, Signals};
        use smol::stream::StreamExt as _;
        let signals = Signals::new([Signal::Int, Signal::Term]).ok();
        Box::pin(async move {
            match signals {
                Some(mut s) => {
                    s.next().await;
                }
                None => std::future::pending::<()>().await,
            }
        })
    }
    #[cfg(not(unix))]
    Box::pin(std::future::pending::<()>())
}
