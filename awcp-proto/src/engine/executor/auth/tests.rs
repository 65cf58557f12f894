//! The auth rules: header verdicts before the body, bound credentials, body limits.

use super::*;

/// A required bearer token `s3cret` (also used by `body`'s tests).
pub(super) fn req() -> RequiredAuth {
    RequiredAuth {
        types: vec![AuthType::Bearer],
        credential: "s3cret".into(),
    }
}

/// Limits of 1000 bytes, 100 without a credential (also used by `body`'s tests).
pub(super) const LIMITS: BodyLimits = BodyLimits {
    max: 1000,
    unauthenticated: 100,
};

#[test]
fn digests_round_trip_and_compare() {
    let d = SecretDigest::of("abc");
    assert!(d.matches("abc"));
    assert!(!d.matches("abd"));
    assert!(!d.matches(""));
    assert_eq!(SecretDigest::from_hex(&d.to_hex()), Some(d));
    assert_eq!(SecretDigest::from_hex("zz"), None);
    assert!(!format!("{d:?}").contains(&d.to_hex()));
}

#[test]
fn wrong_type_or_secret_is_refused_from_the_headers() {
    let r = req();
    let v = |p: Presented, e| check_headers(Some(&r), e, &p, Some(10), LIMITS);
    let refused = |v: HeaderVerdict| matches!(v, HeaderVerdict::Refuse { status: 401, .. });
    assert!(refused(v(
        Presented::Credential(Credential::api_key("s3cret")),
        Endpoint::Delegation
    )));
    assert!(refused(v(
        Presented::Credential(Credential::bearer("nope")),
        Endpoint::Message
    )));
    assert!(refused(v(
        Presented::Unsupported("Basic".into()),
        Endpoint::Delegation
    )));
    assert!(refused(v(Presented::Nothing, Endpoint::Status)));
    assert_eq!(
        v(Presented::Nothing, Endpoint::Public),
        HeaderVerdict::Proceed { body_limit: 100 }
    );
    assert_eq!(
        v(
            Presented::Credential(Credential::bearer("s3cret")),
            Endpoint::Status
        ),
        HeaderVerdict::Proceed { body_limit: 1000 }
    );
}

#[test]
fn unauthenticated_bodies_are_bounded_before_reading() {
    let r = req();
    let v = |n| check_headers(Some(&r), Endpoint::Message, &Presented::Nothing, n, LIMITS);
    assert_eq!(v(Some(100)), HeaderVerdict::Proceed { body_limit: 100 });
    // A larger message, or one of unknown length, may be a START for a delegation bound at
    // INVITE: its first bytes decide (`body`); over the overall limit it is refused.
    assert_eq!(v(None), HeaderVerdict::Peek { peek: 1000 });
    assert_eq!(v(Some(101)), HeaderVerdict::Peek { peek: 1000 });
    assert!(matches!(
        v(Some(1001)),
        HeaderVerdict::Refuse { status: 413, .. }
    ));
    // Other endpoints name their delegation in the path: the header decides alone.
    assert!(matches!(
        check_headers(
            Some(&r),
            Endpoint::Delegation,
            &Presented::Nothing,
            Some(101),
            LIMITS
        ),
        HeaderVerdict::Refuse { status: 401, .. }
    ));
    let with = check_headers(
        Some(&r),
        Endpoint::Message,
        &Presented::Credential(Credential::bearer("s3cret")),
        Some(1001),
        LIMITS,
    );
    assert!(matches!(with, HeaderVerdict::Refuse { status: 413, .. }));
    // Auth off: only the overall limit.
    let off = check_headers(
        None,
        Endpoint::Message,
        &Presented::Nothing,
        Some(500),
        LIMITS,
    );
    assert_eq!(off, HeaderVerdict::Proceed { body_limit: 1000 });
}

#[test]
fn invite_binds_header_or_delegation_id() {
    let r = req();
    let id = DelegationId::new("dlg_0a1b2c3d4e5f60718293a4b5c6d7e8f9").unwrap();
    let field = crate::wire::Auth {
        auth_type: AuthType::Bearer,
        credential: "s3cret".into(),
        metadata: Default::default(),
    };
    let b = authenticate_invite(Some(&r), &id, Some(&Credential::bearer("s3cret")), None)
        .unwrap()
        .unwrap();
    assert_eq!(b.binding, Binding::Header);
    let b = authenticate_invite(Some(&r), &id, None, Some(&field))
        .unwrap()
        .unwrap();
    assert_eq!(b.binding, Binding::DelegationId);
    // A guessable id cannot stand for the credential.
    let short = DelegationId::new("dlg_a1b2c3d4").unwrap();
    assert!(authenticate_invite(Some(&r), &short, None, Some(&field)).is_err());
    assert!(authenticate_invite(Some(&r), &id, None, None).is_err());
    assert_eq!(authenticate_invite(None, &id, None, None), Ok(None));
}

#[test]
fn later_requests_follow_the_binding() {
    let r = req();
    let header = BoundCredential {
        digest: SecretDigest::of("s3cret"),
        binding: Binding::Header,
    };
    let by_id = BoundCredential {
        binding: Binding::DelegationId,
        ..header
    };
    let good = Credential::bearer("s3cret");
    let bad = Credential::bearer("x");
    assert!(authorize(Some(&r), Some(&header), Some(&good)).is_ok());
    assert!(authorize(Some(&r), Some(&header), None).is_err());
    assert!(authorize(Some(&r), Some(&by_id), None).is_ok());
    assert!(authorize(Some(&r), Some(&by_id), Some(&bad)).is_err());
    assert!(authorize(Some(&r), None, None).is_err());
    assert!(authorize(Some(&r), None, Some(&good)).is_ok());
    assert!(authorize(None, None, None).is_ok());
}

#[test]
fn an_overlong_body_is_the_missing_credentials_fault_only_where_one_is_required() {
    let req = RequiredAuth {
        types: Vec::new(),
        credential: "t".into(),
    };
    assert_eq!(body_over_limit(Some(&req), false, 10).0, 401);
    assert_eq!(
        body_over_limit(Some(&req), false, 10).1.code,
        ErrorCode::AuthFailed
    );
    assert_eq!(body_over_limit(Some(&req), true, 10).0, 413);
    assert_eq!(
        body_over_limit(None, false, 10).1.code,
        ErrorCode::WorkspaceTooLarge
    );
}
