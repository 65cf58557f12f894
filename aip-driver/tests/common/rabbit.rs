//! A RabbitMQ node of the test's own: Debian's `rabbitmq-server` started on free loopback
//! ports (AMQP, Erlang distribution, and its own epmd via `ERL_EPMD_PORT`) with a unique node
//! name and its data, logs, config, plugins file and Erlang cookie under a temp dir.
//!
//! A small guard shell script owns epmd and the broker: it starts them, reports readiness
//! from `rabbitmqctl wait <pidfile>` (the broker's own check, no sleep), obeys `stop`/`start`/
//! `kill` lines on its stdin, and when its stdin closes (the [`Broker`] is dropped, or the
//! test process exits in any way, SIGKILL included) stops the broker (`rabbitmqctl stop`,
//! then SIGKILL by PID if needed) and its epmd, by PID, leaving no process behind.
//!
//! Use [`shared`] for one node per test process, or [`Broker::start`] for a node a test
//! restarts or kills. Where `rabbitmq-server` is missing the tests skip with a notice, unless
//! `AIP_REQUIRE_RABBITMQ_TEST=1` (set by `.ci/run`) makes that a failure.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

const SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";
const CTL: &str = "/usr/lib/rabbitmq/bin/rabbitmqctl";

const GUARD: &str = r#"
set -u
. "$1/env.sh"
cd "$1"
start_broker() {
  "$SERVER" > "$1/server.log" 2>&1 < /dev/null &
  beam=$!
  "$CTL" wait "$RABBITMQ_PID_FILE" --timeout 120 > "$1/wait.log" 2>&1 &
  waiter=$!
  # Whichever ends first: the check (ready or timed out), or the broker (it failed to start,
  # e.g. a port taken meanwhile), so a broker that dies is reported at once, not after 120 s.
  wait -n -p first "$beam" "$waiter"
  status=$?
  if [ "$first" = "$waiter" ] && [ "$status" = 0 ]; then
    echo ready
  else
    # A broker that ended was reaped by `wait -n`: forget its PID (it may be reused).
    [ "$first" = "$beam" ] && beam=""
    kill "$waiter" 2> /dev/null
    wait "$waiter" 2> /dev/null
    echo "failed: $(tail -n 20 "$1/server.log" "$1/wait.log" | tr '\n' ' ')"
  fi
}
stop_broker() {
  if [ -n "$beam" ]; then
    timeout 30 "$CTL" stop > /dev/null 2>&1 || kill -9 "$beam" 2> /dev/null
    wait "$beam" 2> /dev/null
    rm -f "$RABBITMQ_PID_FILE"
    beam=""
  fi
}
epmd -port "$ERL_EPMD_PORT" -address 127.0.0.1 < /dev/null > /dev/null 2>&1 &
epmd_pid=$!
beam=""
start_broker "$1"
while read -r cmd; do
  case "$cmd" in
    stop) stop_broker; echo stopped ;;
    start) start_broker "$1" ;;
    forget-extra) EXTRA_DIR=""; echo forgotten ;;
    kill) kill -9 "$beam" 2> /dev/null; wait "$beam" 2> /dev/null; rm -f "$RABBITMQ_PID_FILE"; beam=""; echo killed ;;
    adduser\ *)
      name="${cmd#adduser }"
      if "$CTL" add_user "$name" "$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')" > "$1/ctl.log" 2>&1 &&
         "$CTL" set_permissions -p / "$name" '.*' '.*' '.*' >> "$1/ctl.log" 2>&1; then
        echo added
      else
        echo "failed: $(tail -n 5 "$1/ctl.log" | tr '\n' ' ')"
      fi ;;
    *) echo "unknown $cmd" ;;
  esac
done
stop_broker
kill "$epmd_pid" 2> /dev/null
wait "$epmd_pid" 2> /dev/null
# The node's directory (and what the test gave it to remove): a node kept in a static is never
# dropped, so its guard cleans up after it.
[ -n "${EXTRA_DIR:-}" ] && rm -rf "$EXTRA_DIR"
rm -rf "$1"
"#;

/// Whether the broker tests must run (CI) rather than skip.
pub fn required() -> bool {
    std::env::var("AIP_REQUIRE_RABBITMQ_TEST").is_ok_and(|v| v == "1")
}

/// Whether `rabbitmq-server` is installed.
pub fn available() -> bool {
    Path::new(SERVER).exists() && Path::new(CTL).exists()
}

