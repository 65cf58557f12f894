//! `awcp-relay`: serves executors behind NAT at stable public URLs. Each executor dials the
//! relay's tunnel endpoint (`awcp-executor --tunnel ws(s)://relay/tunnel`) and is served at
//! `<relay>/e/<name>/awcp` (WIRE.md §18).
//!
//! ```text
//! awcp-relay hash-token < alice.token            # the digest to register (the relay keeps no token)
//! echo "alice $(awcp-relay hash-token < alice.token)" >> executors.txt
//! awcp-relay --listen 0.0.0.0:10300 --executors executors.txt \
//!     --tls-cert cert.pem --tls-key key.pem --public-url https://relay.example:10300
//!
//! # Executors may authenticate with a client certificate instead (signed by --client-ca):
//! echo "bob $(awcp-relay cert-digest bob.pem)" >> executors.txt   # bob cert-sha256:<hex>
//! awcp-relay --executors executors.txt --tls-cert cert.pem --tls-key key.pem \
//!     --client-ca executors-ca.pem
//! ```
//! Every flag can also be set through the environment (`AWCP_RELAY_LISTEN`, …).

use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;

use awcp_aip_cli::RuntimeChoice;
use awcp_driver::relay::{self, RelayOptions};
use awcp_driver::Driver;

#[derive(clap::Parser, Debug)]
#[command(
    name = "awcp-relay",
    version,
    about = "Serve executors behind NAT: they dial in over a WebSocket tunnel, delegators reach them at <relay>/e/<name>/awcp"
)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// Address to listen on, for delegators and executors' tunnels alike (port 0 picks a free
    /// port; the URL is printed).
    #[arg(long, default_value = "127.0.0.1:10300")]
    listen: SocketAddr,
    /// The registered executors: one per line, `name sha256-hex-of-its-token` (see
    /// `awcp-relay hash-token`) or `name cert-sha256:<hex>` for an executor that authenticates
    /// with its TLS client certificate (see `awcp-relay cert-digest` and --client-ca); a name
    /// may have one of each. `#` starts a comment line.
    #[arg(long, value_name = "FILE")]
    executors: Option<PathBuf>,
    /// The URL delegators reach this relay at (default: the listening address); executors'
    /// public URLs are `<public-url>/e/<name>/awcp`.
    #[arg(long, value_parser = awcp_aip_cli::parse_public_url)]
    public_url: Option<String>,
    /// Serve TLS with this certificate chain (PEM, leaf first).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The TLS certificate's private key (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Ask TLS clients for a certificate signed by this CA (PEM) without requiring one
    /// (delegators present none): an executor whose tunnel presents a certificate registered
    /// as `name cert-sha256:<hex>` in --executors is authenticated by it, whatever its token.
    /// A certificate from another CA fails the TLS handshake. Needs --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    client_ca: Option<PathBuf>,
    /// Seconds a client may take to send a request's head (and the TLS handshake).
    #[arg(long, default_value_t = 30)]
    header_read_timeout: u64,
    /// Seconds a kept-alive connection may sit idle between requests.
    #[arg(long, default_value_t = 60)]
    idle_timeout: u64,
    /// Base seconds allowed for a request body (plus one second per 16 KiB received).
    #[arg(long, default_value_t = 60)]
    body_read_timeout: u64,
    /// Most HTTP connections open at once (the oldest idle one is closed to make room);
    /// executors' tunnels are not counted once upgraded.
    #[arg(long, default_value_t = 512)]
    max_connections: usize,
    /// JSON config file whose keys are flag names.
    #[arg(long, value_name = "FILE")]
    #[allow(dead_code)] // read by parse_command, before clap
    config: Option<PathBuf>,
    /// Async runtime to run on.
    #[arg(long, env = "AWCP_RUNTIME", value_enum, default_value_t)]
    runtime: RuntimeChoice,
    /// Less logging.
    #[arg(long, short, env = "AWCP_QUIET")]
    quiet: bool,
    /// Log line format on stderr.
    #[arg(long, env = "AWCP_LOG_FORMAT", value_enum, default_value_t)]
    log_format: awcp_aip_cli::LogFormat,
    /// Print a shell completion script for awcp-relay (bash, zsh, fish, elvish, powershell)
    /// and exit.
    #[arg(long, value_name = "SHELL")]
    completions: Option<clap_complete::Shell>,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Print the SHA-256 (hex) of the token read from standard input (its first line), the
    /// form a registry file (--executors) names it in.
    HashToken,
    /// Print `cert-sha256:<hex>`, the SHA-256 of a client certificate's DER (the first
    /// certificate of the PEM file), the form a registry file (--executors) names an executor
    /// that authenticates with that certificate in.
    CertDigest {
        /// The executor's client certificate (PEM).
        file: PathBuf,
    },
}

