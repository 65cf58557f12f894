//! TLS with rustls (crypto: *ring*): client settings (trusted roots, an optional client
//! certificate) and server settings (certificate chain and key, optionally requiring client
//! certificates signed by a given CA: mTLS, or only asking for one:
//! [`ServerTlsOptions::client_cert_optional`]). A server hands the client certificate it
//! verified to its handlers ([`crate::server::ClientCertificate`]).
//!
//! Files are PEM. A client trusts the system's roots (falling back to Mozilla's bundled roots
//! where the system has none) plus any private CA given with [`ClientTlsOptions::ca_files`].

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// Why TLS settings could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or parsed.
    #[error("{}: {msg}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        msg: String,
    },
    /// rustls refused the configuration (e.g. the key does not match the certificate).
    #[error("TLS configuration: {0}")]
    Config(String),
}

fn file_error(path: &Path, msg: impl std::fmt::Display) -> TlsError {
    TlsError::File {
        path: path.to_owned(),
        msg: msg.to_string(),
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    static P: OnceLock<Arc<rustls::crypto::CryptoProvider>> = OnceLock::new();
    P.get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}

/// Every certificate in a PEM file (at least one).
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, e))?;
    if certs.is_empty() {
        return Err(file_error(path, "no PEM certificate in the file"));
    }
    Ok(certs)
}

/// The private key in a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| file_error(path, format!("no usable private key: {e}")))
}

fn roots_from(files: &[PathBuf]) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for f in files {
        for c in load_certs(f)? {
            roots
                .add(c)
                .map_err(|e| file_error(f, format!("not a usable CA certificate: {e}")))?;
        }
    }
    Ok(roots)
}

/// The system's trusted roots, or Mozilla's bundled ones where the system has none.
fn public_roots() -> RootCertStore {
    static ROOTS: OnceLock<RootCertStore> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let mut roots = RootCertStore::empty();
            let found = rustls_native_certs::load_native_certs();
            let (added, _ignored) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                tracing::debug!("no system root certificates; using the bundled Mozilla roots");
                roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            }
            roots
        })
        .clone()
}

/// What a client trusts and presents.
#[derive(Clone, Debug, Default)]
pub struct ClientTlsOptions {
    /// Extra CA certificates (PEM) to trust, e.g. a private CA (`--ca-file`).
    pub ca_files: Vec<PathBuf>,
    /// Trust only `ca_files`, not the system's (or bundled) public roots.
    pub no_public_roots: bool,
    /// A client certificate chain (PEM) to present to servers that ask (mTLS, `--client-cert`).
    pub client_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM, `--client-key`).
    pub client_key: Option<PathBuf>,
}

/// Built client TLS settings, cheap to clone. The default trusts the public roots and presents
/// no certificate; it is built on first use (plain-HTTP programs never load the roots).
#[derive(Clone, Default)]
pub struct ClientTls {
    config: Option<Arc<ClientConfig>>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("custom", &self.config.is_some())
            .finish()
    }
}

impl ClientTls {
    /// Builds client settings from files.
    pub fn new(opts: &ClientTlsOptions) -> Result<ClientTls, TlsError> {
        let mut roots = roots_from(&opts.ca_files)?;
        if !opts.no_public_roots {
            roots.extend(public_roots().roots);
        }
        if roots.is_empty() {
            return Err(TlsError::Config("no trusted root certificates".into()));
        }
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_root_certificates(roots);
        let mut config = match (&opts.client_cert, &opts.client_key) {
            (Some(c), Some(k)) => builder
                .with_client_auth_cert(load_certs(c)?, load_key(k)?)
                .map_err(|e| {
                    TlsError::Config(format!("client certificate {}: {e}", c.display()))
                })?,
            (None, None) => builder.with_no_client_auth(),
            _ => {
                return Err(TlsError::Config(
                    "a client certificate needs both --client-cert and --client-key".into(),
                ))
            }
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(ClientTls {
            config: Some(Arc::new(config)),
        })
    }

    /// Uses a rustls configuration built by the caller.
    pub fn from_config(config: Arc<ClientConfig>) -> ClientTls {
        ClientTls {
            config: Some(config),
        }
    }

    /// The rustls configuration (the shared default one if none was given).
    pub fn config(&self) -> Arc<ClientConfig> {
        static DEFAULT: OnceLock<Arc<ClientConfig>> = OnceLock::new();
        match &self.config {
            Some(c) => c.clone(),
            None => DEFAULT
                .get_or_init(|| {
                    ClientTls::new(&ClientTlsOptions::default())
                        .ok()
                        .and_then(|t| t.config)
                        .unwrap_or_else(|| {
                            // No roots at all: every https peer is refused with a clear error.
                            Arc::new(
                                ClientConfig::builder_with_provider(provider())
                                    .with_safe_default_protocol_versions()
                                    .expect("ring supports the default versions")
                                    .with_root_certificates(RootCertStore::empty())
                                    .with_no_client_auth(),
                            )
                        })
                })
                .clone(),
        }
    }
}

/// What a server presents and whom it requires.
#[derive(Clone, Debug)]
pub struct ServerTlsOptions {
    /// The server's certificate chain, leaf first (PEM, `--tls-cert`).
    pub cert: PathBuf,
    /// Its private key (PEM, `--tls-key`).
    pub key: PathBuf,
    /// Require client certificates signed by this CA (PEM, `--client-ca`): mTLS.
    pub client_ca: Option<PathBuf>,
    /// With `client_ca`: ask for a client certificate but accept connections without one
    /// (a certificate that is presented must still chain to `client_ca`, or the handshake
    /// fails). Handlers see which connections presented one
    /// ([`crate::server::ClientCertificate`]) and decide. Default `false`: one is required.
    pub client_cert_optional: bool,
}

impl ServerTlsOptions {
    /// Certificate and key, no client certificates.
    pub fn new(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        ServerTlsOptions {
            cert: cert.into(),
            key: key.into(),
            client_ca: None,
            client_cert_optional: false,
        }
    }
}

/// Built server TLS settings, cheap to clone.
#[derive(Clone)]
pub struct ServerTls {
    config: Arc<ServerConfig>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Builds server settings from files.
    pub fn new(opts: &ServerTlsOptions) -> Result<ServerTls, TlsError> {
        let builder = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let builder = match &opts.client_ca {
            Some(ca) => {
                let roots = roots_from(std::slice::from_ref(ca))?;
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider(),
                );
                let verifier = if opts.client_cert_optional {
                    verifier.allow_unauthenticated()
                } else {
                    verifier
                };
                let verifier = verifier
                    .build()
                    .map_err(|e| TlsError::Config(format!("client CA {}: {e}", ca.display())))?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut config = builder
            .with_single_cert(load_certs(&opts.cert)?, load_key(&opts.key)?)
            .map_err(|e| TlsError::Config(format!("certificate {}: {e}", opts.cert.display())))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(ServerTls {
            config: Arc::new(config),
        })
    }

    /// Uses a rustls configuration built by the caller.
    pub fn from_config(config: Arc<ServerConfig>) -> ServerTls {
        ServerTls { config }
    }

    /// The rustls configuration.
    pub fn config(&self) -> &Arc<ServerConfig> {
        &self.config
    }
}