/// The ports `rabbitmqctl` binds for its own Erlang distribution (RabbitMQ's default
/// `RABBITMQ_CTL_DIST_PORT_MIN..=MAX`, 25672 + 10000 ..= + 10010): another node's `rabbitmqctl
/// wait` or `stop` may hold one at any time, so a node must not be given one.
const CTL_DIST_PORTS: std::ops::RangeInclusive<u16> = 35672..=35682;

fn free_port() -> u16 {
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free loopback port");
        if !CTL_DIST_PORTS.contains(&port) {
            return port;
        }
    }
}

struct Guard {
    child: Child,
    stdin: Option<ChildStdin>,
    out: BufReader<ChildStdout>,
}

/// One RabbitMQ node (guest/guest, vhost `/`, loopback only).
pub struct Broker {
    guard: Mutex<Guard>,
    /// The AMQP port on 127.0.0.1.
    pub port: u16,
    /// The AMQPS port on 127.0.0.1 of a node started with [`Broker::start_tls`].
    pub tls_port: Option<u16>,
    _dir: tempfile::TempDir,
}

/// The AMQPS listener of [`Broker::start_tls`]: the broker's certificate and key (PEM) and
/// the CA that client certificates must chain to. The listener requires a client
/// certificate (`verify_peer`, `fail_if_no_peer_cert`), and the node offers SASL EXTERNAL
/// only, with the certificate's CN as the user name (`ssl_cert_login_from = common_name`, the
/// AIP v02.01 production setup): no user/password login works on it.
pub struct TlsListener {
    pub ca: std::path::PathBuf,
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
    /// A directory (e.g. the test PKI's) the guard removes with the node's own.
    pub remove_with_node: Option<std::path::PathBuf>,
}

impl Broker {
    /// Starts a node and waits until it runs. `None` (after a notice) where RabbitMQ is not
    /// installed and not [`required`].
    pub fn start() -> Option<Broker> {
        Self::start_with(None)
    }

    /// [`Broker::start`] with an AMQPS listener as `tls` says, on a free port
    /// ([`Broker::tls_port`]); users for certificate logins are added with
    /// [`Broker::add_user`].
    pub fn start_tls(tls: &TlsListener) -> Option<Broker> {
        Self::start_with(Some(tls))
    }

    fn start_with(tls: Option<&TlsListener>) -> Option<Broker> {
        if !available() {
            assert!(
                !required(),
                "AIP_REQUIRE_RABBITMQ_TEST=1 but {SERVER} is missing (apt-get install rabbitmq-server)"
            );
            eprintln!("NOTICE: rabbitmq-server is not installed; skipping the broker test");
            return None;
        }
        // Free ports are picked by binding port 0 and letting go, so another process may take
        // one before the broker binds it (seen in CI: `dist_port_already_used`). A node that
        // fails to start is stopped and a new one tried on new ports.
        const ATTEMPTS: u32 = 3;
        for attempt in 1..=ATTEMPTS {
            let (broker, said) = Self::launch(tls);
            if said == "ready" {
                return Some(broker);
            }
            assert!(attempt < ATTEMPTS, "RabbitMQ guard said: {said}");
            eprintln!("NOTICE: RabbitMQ node failed to start (attempt {attempt}), trying new ports: {said}");
            // The directory the test gave the node to remove is still the next node's.
            broker.command("forget-extra", "forgotten");
        }
        unreachable!("the last attempt returns or panics")
    }

