//! One-time archive URLs: which delegation's archive a token may fetch, once, before when.
//!
//! In URL delivery ([`ArchiveDelivery::ByUrl`]) the executor downloads the workspace archive
//! from the delegator's archive server instead of receiving it inline in START. The driver
//! mints the URL's secret token while executing [`DelegatorOutput::PrepareTransport`] and hands
//! its digest back with [`DelegatorInput::TransportPrepared`]; from then on the engine decides
//! every request: [`Delegator::redeem_archive_url`] grants a token once, only before the
//! delegation's lease ends, and never after its transport was released (firezone's expiring
//! map, keyed by the token's SHA-256 so a lookup's timing says nothing about live tokens).

use super::*;
use crate::engine::auth::SecretDigest;

/// How the workspace archive reaches the executor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArchiveDelivery {
    /// Base64 inside START (what every peer, the reference included, takes).
    Inline,
    /// As a file the delegator serves at a one-time URL named in START (the `archive-url`
    /// extension, agreed in ACCEPT, with an archive server configured:
    /// [`DelegatorConfig::serve_archives`]). Answer with the token's digest in
    /// [`DelegatorInput::TransportPrepared::archive_token`].
    ByUrl,
}

/// Why [`Delegator::redeem_archive_url`] refused a token. The archive server answers 404
/// either way, so a prober learns nothing; the reason is for logs and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArchiveUrlRefused {
    /// No live grant has this token: never issued, already used, or revoked when the
    /// delegation's transport was released.
    #[error("unknown, used or revoked archive URL")]
    Unknown,
    /// The grant outlived its delegation's lease.
    #[error("expired archive URL")]
    Expired,
}

/// What a request to a storage object URL served by the delegator itself (the storage
/// transport's local provider) does with it: the handle's `downloadUrl` and `uploadUrl` carry
/// the same secret token, each good for one use ([`Delegator::redeem_object_url`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectUse {
    /// `GET` of the workspace ZIP (`downloadUrl`).
    GetWorkspace,
    /// `PUT` of the result ZIP (`uploadUrl`).
    PutResult,
}

/// What a request to a git repository the delegator serves itself (the git transport without
/// a remote) asks of it ([`Delegator::redeem_repository_url`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepositoryUse {
    /// A fetch or clone (git's `upload-pack` service).
    Fetch,
    /// A push (git's `receive-pack` service).
    Push,
}

/// One live grant.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Grant {
    id: DelegationId,
    expires_at: Timestamp,
    /// `None`: a one-time archive URL. Some: a storage object grant and the uses left.
    object_uses: Option<Vec<ObjectUse>>,
    /// Some: a repository grant (any number of requests until it ends), and whether it
    /// allows pushes.
    repository: Option<bool>,
}

/// The live one-time grants, by the token's digest (hex).
#[derive(Clone, Debug, Default)]
pub(super) struct ArchiveGrants {
    by_token: BTreeMap<String, Grant>,
}

impl ArchiveGrants {
    /// `token` may fetch `id`'s archive once, before `expires_at`.
    pub(super) fn grant(&mut self, token: &SecretDigest, id: &DelegationId, expires_at: Timestamp) {
        self.by_token.insert(
            token.to_hex(),
            Grant {
                id: id.clone(),
                expires_at,
                object_uses: None,
                repository: None,
            },
        );
    }

    /// `token` may GET `id`'s workspace object once and PUT its result object once, before
    /// `expires_at`.
    pub(super) fn grant_objects(
        &mut self,
        token: &SecretDigest,
        id: &DelegationId,
        expires_at: Timestamp,
    ) {
        self.by_token.insert(
            token.to_hex(),
            Grant {
                id: id.clone(),
                expires_at,
                object_uses: Some(vec![ObjectUse::GetWorkspace, ObjectUse::PutResult]),
                repository: None,
            },
        );
    }

    /// `token` opens `id`'s served git repository for fetches (and pushes if `push`) until
    /// `expires_at` or the release.
    pub(super) fn grant_repository(
        &mut self,
        token: &SecretDigest,
        id: &DelegationId,
        expires_at: Timestamp,
        push: bool,
    ) {
        self.by_token.insert(
            token.to_hex(),
            Grant {
                id: id.clone(),
                expires_at,
                object_uses: None,
                repository: Some(push),
            },
        );
    }

