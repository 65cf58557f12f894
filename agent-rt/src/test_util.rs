//! Test helpers (feature `test-util`): a throwaway PKI (a CA and certificates signed by it,
//! written as PEM files into a directory the caller owns; never use these in production) and a
//! slow client that checks whether a server cuts it off.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::{ClientTls, ClientTlsOptions, ServerOptions, ServerTls, ServerTlsOptions};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A certificate and its key, as PEM files.
#[derive(Clone, Debug)]
pub struct CertFiles {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
}

/// A test CA whose certificate is at [`TestPki::ca_file`].
pub struct TestPki {
    dir: PathBuf,
    name: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for TestPki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestPki")
            .field("dir", &self.dir)
            .field("name", &self.name)
            .finish()
    }
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

impl TestPki {
    /// A new CA named `name`, its files in `dir` (created).
    pub fn new(dir: &Path, name: &str) -> TestPki {
        std::fs::create_dir_all(dir).expect("PKI dir");
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} test CA"));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).expect("CA certificate");
        write(&dir.join(format!("{name}-ca.pem")), &cert.pem());
        TestPki {
            dir: dir.to_owned(),
            name: name.to_owned(),
            issuer: Issuer::new(params, key),
        }
    }

    /// The CA certificate (PEM): what clients trust (`--ca-file`) or servers require client
    /// certificates to chain to (`--client-ca`).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join(format!("{}-ca.pem", self.name))
    }

    fn leaf(&self, file: &str, names: &[&str], client: bool, expired: bool) -> CertFiles {
        let key = KeyPair::generate().expect("leaf key");
        let sans: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
        let mut params = CertificateParams::new(sans).expect("leaf params");
        params
            .distinguished_name
            .push(DnType::CommonName, names.first().copied().unwrap_or(file));
        params.extended_key_usages = vec![if client {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        }];
        if expired {
            params.not_before = rcgen::date_time_ymd(2001, 1, 1);
            params.not_after = rcgen::date_time_ymd(2002, 1, 1);
        }
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("leaf certificate");
        let files = CertFiles {
            cert: self.dir.join(format!("{}-{file}.pem", self.name)),
            key: self.dir.join(format!("{}-{file}.key", self.name)),
        };
        write(&files.cert, &cert.pem());
        write(&files.key, &key.serialize_pem());
        files
    }

    /// A server certificate for `names` (DNS names or IP addresses).
    pub fn server(&self, file: &str, names: &[&str]) -> CertFiles {
        self.leaf(file, names, false, false)
    }

    /// A server certificate for `names` that expired long ago.
    pub fn expired_server(&self, file: &str, names: &[&str]) -> CertFiles {
        self.leaf(file, names, false, true)
    }

    /// A client certificate (mTLS) for `name`.
    pub fn client(&self, file: &str, name: &str) -> CertFiles {
        self.leaf(file, &[name], true, false)
    }

    /// Client settings trusting only this CA, presenting `cert` if given.
    pub fn client_tls(&self, cert: Option<&CertFiles>) -> ClientTls {
        ClientTls::new(&ClientTlsOptions {
            ca_files: vec![self.ca_file()],
            no_public_roots: true,
            client_cert: cert.map(|c| c.cert.clone()),
            client_key: cert.map(|c| c.key.clone()),
        })
        .expect("test client TLS")
    }

    /// Server settings (default limits) presenting `cert`, requiring client certificates from
    /// this CA if `mtls`.
    pub fn server_options(&self, cert: &CertFiles, mtls: bool) -> ServerOptions {
        ServerOptions::with_tls(
            ServerTls::new(&ServerTlsOptions {
                cert: cert.cert.clone(),
                key: cert.key.clone(),
                client_ca: mtls.then(|| self.ca_file()),
                client_cert_optional: false,
            })
            .expect("test server TLS"),
        )
    }
}

/// Whether the server closes `s` (EOF or an error) within `deadline` while `trickle` (if any)
/// is written every `every`. Whatever the server answers meanwhile is appended to `got`.
pub fn closed_by_server(
    mut s: TcpStream,
    trickle: Option<&[u8]>,
    every: Duration,
    deadline: Duration,
    got: &mut Vec<u8>,
) -> bool {
    s.set_read_timeout(Some(every)).expect("read timeout");
    let until = Instant::now() + deadline;
    let mut buf = [0u8; 4096];
    while Instant::now() < until {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true,
        }
        if let Some(bytes) = trickle {
            if s.write_all(bytes).is_err() {
                return true;
            }
        }
    }
    false
}
