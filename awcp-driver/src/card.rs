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
    /// The card as JSON, with `url` defaulting to `base_url`.
    pub fn to_json(&self, base_url: Option<&str>) -> Value {
        let url = self.url.as_deref().or(base_url).unwrap_or("");
        json!({
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
        })
    }
}
