//! The daemon API's JSON as types: what the daemon serves, what [`super::DaemonClient`]
//! returns, and the `POST /delegate` body both sides read and write. One definition for the
//! server and the client, so the two cannot drift apart.
//!
//! Enumerations (states, modes, outcome statuses) are kept as the strings the API carries, so
//! a client reads the records of a newer daemon too; [`Record::delegation_state`] and
//! [`Outcome::is_success`] interpret the common ones. Every response type reads missing
//! fields as their defaults and ignores unknown ones.

mod live;
mod record;
mod request;
#[cfg(test)]
mod tests;

pub use live::LiveEvent;
pub use record::{
    ActiveLease, Constraints, ContinueBody, Continued, Delegated, Delegations, Environment,
    LeaseConfig, NotShipped, Outcome, Record, Resource, Snapshot, SnapshotPolicy, Snapshots,
    Summary, TaskResult, WorkDir,
};
pub use request::{DelegateAuth, DelegateBody, DelegateEnvironment, DelegateResource, Task};

/// Reads `null` as the type's default, as a missing field (the API's rule: null = absent).
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + serde::Deserialize<'de>,
{
    <Option<T> as serde::Deserialize>::deserialize(d).map(Option::unwrap_or_default)
}