    /// Whose repository `token` opens for `use_` at `now` (the grant stays: a clone or a push
    /// is several requests).
    pub(super) fn redeem_repository(
        &mut self,
        now: Timestamp,
        token: &SecretDigest,
        use_: RepositoryUse,
    ) -> Result<DelegationId, ArchiveUrlRefused> {
        let key = token.to_hex();
        let grant = self.by_token.get(&key).ok_or(ArchiveUrlRefused::Unknown)?;
        let Some(push) = grant.repository else {
            return Err(ArchiveUrlRefused::Unknown);
        };
        if now >= grant.expires_at {
            self.by_token.remove(&key);
            return Err(ArchiveUrlRefused::Expired);
        }
        if use_ == RepositoryUse::Push && !push {
            return Err(ArchiveUrlRefused::Unknown);
        }
        Ok(grant.id.clone())
    }

    /// Uses up `use_` of `token`'s object grant: whose object it opens, if that use is left
    /// and the grant is live at `now`. The grant goes with its last use or when it expired.
    pub(super) fn redeem_object(
        &mut self,
        now: Timestamp,
        token: &SecretDigest,
        use_: ObjectUse,
    ) -> Result<DelegationId, ArchiveUrlRefused> {
        let key = token.to_hex();
        let grant = self
            .by_token
            .get_mut(&key)
            .ok_or(ArchiveUrlRefused::Unknown)?;
        let Some(uses) = grant
            .object_uses
            .as_mut()
            .filter(|_| grant.repository.is_none())
        else {
            return Err(ArchiveUrlRefused::Unknown);
        };
        if now >= grant.expires_at {
            self.by_token.remove(&key);
            return Err(ArchiveUrlRefused::Expired);
        }
        let Some(at) = uses.iter().position(|u| *u == use_) else {
            return Err(ArchiveUrlRefused::Unknown);
        };
        uses.remove(at);
        let id = grant.id.clone();
        if uses.is_empty() {
            self.by_token.remove(&key);
        }
        Ok(id)
    }

    /// Uses up `token`'s grant: whose archive it opens, if it is live at `now`. A token is
    /// gone after its first redemption, whatever the answer.
    pub(super) fn redeem(
        &mut self,
        now: Timestamp,
        token: &SecretDigest,
    ) -> Result<DelegationId, ArchiveUrlRefused> {
        let key = token.to_hex();
        // An object grant is not an archive URL (another route, other uses).
        if self
            .by_token
            .get(&key)
            .is_some_and(|g| g.object_uses.is_some() || g.repository.is_some())
        {
            return Err(ArchiveUrlRefused::Unknown);
        }
        let grant = self
            .by_token
            .remove(&key)
            .ok_or(ArchiveUrlRefused::Unknown)?;
        if now < grant.expires_at {
            Ok(grant.id)
        } else {
            Err(ArchiveUrlRefused::Expired)
        }
    }

    /// Forgets every grant of `id` (its transport is being released).
    pub(super) fn revoke(&mut self, id: &DelegationId) {
        self.by_token.retain(|_, g| g.id != *id);
    }

    /// How many grants are live (tests, invariants).
    pub(super) fn len(&self) -> usize {
        self.by_token.len()
    }
}

impl Delegator {
    /// An archive server received a request for the archive URL whose token has `token` as
    /// digest: the delegation whose archive file to send, or why not. Each token is granted
    /// at most once, only before its delegation's lease ends, and never after its transport
    /// was released ([`DelegatorOutput::ReleaseTransport`] revokes it).
    pub fn redeem_archive_url(
        &mut self,
        now: Timestamp,
        token: &SecretDigest,
    ) -> Result<DelegationId, ArchiveUrlRefused> {
        self.archive_grants.redeem(now, token)
    }

