//! The AMQP 0-9-1 side (lapin): one connection and one confirm-mode channel, the SDK's
//! declarations, publishing with the SDK's properties, consuming with manual acks.
//!
//! lapin runs its socket I/O on its own reactor thread, so a [`Link`] works under any async
//! runtime (tokio, smol, async-std); the engine loops use only [`agent_rt::Runtime`].

use aip_proto::group::wire::{INBOX_EXCHANGE, INBOX_MESSAGE_TTL_MS, INBOX_QUEUE_EXPIRES_MS};
use aip_proto::group::Publish;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use lapin::publisher_confirm::Confirmation;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};

pub use lapin::message::Delivery;
pub use lapin::Consumer;

/// TLS for the broker connection (`amqps://`), and the client certificate that logs in with
/// SASL EXTERNAL (the AIP v02.01 production path: the broker verifies the certificate and
/// takes the user name from it, e.g. its CN is the AIC).
///
/// The system's trusted roots are used, plus [`AmqpTls::ca_pem`]. With a client certificate
/// and no user in the broker URL, the connection logs in with EXTERNAL
/// ([`AmqpTls::login_url`]); with a user and password in the URL, it logs in with PLAIN over
/// TLS and still presents the certificate if the broker asks for one.
#[derive(Clone, Default)]
pub struct AmqpTls {
    /// Extra CA certificates to trust (PEM), e.g. the broker's private CA.
    pub ca_pem: Option<String>,
    /// This side's certificate chain (PEM) and its private key (PEM, PKCS#8, SEC1 or PKCS#1).
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for AmqpTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpTls")
            .field("ca_pem", &self.ca_pem.as_ref().map(|_| "…"))
            .field(
                "identity",
                &self.identity.as_ref().map(|_| "(certificate, key)"),
            )
            .finish()
    }
}

impl AmqpTls {
    /// Reads the CA file and the client certificate and key files (all PEM). Each is optional;
    /// a certificate needs its key.
    pub fn from_files(
        ca: Option<&std::path::Path>,
        cert: Option<&std::path::Path>,
        key: Option<&std::path::Path>,
    ) -> Result<AmqpTls, String> {
        let read = |p: &std::path::Path| {
            std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
        };
        let ca_pem = match ca {
            Some(p) => Some(
                String::from_utf8(read(p)?)
                    .map_err(|_| format!("{} is not a PEM file", p.display()))?,
            ),
            None => None,
        };
        let identity = match (cert, key) {
            (Some(c), Some(k)) => Some((read(c)?, read(k)?)),
            (None, None) => None,
            (Some(_), None) | (None, Some(_)) => {
                return Err("a client certificate needs its key, and a key its certificate".into())
            }
        };
        Ok(AmqpTls { ca_pem, identity })
    }

    /// Whether a client certificate is configured (SASL EXTERNAL is possible).
    pub fn has_identity(&self) -> bool {
        self.identity.is_some()
    }

    /// The URL to connect with: `url` itself, or, for an `amqps://` URL without a user while a
    /// client certificate is configured, `url` with `auth_mechanism=external` (a URL without a
    /// user would otherwise log in as guest).
    pub fn login_url(&self, url: &str) -> String {
        if !url.starts_with("amqps://")
            || !self.has_identity()
            || names_user(url)
            || url.contains("auth_mechanism=")
        {
            return url.to_owned();
        }
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}auth_mechanism=external")
    }

    fn owned(&self) -> lapin::tcp::OwnedTLSConfig {
        lapin::tcp::OwnedTLSConfig {
            identity: self
                .identity
                .as_ref()
                .map(|(pem, key)| lapin::tcp::OwnedIdentity::PKCS8 {
                    pem: pem.clone(),
                    key: key.clone(),
                }),
            cert_chain: self.ca_pem.clone(),
        }
    }
}

/// Whether a broker URL names a user (`scheme://user[:password]@host…`).
pub(crate) fn names_user(url: &str) -> bool {
    url.split_once("://")
        .and_then(|(_, rest)| rest.split(['/', '?']).next())
        .is_some_and(|authority| authority.contains('@'))
}

/// Why a broker operation failed.
#[derive(Debug, thiserror::Error)]
pub enum AmqpError {
    /// The client library reported an error (connection lost, channel closed, refused).
    #[error("AMQP: {0}")]
    Lapin(#[from] lapin::Error),
    /// The broker refused a publish (nack).
    #[error("the broker refused to take a message (nack)")]
    Nacked,
}

/// What to declare on (re)connect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Declare {
    /// A group exchange: fanout, durable, auto-delete (the leader's).
    GroupExchange(String),
    /// A group member queue: durable, non-exclusive, auto-delete, bound to `exchange` with `""`.
    GroupQueue {
        /// Queue name.
        queue: String,
        /// The group exchange.
        exchange: String,
    },
    /// `inbox.topic` and the inbox queue `inbox_{AIC}` (durable, `x-expires` 60 d,
    /// `x-message-ttl` 7 d), bound with its own name.
    Inbox(String),
}

