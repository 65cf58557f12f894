//! Whether an INVITE is admitted, and on which terms: one pure function of the invitation, the
//! configuration and how many assignments are live. Authentication, duplicates and tombstones
//! are decided before (see `handshake`); everything here is policy.

use std::time::Duration;

use crate::error::{ErrorCode, ErrorInfo};
use crate::wire::{AccessMode, Feature, Invite, TransportKind};

use super::ExecutorConfig;

/// The terms an admitted INVITE gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// The transport that will set the workspace up (INVITE's, or the first served).
    pub transport: TransportKind,
    /// Effective access (`rw` downgraded to `ro` where only `ro` is allowed).
    pub access: AccessMode,
    /// The lease granted (capped at `max_ttl_seconds`).
    pub ttl: Duration,
    /// How long the result is retained (INVITE's, capped, or the default).
    pub retention: Duration,
    /// The protocol extensions both sides support.
    pub features: Vec<Feature>,
}

/// Why an executor that is shutting down ([`Executor::shutdown`](super::Executor::shutdown))
/// declines every new invitation: the work would be cancelled at once.
pub fn shutting_down() -> ErrorInfo {
    ErrorInfo {
        code: ErrorCode::Declined,
        message: "the executor is shutting down".into(),
        hint: Some("Delegate to another executor, or again once this one has restarted.".into()),
    }
}

/// Admits `invite` under `config` with `live` assignments holding resources, or says why not
/// (`DECLINED`; the reference's wording for a full executor).
pub fn admit(invite: &Invite, config: &ExecutorConfig, live: usize) -> Result<Admitted, ErrorInfo> {
    let declined = |msg: String| ErrorInfo::new(ErrorCode::Declined, msg);
    let transport = match &invite.transport {
        None => config
            .transports
            .first()
            .cloned()
            .unwrap_or(TransportKind::Archive),
        Some(t) if config.transports.contains(t) => t.clone(),
        Some(t) => {
            return Err(declined(format!(
                "transport {} is not served here (available: {})",
                t.as_str(),
                config
                    .transports
                    .iter()
                    .map(TransportKind::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    };
    if live >= config.max_concurrent {
        return Err(ErrorInfo {
            code: ErrorCode::Declined,
            message: "Maximum concurrent delegations reached".into(),
            hint: Some("Try again later when current tasks complete".into()),
        });
    }
    if invite.lease.ttl_seconds == 0 {
        return Err(declined("lease.ttlSeconds must be positive".into()));
    }
    let access = match invite.lease.access_mode {
        AccessMode::Rw if config.allow_rw => AccessMode::Rw,
        AccessMode::Rw | AccessMode::Ro if config.allow_ro => AccessMode::Ro,
        m @ (AccessMode::Rw | AccessMode::Ro) => {
            return Err(declined(format!(
                "access mode {} is not allowed here",
                m.as_str()
            )))
        }
    };
    if invite.resources.is_empty() {
        return Err(declined("the invitation exports no resource".into()));
    }
    // (One resource, the usual case, needs no list.)
    if invite.resources.len() > 1 {
        let mut names: Vec<_> = invite.resources.iter().map(|r| &r.name).collect();
        names.sort();
        if names.windows(2).any(|w| w[0] == w[1]) {
            return Err(declined("resource names must be unique".into()));
        }
    }
    let ttl = Duration::from_secs(invite.lease.ttl_seconds.min(config.max_ttl_seconds));
    let retention = invite
        .retention_ms
        .map(Duration::from_millis)
        .unwrap_or(config.default_retention)
        .min(config.max_retention);
    let mut features = Feature::agreed(&invite.features, &config.features);
    if transport.is_live() {
        // A live workspace has no rounds: its changes are final only once it is detached.
        features.retain(|f| *f != Feature::MultiRound);
    }
    Ok(Admitted {
        transport,
        access,
        ttl,
        retention,
        features,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::executor::tests::invite;
    use crate::id::DelegationId;

    fn inv() -> Invite {
        invite(&DelegationId::new("dlg_p").unwrap())
    }

    #[test]
    fn a_full_executor_declines_with_the_reference_wording() {
        let c = ExecutorConfig::default();
        let e = admit(&inv(), &c, c.max_concurrent).unwrap_err();
        assert_eq!(e.message, "Maximum concurrent delegations reached");
        assert!(admit(&inv(), &c, c.max_concurrent - 1).is_ok());
    }

    #[test]
    fn rw_is_downgraded_to_ro_where_only_ro_is_allowed() {
        let c = ExecutorConfig {
            allow_rw: false,
            ..ExecutorConfig::default()
        };
        assert_eq!(admit(&inv(), &c, 0).unwrap().access, AccessMode::Ro);
        let c = ExecutorConfig {
            allow_rw: false,
            allow_ro: false,
            ..ExecutorConfig::default()
        };
        assert_eq!(admit(&inv(), &c, 0).unwrap_err().code, ErrorCode::Declined);
    }

    #[test]
    fn the_lease_and_retention_are_capped_and_unserved_transports_declined() {
        let c = ExecutorConfig {
            max_ttl_seconds: 60,
            max_retention: Duration::from_secs(5),
            ..ExecutorConfig::default()
        };
        let mut i = inv();
        i.retention_ms = Some(60_000);
        let a = admit(&i, &c, 0).unwrap();
        assert_eq!(a.ttl, Duration::from_secs(60));
        assert_eq!(a.retention, Duration::from_secs(5));
        i.transport = Some(TransportKind::Sshfs);
        assert!(admit(&i, &c, 0).unwrap_err().message.contains("not served"));
        i.transport = Some(TransportKind::Archive);
        i.resources.push(i.resources[0].clone());
        assert!(admit(&i, &c, 0).unwrap_err().message.contains("unique"));
        i.resources.clear();
        assert!(admit(&i, &c, 0).is_err());
    }
}