    /// A request reached a storage object URL the delegator serves itself (the storage
    /// transport's local provider) with the token whose digest is `token`: whose object it
    /// opens for `use_`, or why not. The workspace's GET and the result's PUT are each granted
    /// once, only before the lease ends, never after the transport was released.
    pub fn redeem_object_url(
        &mut self,
        now: Timestamp,
        token: &SecretDigest,
        use_: ObjectUse,
    ) -> Result<DelegationId, ArchiveUrlRefused> {
        self.archive_grants.redeem_object(now, token, use_)
    }

    /// A request reached the git repository the delegator serves itself for a `git`
    /// delegation without a remote, with the token whose digest is `token`: whose repository
    /// it opens for `use_`, or why not. Fetches are granted until the lease ends, pushes only
    /// to a read-write delegation; nothing after the transport was released.
    pub fn redeem_repository_url(
        &mut self,
        now: Timestamp,
        token: &SecretDigest,
        use_: RepositoryUse,
    ) -> Result<DelegationId, ArchiveUrlRefused> {
        self.archive_grants.redeem_repository(now, token, use_)
    }

    /// How many one-time archive URLs are live.
    pub fn live_archive_urls(&self) -> usize {
        self.archive_grants.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: u64) -> Timestamp {
        Timestamp::from_unix_millis(1_700_000_000_000 + s * 1000)
    }

    fn did(s: &str) -> DelegationId {
        DelegationId::new(s).unwrap()
    }

    #[test]
    fn a_token_is_granted_once_and_only_before_its_expiry() {
        let mut g = ArchiveGrants::default();
        let (a, b) = (SecretDigest::of("token-a"), SecretDigest::of("token-b"));
        g.grant(&a, &did("dlg_a"), at(10));
        g.grant(&b, &did("dlg_b"), at(10));
        assert_eq!(g.redeem(at(9), &a), Ok(did("dlg_a")));
        assert_eq!(g.redeem(at(9), &a), Err(ArchiveUrlRefused::Unknown));
        assert_eq!(g.redeem(at(10), &b), Err(ArchiveUrlRefused::Expired));
        assert_eq!(g.redeem(at(1), &b), Err(ArchiveUrlRefused::Unknown));
        assert_eq!(
            g.redeem(at(1), &SecretDigest::of("never")),
            Err(ArchiveUrlRefused::Unknown)
        );
        assert_eq!(g.len(), 0);
    }

    #[test]
    fn revoking_forgets_only_that_delegations_grants() {
        let mut g = ArchiveGrants::default();
        let (a, b) = (SecretDigest::of("token-a"), SecretDigest::of("token-b"));
        g.grant(&a, &did("dlg_a"), at(10));
        g.grant(&b, &did("dlg_b"), at(10));
        g.revoke(&did("dlg_a"));
        assert_eq!(g.redeem(at(1), &a), Err(ArchiveUrlRefused::Unknown));
        assert_eq!(g.redeem(at(1), &b), Ok(did("dlg_b")));
    }

    #[test]
    fn an_object_grant_opens_each_object_once_and_never_as_an_archive_url() {
        let mut g = ArchiveGrants::default();
        let t = SecretDigest::of("objects");
        g.grant_objects(&t, &did("dlg_s"), at(10));
        assert_eq!(g.redeem(at(1), &t), Err(ArchiveUrlRefused::Unknown));
        let get = ObjectUse::GetWorkspace;
        let put = ObjectUse::PutResult;
        assert_eq!(g.redeem_object(at(1), &t, get), Ok(did("dlg_s")));
        assert_eq!(
            g.redeem_object(at(2), &t, get),
            Err(ArchiveUrlRefused::Unknown)
        );
        assert_eq!(g.redeem_object(at(3), &t, put), Ok(did("dlg_s")));
        assert_eq!(g.len(), 0, "gone with its last use");
        // Expired: refused, and gone.
        g.grant_objects(&t, &did("dlg_s"), at(10));
        assert_eq!(
            g.redeem_object(at(10), &t, put),
            Err(ArchiveUrlRefused::Expired)
        );
        assert_eq!(g.len(), 0);
        // An archive URL's token opens no object.
        let a = SecretDigest::of("archive");
        g.grant(&a, &did("dlg_a"), at(10));
        assert_eq!(
            g.redeem_object(at(1), &a, get),
            Err(ArchiveUrlRefused::Unknown)
        );
        assert_eq!(g.redeem(at(1), &a), Ok(did("dlg_a")));
        // Revoked with its delegation.
        g.grant_objects(&t, &did("dlg_s"), at(10));
        g.revoke(&did("dlg_s"));
        assert_eq!(
            g.redeem_object(at(1), &t, put),
            Err(ArchiveUrlRefused::Unknown)
        );
    }