fn main() {
    let args: Args = awcp_aip_cli::parse_command(awcp_aip_cli::with_default_env(
        <Args as clap::CommandFactory>::command(),
        "AWCP_RELAY_",
    ));
    if let Some(shell) = args.completions {
        use clap::CommandFactory;
        let mut cmd = Args::command();
        clap_complete::generate(shell, &mut cmd, "awcp-relay", &mut std::io::stdout());
        return;
    }
    if let Some(Command::CertDigest { file }) = &args.command {
        match relay::cert_digest(file) {
            Ok(digest) => println!("{digest}"),
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(2);
            }
        }
        return;
    }
    if let Some(Command::HashToken) = args.command {
        let mut text = String::new();
        if let Err(e) = std::io::stdin().read_to_string(&mut text) {
            eprintln!("error: reading the token: {e}");
            std::process::exit(2);
        }
        let token = text.lines().next().unwrap_or("").trim();
        if token.is_empty() {
            eprintln!("error: no token on standard input");
            std::process::exit(2);
        }
        println!("{}", relay::token_digest(token));
        return;
    }
    awcp_aip_cli::init_logging(args.quiet, args.log_format);
    awcp_aip_cli::run_on!(args.runtime, run(args));
}

async fn run<R: Driver>(args: Args) {
    let fail = |m: String| -> ! {
        eprintln!("error: {m}");
        std::process::exit(2);
    };
    let Some(file) = &args.executors else {
        fail(
            "--executors FILE is required (lines `name sha256-hex-of-token` or \
             `name cert-sha256:<hex>`)"
                .into(),
        );
    };
    let text =
        std::fs::read_to_string(file).unwrap_or_else(|e| fail(format!("{}: {e}", file.display())));
    let registry =
        relay::parse_registry(&text).unwrap_or_else(|e| fail(format!("{}: {e}", file.display())));
    if registry.has_certificates() && args.client_ca.is_none() {
        fail(format!(
            "{}: executors registered by certificate (cert-sha256:) need --client-ca \
             (and --tls-cert/--tls-key)",
            file.display()
        ));
    }
    let secs = |s: u64| (s > 0).then(|| std::time::Duration::from_secs(s));
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(
            agent_rt::ServerTls::new(&agent_rt::ServerTlsOptions {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: args.client_ca.clone(),
                // Delegators on the public side present no certificate.
                client_cert_optional: true,
            })
            .unwrap_or_else(|e| fail(e.to_string())),
        ),
        _ => None,
    };
    let server = agent_rt::ServerOptions {
        tls,
        header_read_timeout: secs(args.header_read_timeout),
        idle_timeout: secs(args.idle_timeout),
        body_read_timeout: secs(args.body_read_timeout),
        max_connections: args.max_connections,
        ..agent_rt::ServerOptions::default()
    };
    let listener = std::net::TcpListener::bind(args.listen)
        .unwrap_or_else(|e| fail(format!("cannot listen on {}: {e}", args.listen)));
    let local = listener.local_addr().expect("bound socket has an address");
    let public = args
        .public_url
        .clone()
        .unwrap_or_else(|| format!("{}://{local}", server.scheme()));
    let rt = R::default();
    let handle = relay::start(rt.clone(), RelayOptions::new(public.clone(), registry));
    let signal = R::shutdown_signal();
    // The first stdout line is the URL, so scripts and tests can read it.
    println!("awcp-relay listening on {public}");
    // https://… → wss://…, http://… → ws://…
    let tunnel = format!("{}/tunnel", public.replacen("http", "ws", 1));
    tracing::info!(runtime = R::NAME, "relay ready: executors dial {tunnel}");
    if let Err(e) =
        agent_rt::server::serve(rt, listener, handle.http_handler(), server, signal).await
    {
        eprintln!("error: server failed: {e}");
        std::process::exit(1);
    }
}
