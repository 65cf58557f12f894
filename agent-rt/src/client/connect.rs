//! Connecting: TCP through the runtime, the TLS handshake, the HTTP/1.1 handshake, and how
//! a failure on a connection is reported.

use rustls::pki_types::ServerName;

use super::{ClientBody, HttpClient, NetError, Target};
use crate::io::MaybeTls;
use crate::runtime::Runtime;

/// The sending half of one HTTP/1.1 client connection.
type Sender = hyper::client::conn::http1::SendRequest<ClientBody>;

impl<R: Runtime> HttpClient<R> {
    async fn connect(&self, t: &Target) -> Result<MaybeTls<R::Io>, NetError> {
        let io = self
            .rt
            .connect(t.host.clone(), t.port)
            .await
            .map_err(|e| NetError::Connect(format!("connect {}: {e}", t.authority())))?;
        if !t.tls {
            return Ok(MaybeTls::Plain(io));
        }
        let name = ServerName::try_from(t.host.clone())
            .map_err(|e| NetError::Tls(format!("{}: not a valid TLS server name: {e}", t.host)))?;
        let stream = futures_rustls::TlsConnector::from(self.tls.config())
            .connect(name, io)
            .await
            .map_err(|e| NetError::Tls(format!("TLS handshake with {}: {e}", t.authority())))?;
        Ok(MaybeTls::Tls(Box::new(stream.into())))
    }

    /// A new connection to `t`, handshaken, its driving task spawned: the sender, a channel
    /// that says why the connection failed (e.g. the TLS alert of a server refusing our
    /// certificate), and whether it is TLS.
    pub(super) async fn open(
        &self,
        t: &Target,
        writev: bool,
    ) -> Result<(Sender, futures::channel::oneshot::Receiver<String>, bool), NetError> {
        let io = self.connect(t).await?;
        let tls = io.is_tls();
        let (sender, conn) = hyper::client::conn::http1::Builder::new()
            .writev(writev)
            .handshake(smol_hyper::rt::FuturesIo::new(io))
            .await
            .map_err(|e| NetError::Io(format!("handshake: {e}")))?;
        let (cause_tx, cause_rx) = futures::channel::oneshot::channel::<String>();
        self.rt.spawn(Box::pin(async move {
            if let Err(e) = conn.await {
                let _ = cause_tx.send(error_chain(&e));
            }
        }));
        Ok((sender, cause_rx, tls))
    }
}

/// A request to `t` that failed after its connection was made. A server refusing our
/// certificate (mTLS) says so in an alert after the handshake: over TLS, the failure is a TLS
/// one.
pub(super) fn request_failed(tls: bool, t: &Target, msg: String) -> NetError {
    if tls {
        NetError::Tls(format!("request to {}: {msg}", t.authority()))
    } else {
        NetError::Io(format!("request to {}: {msg}", t.authority()))
    }
}

/// An error and its sources, `outer: inner: …`.
pub(super) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s = format!("{s}: {t}");
        }
        cur = c.source();
    }
    s
}