impl Declare {
    /// The queue this declaration creates, to consume from.
    pub fn queue(&self) -> Option<&str> {
        match self {
            Declare::GroupExchange(_) => None,
            Declare::GroupQueue { queue, .. } | Declare::Inbox(queue) => Some(queue),
        }
    }
}

/// One connection with one channel in confirm mode.
pub struct Link {
    conn: Connection,
    chan: Channel,
}

impl Link {
    /// Connects to `url` (`amqp://user:password@host:port/vhost`, or `amqps://…` with `tls`;
    /// see [`AmqpTls::login_url`] for SASL EXTERNAL), opens a channel in confirm mode with
    /// `prefetch` unacked deliveries.
    pub async fn connect(
        url: &str,
        name: &str,
        prefetch: u16,
        tls: &AmqpTls,
    ) -> Result<Link, AmqpError> {
        let props =
            ConnectionProperties::default().with_connection_name(LongString::from(name.to_owned()));
        let conn = Connection::connect_with_config(&tls.login_url(url), props, tls.owned()).await?;
        let chan = conn.create_channel().await?;
        chan.confirm_select(ConfirmSelectOptions::default()).await?;
        chan.basic_qos(prefetch, BasicQosOptions::default()).await?;
        Ok(Link { conn, chan })
    }

    /// Whether the connection and channel are still up.
    pub fn is_up(&self) -> bool {
        self.conn.status().connected() && self.chan.status().connected()
    }

    /// Runs one declaration.
    pub async fn declare(&self, d: &Declare) -> Result<(), AmqpError> {
        match d {
            Declare::GroupExchange(name) => {
                let opts = ExchangeDeclareOptions {
                    durable: true,
                    auto_delete: true,
                    ..Default::default()
                };
                self.chan
                    .exchange_declare(name, ExchangeKind::Fanout, opts, FieldTable::default())
                    .await?;
            }
            Declare::GroupQueue { queue, exchange } => {
                let opts = QueueDeclareOptions {
                    durable: true,
                    exclusive: false,
                    auto_delete: true,
                    ..Default::default()
                };
                self.chan
                    .queue_declare(queue, opts, FieldTable::default())
                    .await?;
                self.chan
                    .queue_bind(
                        queue,
                        exchange,
                        "",
                        QueueBindOptions::default(),
                        FieldTable::default(),
                    )
                    .await?;
            }
            Declare::Inbox(queue) => {
                let mut args = FieldTable::default();
                args.insert(
                    ShortString::from("x-expires"),
                    AMQPValue::LongLongInt(INBOX_QUEUE_EXPIRES_MS as i64),
                );
                args.insert(
                    ShortString::from("x-message-ttl"),
                    AMQPValue::LongLongInt(INBOX_MESSAGE_TTL_MS as i64),
                );
                let opts = QueueDeclareOptions {
                    durable: true,
                    ..Default::default()
                };
                self.chan.queue_declare(queue, opts, args).await?;
                self.declare_inbox_exchange().await?;
                self.chan
                    .queue_bind(
                        queue,
                        INBOX_EXCHANGE,
                        queue,
                        QueueBindOptions::default(),
                        FieldTable::default(),
                    )
                    .await?;
            }
        }
        Ok(())
    }

    async fn declare_inbox_exchange(&self) -> Result<(), AmqpError> {
        let opts = ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        };
        self.chan
            .exchange_declare(
                INBOX_EXCHANGE,
                ExchangeKind::Topic,
                opts,
                FieldTable::default(),
            )
            .await?;
        Ok(())
    }

    /// Consumes `queue` with manual acks.
    pub async fn consume(&self, queue: &str, tag: &str) -> Result<Consumer, AmqpError> {
        Ok(self
            .chan
            .basic_consume(
                queue,
                tag,
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?)
    }

    /// Publishes as the SDK does (`application/json`, persistent, `message_id`, no headers)
    /// and waits for the broker's confirm.
    pub async fn publish(&self, p: &Publish) -> Result<(), AmqpError> {
        if p.exchange == INBOX_EXCHANGE {
            self.declare_inbox_exchange().await?;
        }
        let mut props = BasicProperties::default()
            .with_content_type(ShortString::from("application/json"))
            .with_delivery_mode(2);
        if !p.message_id.is_empty() {
            props = props.with_message_id(ShortString::from(p.message_id.clone()));
        }
        let confirm = self
            .chan
            .basic_publish(
                &p.exchange,
                &p.routing_key,
                BasicPublishOptions::default(),
                &p.body,
                props,
            )
            .await?
            .await?;
        match confirm {
            Confirmation::Nack(_) => Err(AmqpError::Nacked),
            _ => Ok(()),
        }
    }

    /// Acks one delivery.
    pub async fn ack(&self, d: &Delivery) -> Result<(), AmqpError> {
        d.acker.ack(BasicAckOptions::default()).await?;
        Ok(())
    }

    /// Deletes a queue (even with consumers or messages), as the SDK's leave does.
    pub async fn delete_queue(&self, queue: &str) -> Result<(), AmqpError> {
        self.chan
            .queue_delete(queue, QueueDeleteOptions::default())
            .await?;
        Ok(())
    }

    /// Closes the connection.
    pub async fn close(&self) {
        let _ = self.conn.close(200, "bye").await;
    }
}
