//! The relay's public side: which executor a public URL names, which requests a reference
//! client serves, and the bodies of the relay's own refusals.

use crate::tunnel::registry::ExecutorName;

/// The prefix of every executor's public URLs: `/e/<name>/awcp…`.
pub const PUBLIC_PREFIX: &str = "/e/";

/// The public AWCP URL of `name` under `base` (`https://relay.example` →
/// `https://relay.example/e/<name>/awcp`).
pub fn public_url(base: &str, name: &ExecutorName) -> String {
    format!("{}{PUBLIC_PREFIX}{name}/awcp", base.trim_end_matches('/'))
}

/// Splits a public request path (query included) `/e/<name>/awcp<rest>` into the name and
/// the path relative to the executor's AWCP root (`/` when empty, the query kept):
/// `/e/alice/awcp/tasks/x/events?a=1` → (`alice`, `/tasks/x/events?a=1`). `None` for any
/// other path, or a name that breaks [`ExecutorName`]'s rules.
pub fn split_public_path(path: &str) -> Option<(ExecutorName, String)> {
    let after = path.strip_prefix(PUBLIC_PREFIX)?;
    let (name, rest) = after.split_once('/')?;
    let rest = rest.strip_prefix("awcp")?;
    let rest = match rest.as_bytes().first() {
        None => "/".to_string(),
        Some(b'?') => format!("/{rest}"),
        Some(b'/') => rest.to_string(),
        Some(_) => return None,
    };
    Some((ExecutorName::new(name).ok()?, rest))
}

/// What a reference client does with a request (WIRE.md §16): three routes answered whole,
/// one event stream, and nothing else.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReferenceRoute {
    /// `POST /`, `GET /status`, `POST /cancel/<id>`: one `HTTP_REQUEST`.
    Http,
    /// `GET /tasks/<id>/events`: `SSE_OPEN`.
    Events,
    /// Anything else: the reference client would answer 404; the relay does so itself.
    NotServed,
}

/// The reference route of `method` and `path` (relative to the AWCP root; the query is not
/// part of the match, as the reference compares whole paths).
pub fn reference_route(method: &str, path: &str) -> ReferenceRoute {
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (method, segments.as_slice()) {
        ("POST", [""]) | ("GET", ["status"]) => ReferenceRoute::Http,
        ("POST", ["cancel", id]) if !id.is_empty() => ReferenceRoute::Http,
        ("GET", ["tasks", id, "events"]) if !id.is_empty() => ReferenceRoute::Events,
        _ => ReferenceRoute::NotServed,
    }
}

/// The path without its query.
pub(crate) fn without_query(path: &str) -> &str {
    path.split_once('?').map_or(path, |(p, _)| p)
}

/// The JSON body of a refusal: `{"error": "<reason>"}` (what the reference's routes answer).
pub(crate) fn error_body(reason: &str) -> String {
    serde_json::json!({ "error": reason }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_paths_name_an_executor_and_a_path_under_its_root() {
        let split = |p| split_public_path(p).map(|(n, r)| (n.as_str().to_string(), r));
        let s = |n: &str, r: &str| Some((n.to_string(), r.to_string()));
        assert_eq!(split("/e/alice/awcp"), s("alice", "/"));
        assert_eq!(split("/e/alice/awcp/"), s("alice", "/"));
        assert_eq!(split("/e/alice/awcp?x=1"), s("alice", "/?x=1"));
        assert_eq!(
            split("/e/alice/awcp/tasks/dlg_1/events"),
            s("alice", "/tasks/dlg_1/events")
        );
        assert_eq!(split("/e/alice/awcpx"), None);
        assert_eq!(split("/e/Alice/awcp"), None);
        assert_eq!(split("/e/alice"), None);
        assert_eq!(split("/x/alice/awcp"), None);
        assert_eq!(
            public_url("https://r.example/", &ExecutorName::new("bob").unwrap()),
            "https://r.example/e/bob/awcp"
        );
    }

    #[test]
    fn reference_routes_are_the_three_routes_and_the_event_stream() {
        use ReferenceRoute::*;
        assert_eq!(reference_route("POST", "/"), Http);
        assert_eq!(reference_route("GET", "/status"), Http);
        assert_eq!(reference_route("POST", "/cancel/dlg_1"), Http);
        assert_eq!(reference_route("GET", "/tasks/dlg_1/events"), Events);
        assert_eq!(reference_route("GET", "/tasks/dlg_1/events?x"), Events);
        assert_eq!(reference_route("GET", "/tasks/dlg_1/result"), NotServed);
        assert_eq!(reference_route("POST", "/tasks/dlg_1/ack"), NotServed);
        assert_eq!(reference_route("GET", "/"), NotServed);
        assert_eq!(reference_route("POST", "/cancel/"), NotServed);
    }
}