    /// Starts one node's guard and returns what it said of the start ("ready" or why not).
    fn launch(tls: Option<&TlsListener>) -> (Broker, String) {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = tempfile::Builder::new()
            .prefix("aip-rabbit-")
            .tempdir()
            .expect("temp dir");
        let d = dir.path();
        let (port, dist, epmd) = (free_port(), free_port(), free_port());
        let node = format!(
            "aiptest-{}-{}@localhost",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        std::fs::create_dir_all(d.join("home")).unwrap();
        let mut conf = format!("listeners.tcp.default = 127.0.0.1:{port}\nloopback_users = none\n");
        let mut plugins = "[].\n";
        let tls_port = tls.map(|t| {
            let tls_port = free_port();
            conf.push_str(&format!(
                "listeners.ssl.default = 127.0.0.1:{tls_port}\n\
                 ssl_options.cacertfile = {}\n\
                 ssl_options.certfile = {}\n\
                 ssl_options.keyfile = {}\n\
                 ssl_options.verify = verify_peer\n\
                 ssl_options.fail_if_no_peer_cert = true\n\
                 auth_mechanisms.1 = EXTERNAL\n\
                 ssl_cert_login_from = common_name\n",
                t.ca.display(),
                t.cert.display(),
                t.key.display()
            ));
            plugins = "[rabbitmq_auth_mechanism_ssl].\n";
            tls_port
        });
        std::fs::write(d.join("rabbitmq.conf"), conf).unwrap();
        std::fs::write(d.join("enabled_plugins"), plugins).unwrap();
        std::fs::write(d.join("rabbitmq-env.conf"), "").unwrap();
        let p = d.display();
        let env = format!(
            "export HOME='{p}/home' RABBITMQ_NODENAME='{node}' RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
             RABBITMQ_NODE_PORT={port} RABBITMQ_DIST_PORT={dist} ERL_EPMD_PORT={epmd} \
             ERL_EPMD_ADDRESS=127.0.0.1 RABBITMQ_MNESIA_BASE='{p}/mnesia' RABBITMQ_LOG_BASE='{p}/log' \
             RABBITMQ_CONFIG_FILE='{p}/rabbitmq.conf' RABBITMQ_ENABLED_PLUGINS_FILE='{p}/enabled_plugins' \
             RABBITMQ_CONF_ENV_FILE='{p}/rabbitmq-env.conf' RABBITMQ_ADVANCED_CONFIG_FILE='{p}/advanced.config' \
             RABBITMQ_PID_FILE='{p}/rabbit.pid' RUNNING_UNDER_SYSTEMD=true \
             ERL_AFLAGS='-kernel inet_dist_use_interface {{127,0,0,1}}' SERVER='{SERVER}' CTL='{CTL}' \
             EXTRA_DIR='{}'\n",
            tls.and_then(|t| t.remove_with_node.as_ref())
                .map(|x| x.display().to_string())
                .unwrap_or_default()
        );
        std::fs::write(d.join("env.sh"), env).unwrap();
        std::fs::write(d.join("guard.sh"), GUARD).unwrap();
        let mut child = Command::new("bash")
            .arg(d.join("guard.sh"))
            .arg(d)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("sh");
        let stdin = child.stdin.take();
        let out = BufReader::new(child.stdout.take().unwrap());
        let b = Broker {
            guard: Mutex::new(Guard { child, stdin, out }),
            port,
            tls_port,
            _dir: dir,
        };
        let said = b.read_line();
        (b, said)
    }

    fn read_line(&self) -> String {
        let mut g = self.guard.lock().unwrap();
        let mut line = String::new();
        g.out.read_line(&mut line).expect("guard output");
        line.trim().to_string()
    }

    fn expect_line(&self, want: &str) {
        let line = self.read_line();
        assert_eq!(line, want, "RabbitMQ guard said: {line}");
    }

    fn command(&self, cmd: &str, want: &str) {
        {
            let mut g = self.guard.lock().unwrap();
            let stdin = g.stdin.as_mut().expect("guard stdin");
            writeln!(stdin, "{cmd}")
                .and_then(|_| stdin.flush())
                .unwrap();
        }
        self.expect_line(want);
    }

    /// `amqp://guest:guest@127.0.0.1:PORT/%2f`.
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    /// The broker's Erlang VM PID (from its pid file) while it runs.
    pub fn beam_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self._dir.path().join("rabbit.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Stops the broker gracefully (its data stays).
    pub fn stop(&self) {
        self.command("stop", "stopped");
    }

    /// Starts it again on the same ports and data, and waits until it runs.
    pub fn restart(&self) {
        self.command("start", "ready");
    }

    /// Adds user `name` (a random password nobody knows: it logs in with its certificate)
    /// with every permission on vhost `/`.
    pub fn add_user(&self, name: &str) {
        assert!(!name.contains(['\n', '\'']), "user name {name:?}");
        self.command(&format!("adduser {name}"), "added");
    }

    /// `amqps://127.0.0.1:TLS_PORT/%2f`: no user, so a client certificate logs in (EXTERNAL).
    pub fn tls_url(&self) -> String {
        format!(
            "amqps://127.0.0.1:{}/%2f",
            self.tls_port.expect("a node started with start_tls")
        )
    }

    /// SIGKILLs the broker (its data stays).
    pub fn kill(&self) {
        self.command("kill", "killed");
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let g = self.guard.get_mut().unwrap_or_else(|e| e.into_inner());
        drop(g.stdin.take());
        let _ = g.child.wait();
    }
}

/// The node this test process shares (started on first use). Its guard stops it when the
/// process exits (statics are not dropped, but the guard's stdin closes then).
pub fn shared() -> Option<Arc<Broker>> {
    static NODE: OnceLock<Option<Arc<Broker>>> = OnceLock::new();
    NODE.get_or_init(|| Broker::start().map(Arc::new)).clone()
}
