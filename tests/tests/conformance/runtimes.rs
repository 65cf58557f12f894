//! The runtimes the suite runs on: a driver's runtime as it is ([`TestRuntime`]), and variants
//! of it ([`Variant`]) that change one thing for a whole run: authentication on
//! ([`WithAuth`]), or a wall clock that an operator sets back ([`ClockSetBack`]).

use std::future::Future;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use awcp_driver::runtime::BoxFuture;

// Runtimes: every scenario is generic over the driver's [`Driver`] (block_on, serve_*_on).

/// A driver the suite runs on, and whether every executor of the run requires a credential.
pub trait TestRuntime: awcp_driver::Driver {
    /// The credential every executor a scenario starts requires and every delegation (and raw
    /// request) presents; `None` runs the scenarios without authentication.
    const TOKEN: Option<&'static str> = None;
}

impl TestRuntime for awcp_tokio::TokioRuntime {}
impl TestRuntime for awcp_smol::SmolRuntime {}

/// What a [`Variant`] of a runtime changes.
pub trait VariantKind: Clone + Copy + Default + std::fmt::Debug + Send + Sync + 'static {
    /// The credential of the run, if this variant switches authentication on.
    const TOKEN: Option<&'static str> = None;
    /// The wall clock this variant's runtime reports, given the real one.
    fn wall_clock(real: SystemTime) -> SystemTime {
        real
    }
}

/// Runtime `R` with one thing changed for the whole run, as `V` says.
#[derive(Clone, Copy, Debug, Default)]
pub struct Variant<R, V>(R, PhantomData<V>);

/// Authentication on: every executor requires [`AuthOn::TOKEN`], so every request the
/// delegator makes must carry it.
#[derive(Clone, Copy, Debug, Default)]
pub struct AuthOn;

impl VariantKind for AuthOn {
    const TOKEN: Option<&'static str> = Some("conformance-token-7d1c");
}

/// Runtime `R` with authentication on.
pub type WithAuth<R> = Variant<R, AuthOn>;

/// A wall clock that is set back by an hour each time [`ClockSetBack::set_back`] is called,
/// as an operator or an NTP step would (only runtimes of this variant see it).
#[derive(Clone, Copy, Debug, Default)]
pub struct ClockSetBack;

static SET_BACK_HOURS: AtomicU64 = AtomicU64::new(0);

impl ClockSetBack {
    /// Sets the wall clock of every `ClockSetBack` runtime back by one more hour.
    pub fn set_back() {
        SET_BACK_HOURS.fetch_add(1, Ordering::SeqCst);
    }
}

impl VariantKind for ClockSetBack {
    fn wall_clock(real: SystemTime) -> SystemTime {
        let hours = SET_BACK_HOURS.load(Ordering::SeqCst);
        real - Duration::from_secs(3600 * hours)
    }
}

impl<R: TestRuntime + agent_rt::Host, V: VariantKind> TestRuntime for Variant<R, V> {
    const TOKEN: Option<&'static str> = match V::TOKEN {
        Some(t) => Some(t),
        None => R::TOKEN,
    };
}

impl<R: TestRuntime + agent_rt::Host, V: VariantKind> agent_rt::Runtime for Variant<R, V> {
    type Io = R::Io;
    type Listener = R::Listener;
    fn spawn(&self, fut: BoxFuture<()>) {
        self.0.spawn(fut)
    }
    fn spawn_blocking<T: Send + 'static>(
        &self,
        f: Box<dyn FnOnce() -> T + Send + 'static>,
    ) -> BoxFuture<T> {
        self.0.spawn_blocking(f)
    }
    fn sleep(&self, d: Duration) -> BoxFuture<()> {
        self.0.sleep(d)
    }
    fn connect(&self, host: String, port: u16) -> BoxFuture<std::io::Result<Self::Io>> {
        self.0.connect(host, port)
    }
    fn listen(&self, listener: std::net::TcpListener) -> std::io::Result<Self::Listener> {
        self.0.listen(listener)
    }
    fn accept<'a>(
        &self,
        listener: &'a Self::Listener,
    ) -> agent_rt::runtime::BorrowedFuture<'a, std::io::Result<(Self::Io, SocketAddr)>> {
        self.0.accept(listener)
    }
    fn listener_addr(listener: &Self::Listener) -> std::io::Result<SocketAddr> {
        R::listener_addr(listener)
    }
    fn wall_clock(&self) -> SystemTime {
        V::wall_clock(self.0.wall_clock())
    }
}

impl<R: TestRuntime + agent_rt::Host, V: VariantKind> agent_rt::Host for Variant<R, V> {
    const NAME: &'static str = <R as agent_rt::Host>::NAME;
    fn block_on<F: Future>(main: F) -> F::Output {
        <R as agent_rt::Host>::block_on(main)
    }
    fn shutdown_signal() -> BoxFuture<()> {
        <R as agent_rt::Host>::shutdown_signal()
    }
}
