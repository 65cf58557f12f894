//! The A2A agent card an executor serves at `/.well-known/agent-card.json` (and the legacy
//! `/.well-known/agent.json`), declaring the AWCP extension (WIRE.md §13).

use serde_json::{json, Value};

/// URI of the AWCP extension in agent cards.
pub const AWCP_EXTENSION_URI: &str = "https://awcp-protocol.org/v1";

/// A skill listed on the card.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skill {
    /// Skill id.
    pub id: String,
    /// Display name.
    pub name: String,
    /// What it does.
    pub description: String,
}

/// The executor's card.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentCard {
    /// Agent name.
    pub name: String,
    /// What the agent does.
    pub description: String,
    /// Skills.
    pub skills: Vec<Skill>,
    /// Base URL (filled in when known).
    pub url: Option<String>,
}

impl Default for AgentCard {
    fn default() -> Self {
        AgentCard {
            name: "awcp-rs executor".into(),
            description: "An AWCP executor: lend it a workspace and a task.".into(),
            skills: vec![Skill {
                id: "workspace-task".into(),
                name: "Workspace task".into(),
                description: "Works on a delegated directory and returns the changes.".into(),
            }],
            url: None,
        }
    }
}

impl AgentCard {
    /// The card as JSON, with `url` defaulting to `base_url`. With `auth_required` the card
    /// declares A2A security schemes (a bearer token or an `X-API-Key` header), so a client
    /// (or an LLM reading the card) knows to bring a credential.
    pub fn to_json(&self, base_url: Option<&str>, auth_required: bool) -> Value {
        let url = self.url.as_deref().or(base_url).unwrap_or("");
        let mut card = json!({
            "name": self.name,
            "description": self.description,
            "url": url,
            "version": env!("CARGO_PKG_VERSION"),
            "protocolVersion": "0.3.0",
            "capabilities": {
                "streaming": true,
                "extensions": [{
                    "uri": AWCP_EXTENSION_URI,
                    "required": false,
                    "description": "Agent Workspace Collaboration Protocol v1 executor",
                    "params": {"endpoint": format!("{}/awcp", url.trim_end_matches('/'))}
                }]
            },
            "extensions": [{"uri": AWCP_EXTENSION_URI, "required": false}],
            "defaultInputModes": ["text"],
            "defaultOutputModes": ["text"],
            "skills": self.skills.iter().map(|s| json!({
                "id": s.id, "name": s.name, "description": s.description, "tags": ["awcp"]
            })).collect::<Vec<_>>(),
        });
        if auth_required {
            card["securitySchemes"] = json!({
                "bearer": {"type": "http", "scheme": "bearer"},
                "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
            });
            card["security"] = json!([{"bearer": []}, {"apiKey": []}]);
        }
        card
    }

    /// What `GET /` on an executor answers: its name, version, description, whether it needs
    /// a credential, and where the AWCP endpoint and the agent card are under `base_url`.
    pub fn root_document(&self, base_url: Option<&str>, auth_required: bool) -> Value {
        let base = self
            .url
            .as_deref()
            .or(base_url)
            .unwrap_or("")
            .trim_end_matches('/');
        json!({
            "name": self.name,
            "service": "awcp executor",
            "version": env!("CARGO_PKG_VERSION"),
            "description": self.description,
            "skills": self.skills.iter().map(|s| &s.name).collect::<Vec<_>>(),
            "authRequired": auth_required,
            "endpoints": {
                "awcp": format!("{base}/awcp"),
                "status": format!("{base}/awcp/status"),
                "agentCard": format!("{base}/.well-known/agent-card.json"),
            },
        })
    }
}

impl Skill {
    /// A skill from `NAME: DESCRIPTION` (or just a description, named after its first
    /// words); its id is the name in lower case with dashes.
    pub fn parse(s: &str) -> Result<Skill, String> {
        let (name, description) = match s.split_once(':') {
            Some((n, d)) if !n.trim().is_empty() && !d.trim().is_empty() => (n.trim(), d.trim()),
            _ if !s.trim().is_empty() => (s.trim(), s.trim()),
            _ => return Err("a skill needs a name or a description: 'NAME: DESCRIPTION'".into()),
        };
        let id: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .collect::<String>()
            .split('-')
            .filter(|p| !p.is_empty())
            .collect::<Vec<_>>()
            .join("-");
        Ok(Skill {
            id: if id.is_empty() { "skill".into() } else { id },
            name: name.to_owned(),
            description: description.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skills_parse_from_name_and_description() {
        let s = Skill::parse("Python refactoring: Restructures Python code safely").unwrap();
        assert_eq!(s.id, "python-refactoring");
        assert_eq!(s.name, "Python refactoring");
        assert_eq!(s.description, "Restructures Python code safely");
        assert_eq!(
            Skill::parse("Reviews code").unwrap().description,
            "Reviews code"
        );
        assert!(Skill::parse("  ").is_err());
    }

    #[test]
    fn the_card_says_when_a_credential_is_needed() {
        let card = AgentCard::default();
        let open = card.to_json(Some("http://h:1"), false);
        assert!(open.get("securitySchemes").is_none());
        let closed = card.to_json(Some("http://h:1"), true);
        assert_eq!(closed["securitySchemes"]["bearer"]["scheme"], "bearer");
        assert_eq!(closed["security"][0]["bearer"], json!([]));
        let root = card.root_document(Some("http://h:1/"), true);
        assert_eq!(root["authRequired"], true);
        assert_eq!(root["endpoints"]["awcp"], "http://h:1/awcp");
        assert_eq!(root["version"], env!("CARGO_PKG_VERSION"));
    }
}