    #[test]
    fn a_repository_grant_serves_many_requests_until_its_end_and_pushes_only_if_allowed() {
        let mut g = ArchiveGrants::default();
        let (rw, ro) = (SecretDigest::of("repo-rw"), SecretDigest::of("repo-ro"));
        g.grant_repository(&rw, &did("dlg_g"), at(10), true);
        g.grant_repository(&ro, &did("dlg_r"), at(10), false);
        for t in 1..4 {
            assert_eq!(
                g.redeem_repository(at(t), &rw, RepositoryUse::Fetch),
                Ok(did("dlg_g"))
            );
            assert_eq!(
                g.redeem_repository(at(t), &rw, RepositoryUse::Push),
                Ok(did("dlg_g"))
            );
        }
        assert_eq!(
            g.redeem_repository(at(1), &ro, RepositoryUse::Fetch),
            Ok(did("dlg_r"))
        );
        assert_eq!(
            g.redeem_repository(at(1), &ro, RepositoryUse::Push),
            Err(ArchiveUrlRefused::Unknown)
        );
        // Neither an archive URL nor a storage object.
        assert_eq!(g.redeem(at(1), &rw), Err(ArchiveUrlRefused::Unknown));
        assert_eq!(
            g.redeem_object(at(1), &rw, ObjectUse::GetWorkspace),
            Err(ArchiveUrlRefused::Unknown)
        );
        // Expired, then gone; revoked with its delegation.
        assert_eq!(
            g.redeem_repository(at(10), &rw, RepositoryUse::Fetch),
            Err(ArchiveUrlRefused::Expired)
        );
        assert_eq!(
            g.redeem_repository(at(1), &rw, RepositoryUse::Fetch),
            Err(ArchiveUrlRefused::Unknown)
        );
        g.revoke(&did("dlg_r"));
        assert_eq!(g.len(), 0);
        // Other grants open no repository.
        let a = SecretDigest::of("archive");
        g.grant(&a, &did("dlg_a"), at(10));
        assert_eq!(
            g.redeem_repository(at(1), &a, RepositoryUse::Fetch),
            Err(ArchiveUrlRefused::Unknown)
        );
    }

    #[test]
    fn the_layout_follows_the_dialect() {
        assert_eq!(
            ArchiveLayout::for_dialect(Dialect::Seed),
            ArchiveLayout::Flat
        );
        assert_eq!(
            ArchiveLayout::for_dialect(Dialect::Reference),
            ArchiveLayout::PerResource
        );
    }

    /// Through the engine: a delegator serving archives, an executor agreeing to
    /// `archive-url`, the delegation cancelled at `cancel_at` (before or after the prepare).
    mod engine {
        #![allow(clippy::wildcard_enum_match_arm)] // tests pick the outputs they look at
        use super::super::*;
        use crate::engine::auth::SecretDigest;
        use crate::engine::delegator::tests::{accept, drain, id, invited_with, t};
        use crate::wire::{ArchiveData, ArchiveHandle};

        fn url_handle() -> TransportHandle {
            TransportHandle::Archive(ArchiveHandle {
                data: ArchiveData {
                    base64: None,
                    url: Some("http://127.0.0.1:1/archives/secret".into()),
                    local_file: None,
                    local_file_sha256: None,
                },
                checksum: "00".into(),
                size_bytes: None,
            })
        }

        /// A delegator (serving archives or not) up to ACCEPT with `features`; returns the
        /// `PrepareTransport` it asked for.
        fn accepted(serve: bool, features: &[&str]) -> (Delegator, DelegatorOutput) {
            let mut d = invited_with(DelegatorConfig {
                serve_archives: serve,
                ..DelegatorConfig::default()
            });
            let mut a = accept();
            a.features = features.iter().map(|f| Feature::new(f)).collect();
            d.handle(
                t(2),
                DelegatorInput::Reply {
                    id: id(),
                    to: Outbound::Invite,
                    reply: Reply::Accept(Box::new(a)),
                },
            )
            .unwrap();
            let prepare = drain(&mut d)
                .into_iter()
                .find(|o| matches!(o, DelegatorOutput::PrepareTransport { .. }))
                .unwrap();
            (d, prepare)
        }

