//! Broker URLs: the `amqp://` URL of a broker, and the `server` of a `group` RPC invitation
//! to and from a URL.

use aip_proto::group::wire::ServerConfig;

use crate::group::amqp::AmqpTls;

/// Percent-encodes one URL component (user, password, vhost).
fn encode_component(s: &str) -> String {
    let mut o = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            o.push(b as char);
        } else {
            o.push_str(&format!("%{b:02X}"));
        }
    }
    o
}

/// `amqp://user:password@host:port/vhost` with the parts percent-encoded.
pub fn amqp_url(host: &str, port: u16, vhost: &str, user: &str, password: &str) -> String {
    format!(
        "amqp://{}:{}@{}:{port}/{}",
        encode_component(user),
        encode_component(password),
        host,
        encode_component(vhost)
    )
}

/// The `server` of a `group` RPC invitation telling partners to reach the broker at `url`:
/// for `amqp://user:password@host:port/vhost` (or `amqps://` with a user) its user and
/// password become the `accessToken` `"user:password"` (PLAIN); for an `amqps://` URL without
/// a user, or with `auth_mechanism=external`, there is no `accessToken`: partners log in with
/// their own client certificate (SASL EXTERNAL).
pub fn server_config(url: &str) -> Result<ServerConfig, String> {
    let u: lapin::uri::AMQPUri = url.parse()?;
    let tls = url.starts_with("amqps://");
    let external =
        tls && (!crate::group::amqp::names_user(url) || url.contains("auth_mechanism=external"));
    Ok(ServerConfig {
        host: u.authority.host,
        port: u.authority.port,
        vhost: u.vhost,
        access_token: (!external).then(|| {
            format!(
                "{}:{}",
                u.authority.userinfo.username, u.authority.userinfo.password
            )
        }),
    })
}

/// The broker URL of an RPC invitation's `server`. With an `accessToken` `"user:password"`:
/// PLAIN, over TLS (`amqps://`) when `tls` is configured. Without one: TLS with this
/// partner's client certificate and SASL EXTERNAL (an error if `tls` has no certificate).
pub fn server_url(s: &ServerConfig, tls: &AmqpTls) -> Result<String, String> {
    let configured = tls.has_identity() || tls.ca_pem.is_some();
    match s.plain_credentials()? {
        Some((u, p)) => {
            let url = amqp_url(&s.host, s.port, &s.vhost, u, p);
            Ok(if configured {
                url.replacen("amqp://", "amqps://", 1)
            } else {
                url
            })
        }
        None if tls.has_identity() => Ok(format!(
            "amqps://{}:{}/{}?auth_mechanism=external",
            s.host,
            s.port,
            encode_component(&s.vhost)
        )),
        None => Err(
            "no accessToken: the invitation asks for TLS with a client certificate (SASL EXTERNAL), \
             and this partner has none configured (broker_tls, or --amqp-cert/--amqp-key)"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_config_and_server_url_round_trip() {
        let s = server_config("amqp://guest:p%40ss@127.0.0.1:5999/%2f").unwrap();
        assert_eq!(
            (s.host.as_str(), s.port, s.vhost.as_str()),
            ("127.0.0.1", 5999, "/")
        );
        assert_eq!(s.access_token.as_deref(), Some("guest:p@ss"));
        let s = server_config(&amqp_url("h", 5672, "acps", "u", "p")).unwrap();
        let plain = AmqpTls::default();
        assert_eq!(server_url(&s, &plain).unwrap(), "amqp://u:p@h:5672/acps");
        assert!(server_config("http://nope").is_err());
    }

    fn with_cert() -> AmqpTls {
        AmqpTls {
            ca_pem: Some("CA".into()),
            identity: Some((b"cert".to_vec(), b"key".to_vec())),
        }
    }

    #[test]
    fn an_amqps_broker_without_a_user_invites_with_external_and_partners_log_in_with_their_certificate(
    ) {
        // The leader's URL names no user: the invitation carries no accessToken.
        let s = server_config("amqps://broker.example:5671/acps").unwrap();
        assert_eq!(s.access_token, None);
        assert_eq!((s.port, s.vhost.as_str()), (5671, "acps"));
        let s2 =
            server_config("amqps://u:p@broker.example:5671/acps?auth_mechanism=external").unwrap();
        assert_eq!(s2.access_token, None);
        // A partner with a certificate logs in with EXTERNAL; without one it says what is missing.
        assert_eq!(
            server_url(&s, &with_cert()).unwrap(),
            "amqps://broker.example:5671/acps?auth_mechanism=external"
        );
        let e = server_url(&s, &AmqpTls::default()).unwrap_err();
        assert!(e.contains("client certificate"), "{e}");
        // A token over TLS stays PLAIN, on amqps.
        let s = server_config("amqps://u:p@broker.example:5671/acps").unwrap();
        assert_eq!(s.access_token.as_deref(), Some("u:p"));
        assert_eq!(
            server_url(&s, &with_cert()).unwrap(),
            "amqps://u:p@broker.example:5671/acps"
        );
    }

    #[test]
    fn login_url_adds_external_only_for_a_userless_amqps_url_with_a_certificate() {
        let t = with_cert();
        assert_eq!(
            t.login_url("amqps://h:5671/acps"),
            "amqps://h:5671/acps?auth_mechanism=external"
        );
        assert_eq!(
            t.login_url("amqps://h:5671/acps?heartbeat=10"),
            "amqps://h:5671/acps?heartbeat=10&auth_mechanism=external"
        );
        for same in [
            "amqps://u:p@h:5671/acps",
            "amqps://h:5671/acps?auth_mechanism=plain",
            "amqp://h:5672/acps",
        ] {
            assert_eq!(t.login_url(same), same);
        }
        assert_eq!(
            AmqpTls::default().login_url("amqps://h:5671/acps"),
            "amqps://h:5671/acps"
        );
    }
}
