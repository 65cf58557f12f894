//! Peer discovery (WIRE.md §13): fetch each executor's A2A agent card once at start-up and
//! render an "Available Executors" section for the `delegate` tool's description.

use std::time::Duration;

use awcp_driver::net::{ClientTls, HttpClient};
use awcp_tokio::TokioRuntime;
use serde_json::Value;

/// What start-up learned about one `--peers` entry.
#[derive(Clone, Debug)]
pub struct Peer {
    /// The AWCP URL (`<base>/awcp`).
    pub awcp_url: String,
    /// The card, or why it could not be fetched.
    pub card: Result<Value, String>,
}

/// Fetches the cards of all peers concurrently (5 s per request; failures are recorded).
pub async fn discover(peers: &[String], tls: &ClientTls) -> Vec<Peer> {
    let http = HttpClient::new(TokioRuntime, tls.clone());
    let tasks: Vec<_> = peers
        .iter()
        .map(|p| {
            let p = p.clone();
            let http = http.clone();
            tokio::spawn(async move { fetch(&http, &p).await })
        })
        .collect();
    let mut out = Vec::new();
    for (t, p) in tasks.into_iter().zip(peers) {
        out.push(t.await.unwrap_or_else(|e| Peer {
            awcp_url: awcp_proto::http_binding::awcp_url(p),
            card: Err(format!("discovery task failed: {e}")),
        }));
    }
    out
}

async fn fetch(http: &HttpClient<TokioRuntime>, peer: &str) -> Peer {
    let base = awcp_proto::http_binding::base_url(peer.trim_end_matches('/')).to_owned();
    let awcp_url = awcp_proto::http_binding::awcp_url(&base);
    let mut errors = Vec::new();
    for path in ["/.well-known/agent-card.json", "/.well-known/agent.json"] {
        let url = format!("{base}{path}");
        match http
            .request(
                http::Method::GET,
                &url,
                &[],
                None,
                Duration::from_secs(5),
                1024 * 1024,
            )
            .await
        {
            Ok((status, body)) if (200..300).contains(&status) => {
                match serde_json::from_slice::<Value>(&body) {
                    Ok(v) if v.is_object() => {
                        tracing::info!(peer = %awcp_url, name = ?v.get("name"), "discovered executor");
                        return Peer {
                            awcp_url,
                            card: Ok(v),
                        };
                    }
                    _ => errors.push(format!("{url}: not a JSON object")),
                }
            }
            Ok((status, _)) => errors.push(format!("{url}: HTTP {status}")),
            Err(e) => errors.push(format!("{url}: {e}")),
        }
    }
    let why = errors.join("; ");
    tracing::warn!(peer = %awcp_url, error = %why, "executor unreachable; its card is not in the tool description");
    Peer {
        awcp_url,
        card: Err(why),
    }
}

/// The "Available Executors" section (empty without peers).
pub fn describe(peers: &[Peer]) -> String {
    if peers.is_empty() {
        return String::new();
    }
    let mut s = String::from("\n\n## Available Executors\n");
    for p in peers {
        match &p.card {
            Ok(card) => {
                let name = card
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("unnamed executor");
                s.push_str(&format!("\n### {name}\n- peer_url: {}\n", p.awcp_url));
                if let Some(d) = card.get("description").and_then(Value::as_str) {
                    s.push_str(&format!("- description: {d}\n"));
                }
                let skills: Vec<&str> = card
                    .get("skills")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|k| k.get("name").and_then(Value::as_str))
                    .collect();
                if !skills.is_empty() {
                    s.push_str(&format!("- skills: {}\n", skills.join(", ")));
                }
            }
            Err(e) => s.push_str(&format!(
                "\n### (unreachable) {}\n- the agent card could not be fetched at start-up: {e}\n",
                p.awcp_url
            )),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn describes_reachable_and_unreachable_peers() {
        let peers = vec![
            Peer {
                awcp_url: "http://a/awcp".into(),
                card: Ok(json!({"name": "Alpha", "description": "does things",
                    "skills": [{"name": "Refactor"}, {"name": "Test"}]})),
            },
            Peer {
                awcp_url: "http://b/awcp".into(),
                card: Err("connection refused".into()),
            },
        ];
        let d = describe(&peers);
        assert!(d.contains("### Alpha"));
        assert!(d.contains("peer_url: http://a/awcp"));
        assert!(d.contains("skills: Refactor, Test"));
        assert!(d.contains("does things"));
        assert!(d.contains("(unreachable) http://b/awcp"));
        assert!(d.contains("connection refused"));
        assert_eq!(describe(&[]), "");
    }
}