        /// Answers the delegation's `PrepareTransport` at `t(ms)`.
        fn prepared(
            d: &mut Delegator,
            ms: u64,
            result: Result<TransportHandle, PrepareFailure>,
            archive_token: Option<SecretDigest>,
        ) {
            d.handle(
                t(ms),
                DelegatorInput::TransportPrepared {
                    id: id(),
                    result: result.map(Box::new),
                    archive_token,
                },
            )
            .unwrap();
        }

        fn delivery(o: &DelegatorOutput) -> ArchiveDelivery {
            match o {
                DelegatorOutput::PrepareTransport { delivery, .. } => *delivery,
                _ => unreachable!(),
            }
        }

        #[test]
        fn by_url_only_when_this_delegator_serves_archives_and_the_executor_agreed() {
            let url = [crate::wire::feature::ARCHIVE_URL];
            assert_eq!(delivery(&accepted(true, &url).1), ArchiveDelivery::ByUrl);
            assert_eq!(delivery(&accepted(false, &url).1), ArchiveDelivery::Inline);
            assert_eq!(delivery(&accepted(true, &[]).1), ArchiveDelivery::Inline);
            assert!(matches!(
                accepted(true, &url).1,
                DelegatorOutput::PrepareTransport {
                    layout: ArchiveLayout::PerResource,
                    ..
                }
            ));
        }

        #[test]
        fn a_prepared_archive_url_is_granted_once_until_the_lease_ends() {
            let (mut d, _) = accepted(true, &[crate::wire::feature::ARCHIVE_URL]);
            let token = SecretDigest::of("secret");
            prepared(&mut d, 3, Ok(url_handle()), Some(token));
            assert_eq!(d.live_archive_urls(), 1);
            let other = SecretDigest::of("guess");
            assert_eq!(
                d.redeem_archive_url(t(4), &other),
                Err(ArchiveUrlRefused::Unknown)
            );
            assert_eq!(d.redeem_archive_url(t(4), &token), Ok(id()));
            assert_eq!(
                d.redeem_archive_url(t(5), &token),
                Err(ArchiveUrlRefused::Unknown),
                "one-time"
            );

            // A fresh delegation: the same grant, asked for after its lease (600 s) ended.
            let (mut d, _) = accepted(true, &[crate::wire::feature::ARCHIVE_URL]);
            prepared(&mut d, 3, Ok(url_handle()), Some(token));
            assert_eq!(
                d.redeem_archive_url(t(600_001), &token),
                Err(ArchiveUrlRefused::Expired)
            );
        }

        #[test]
        fn a_released_transport_takes_its_archive_url_with_it() {
            // Cancelled while preparing: the prepared archive is released at once, and its
            // URL never opens.
            let (mut d, _) = accepted(true, &[crate::wire::feature::ARCHIVE_URL]);
            d.cancel(t(3), &id()).unwrap();
            drain(&mut d);
            let token = SecretDigest::of("secret");
            prepared(&mut d, 4, Ok(url_handle()), Some(token));
            let out = drain(&mut d);
            assert!(out
                .iter()
                .any(|o| matches!(o, DelegatorOutput::ReleaseTransport { .. })));
            assert_eq!(d.live_archive_urls(), 0);
            assert_eq!(
                d.redeem_archive_url(t(5), &token),
                Err(ArchiveUrlRefused::Unknown)
            );
        }

        #[test]
        fn a_failed_prepare_grants_nothing() {
            let (mut d, _) = accepted(true, &[crate::wire::feature::ARCHIVE_URL]);
            prepared(
                &mut d,
                3,
                Err(PrepareFailure::Local("disk full".into())),
                Some(SecretDigest::of("secret")),
            );
            assert_eq!(d.live_archive_urls(), 0);
        }
    }
}
