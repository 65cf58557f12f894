//! Property tests: `decode(encode(x, d)) == (x, d)` for every wire type, in every dialect that
//! can represent the value.
//!
//! What each dialect can represent (and thus what the strategies generate):
//! * [R] INVITE: anything. [S] INVITE: exactly one `fs` resource named `workspace` with the
//!   lease's access mode, an export name, no `retentionMs`.
//! * [R] ACCEPT: `retentionMs` present (its presence is the dialect marker); [S] ACCEPT: none.
//! * START: any handle in both dialects.
//! * DONE and ERROR messages: [R] only (they carry no dialect marker).
//! * Events: everything reads back as [R] except a `done` with `resultBase64`, which is [S];
//!   an [S] `done` has no snapshot ids.
//! * `progress` is generated from quarter steps so the decimal text is exact.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::wildcard_enum_match_arm
)] // test code

use std::collections::BTreeMap;

use awcp_proto::*;
use proptest::collection::{btree_map, vec};
use proptest::option::of;
use proptest::prelude::*;
use serde_json::Value;

fn text() -> impl Strategy<Value = String> {
    ".{0,16}"
}

fn id_str() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_][A-Za-z0-9_.-]{0,40}"
}

fn delegation_id() -> impl Strategy<Value = DelegationId> {
    id_str().prop_map(|s| DelegationId::new(s).unwrap())
}

fn snapshot_id() -> impl Strategy<Value = SnapshotId> {
    id_str().prop_map(|s| SnapshotId::new(s).unwrap())
}

fn resource_name() -> impl Strategy<Value = ResourceName> {
    id_str().prop_map(|s| ResourceName::new(s).unwrap())
}

fn timestamp() -> impl Strategy<Value = Timestamp> {
    // up to 9999-12-31T23:59:59.999Z
    (0u64..=253_402_300_799_999).prop_map(Timestamp::from_unix_millis)
}

fn access_mode() -> impl Strategy<Value = AccessMode> {
    prop_oneof![Just(AccessMode::Ro), Just(AccessMode::Rw)]
}

fn str_map() -> impl Strategy<Value = BTreeMap<String, String>> {
    btree_map(text(), text(), 0..3)
}

fn strings() -> impl Strategy<Value = Vec<String>> {
    vec(text(), 0..3)
}

fn transport_kind() -> impl Strategy<Value = TransportKind> {
    prop_oneof![
        Just(TransportKind::Archive),
        Just(TransportKind::Sshfs),
        Just(TransportKind::Storage),
        Just(TransportKind::Git),
        "x-[a-z]{1,8}".prop_map(TransportKind::Other),
    ]
}

fn auth() -> impl Strategy<Value = Auth> {
    let auth_type = prop_oneof![
        Just(AuthType::ApiKey),
        Just(AuthType::Bearer),
        Just(AuthType::OAuth2),
        Just(AuthType::Custom),
        "x-[a-z]{1,8}".prop_map(AuthType::Other),
    ];
    (auth_type, text(), str_map()).prop_map(|(auth_type, credential, metadata)| Auth {
        auth_type,
        credential,
        metadata,
    })
}

fn error_info() -> impl Strategy<Value = ErrorInfo> {
    let code = prop_oneof![
        (0..ErrorCode::KNOWN.len()).prop_map(|i| ErrorCode::KNOWN[i].clone()),
        "X_[A-Z]{1,8}".prop_map(ErrorCode::Other),
    ];
    (code, text(), of(text())).prop_map(|(code, message, hint)| ErrorInfo {
        code,
        message,
        hint,
    })
}

fn archive_data() -> impl Strategy<Value = ArchiveData> {
    prop_oneof![
        text().prop_map(|b| ArchiveData {
            base64: Some(b),
            url: None,
            local_file: None,
            local_file_sha256: None,
        }),
        text().prop_map(|u| ArchiveData {
            base64: None,
            url: Some(u),
            local_file: None,
            local_file_sha256: None,
        }),
        (text(), text()).prop_map(|(b, u)| ArchiveData {
            base64: Some(b),
            url: Some(u),
            local_file: None,
            local_file_sha256: None,
        }),
    ]
}

fn handle() -> impl Strategy<Value = TransportHandle> {
    let archive = (archive_data(), text(), of(any::<u64>())).prop_map(|(data, checksum, size)| {
        TransportHandle::Archive(ArchiveHandle {
            data,
            checksum,
            size_bytes: size,
        })
    });
    let sshfs = (
        (text(), any::<u16>(), text()),
        text(),
        (text(), of(text())),
        str_map(),
        of(text()),
    )
        .prop_map(
            |((host, port, user), export_locator, (key, cert), options, host_key)| {
                TransportHandle::Sshfs(SshfsHandle {
                    endpoint: SshEndpoint { host, port, user },
                    export_locator,
                    credential: SshCredential {
                        private_key: key,
                        certificate: cert,
                    },
                    options,
                    host_key,
                })
            },
        );
    let storage = (text(), text(), text(), timestamp(), str_map()).prop_map(
        |(download_url, upload_url, checksum, expires_at, headers)| {
            TransportHandle::Storage(StorageHandle {
                download_url,
                upload_url,
                checksum,
                expires_at,
                headers,
            })
        },
    );
    let git_auth = prop_oneof![
        text().prop_map(GitAuth::Token),
        (of(text()), of(text())).prop_map(|(private_key, host_key)| GitAuth::Ssh {
            private_key,
            host_key
        }),
        Just(GitAuth::None),
    ];
    let git = (text(), text(), text(), of(git_auth)).prop_map(
        |(repo_url, base_branch, base_commit, auth)| {
            TransportHandle::Git(GitHandle {
                repo_url,
                base_branch,
                base_commit,
                auth,
            })
        },
    );
    prop_oneof![archive, sshfs, storage, git]
}

fn task() -> impl Strategy<Value = TaskSpec> {
    (text(), text()).prop_map(|(description, prompt)| TaskSpec {
        description,
        prompt,
    })
}

fn lease_request() -> impl Strategy<Value = LeaseRequest> {
    (any::<u64>(), access_mode()).prop_map(|(ttl_seconds, access_mode)| LeaseRequest {
        ttl_seconds,
        access_mode,
    })
}

fn resource() -> impl Strategy<Value = Resource> {
    (resource_name(), "[a-z]{1,6}", access_mode()).prop_map(|(name, kind, mode)| Resource {
        name,
        kind,
        mode,
    })
}

fn reference_invite() -> impl Strategy<Value = Message> {
    (
        (delegation_id(), task(), lease_request()),
        vec(resource(), 0..3),
        of(text()),
        of(any::<u64>()),
        of(transport_kind()),
        of(auth()),
        strings(),
    )
        .prop_map(
            |(
                (delegation_id, task, lease),
                resources,
                export_name,
                retention_ms,
                transport,
                auth,
                features,
            )| {
                Message::Invite(Invite {
                    delegation_id,
                    task,
                    lease,
                    resources,
                    export_name,
                    retention_ms,
                    transport,
                    auth,
                    features: features.into_iter().map(Feature::from).collect(),
                })
            },
        )
}

fn seed_invite() -> impl Strategy<Value = Message> {
    (
        (delegation_id(), task(), lease_request()),
        text(),
        of(transport_kind()),
        of(auth()),
        strings(),
    )
        .prop_map(
            |((delegation_id, task, lease), export_name, transport, auth, features)| {
                Message::Invite(Invite {
                    delegation_id,
                    task,
                    lease,
                    resources: vec![Resource {
                        name: ResourceName::new("workspace").unwrap(),
                        kind: "fs".into(),
                        mode: lease.access_mode,
                    }],
                    export_name: Some(export_name),
                    retention_ms: None,
                    transport,
                    auth,
                    features: features.into_iter().map(Feature::from).collect(),
                })
            },
        )
}

fn constraints() -> impl Strategy<Value = ExecutorConstraints> {
    let sandbox = (of(any::<bool>()), of(any::<bool>()), of(any::<bool>())).prop_map(
        |(cwd_only, allow_network, allow_exec)| SandboxProfile {
            cwd_only,
            allow_network,
            allow_exec,
        },
    );
    (of(access_mode()), of(any::<u64>()), of(sandbox)).prop_map(
        |(accepted_access_mode, max_ttl_seconds, sandbox_profile)| ExecutorConstraints {
            accepted_access_mode,
            max_ttl_seconds,
            sandbox_profile,
        },
    )
}

fn accept(retention: BoxedStrategy<Option<u64>>) -> impl Strategy<Value = Message> {
    (
        delegation_id(),
        text(),
        of(constraints()),
        retention,
        strings(),
    )
        .prop_map(
            |(delegation_id, work_dir, constraints, retention_ms, features)| {
                Message::Accept(Accept {
                    delegation_id,
                    work_dir,
                    constraints,
                    retention_ms,
                    features: features.into_iter().map(Feature::from).collect(),
                })
            },
        )
}

fn start() -> impl Strategy<Value = Message> {
    (delegation_id(), timestamp(), access_mode(), handle()).prop_map(
        |(delegation_id, expires_at, access_mode, handle)| {
            Message::Start(Start {
                delegation_id,
                lease: ActiveLease {
                    expires_at,
                    access_mode,
                },
                handle,
            })
        },
    )
}

fn done_message() -> impl Strategy<Value = Message> {
    (delegation_id(), text(), strings(), of(text())).prop_map(
        |(delegation_id, final_summary, highlights, notes)| {
            Message::Done(Done {
                delegation_id,
                final_summary,
                highlights,
                notes,
            })
        },
    )
}

fn error_message() -> impl Strategy<Value = Message> {
    (delegation_id(), error_info()).prop_map(|(delegation_id, error)| {
        Message::Error(ErrorMessage {
            delegation_id,
            error,
        })
    })
}

fn reference_message() -> impl Strategy<Value = Message> {
    prop_oneof![
        reference_invite(),
        accept(any::<u64>().prop_map(Some).boxed()),
        start(),
        done_message(),
        error_message(),
    ]
}

fn seed_message() -> impl Strategy<Value = Message> {
    prop_oneof![seed_invite(), accept(Just(None).boxed()), start()]
}

fn metadata() -> impl Strategy<Value = BTreeMap<String, Value>> {
    let value = prop_oneof![
        any::<i64>().prop_map(Value::from),
        text().prop_map(Value::from),
        any::<bool>().prop_map(Value::from),
        vec(text(), 0..3).prop_map(Value::from),
    ];
    btree_map(text(), value, 0..3)
}

fn reference_event_kind() -> impl Strategy<Value = TaskEventKind> {
    let status = prop_oneof![
        Just(TaskStatus::Running),
        Just(TaskStatus::Progress),
        "x-[a-z]{1,8}".prop_map(TaskStatus::Other),
    ];
    let status = (
        status,
        of(text()),
        of((-4000i32..4000).prop_map(|n| f64::from(n) / 4.0)),
    )
        .prop_map(|(status, message, progress)| {
            TaskEventKind::Status(StatusEvent {
                status,
                message,
                progress,
            })
        });
    let snapshot = (
        snapshot_id(),
        text(),
        strings(),
        archive_data(),
        of(text()),
        of(any::<bool>()),
        metadata(),
    )
        .prop_map(
            |(snapshot_id, summary, highlights, data, checksum, recommended, metadata)| {
                TaskEventKind::Snapshot(SnapshotEvent {
                    snapshot_id,
                    summary,
                    highlights,
                    data,
                    checksum,
                    recommended,
                    metadata,
                })
            },
        );
    let done = (
        text(),
        strings(),
        vec(snapshot_id(), 0..3),
        of(snapshot_id()),
    )
        .prop_map(
            |(summary, highlights, snapshot_ids, recommended_snapshot_id)| {
                TaskEventKind::Done(DoneEvent {
                    summary,
                    highlights,
                    snapshot_ids,
                    recommended_snapshot_id,
                    result_base64: None,
                    result_local_file: None,
                })
            },
        );
    prop_oneof![
        status,
        snapshot,
        done,
        error_info().prop_map(TaskEventKind::Error)
    ]
}

fn seed_event_kind() -> impl Strategy<Value = TaskEventKind> {
    (text(), strings(), text()).prop_map(|(summary, highlights, result)| {
        TaskEventKind::Done(DoneEvent {
            summary,
            highlights,
            snapshot_ids: Vec::new(),
            recommended_snapshot_id: None,
            result_base64: Some(result),
            result_local_file: None,
        })
    })
}

fn event(kind: BoxedStrategy<TaskEventKind>) -> impl Strategy<Value = TaskEvent> {
    (delegation_id(), timestamp(), kind).prop_map(|(delegation_id, timestamp, kind)| TaskEvent {
        delegation_id,
        timestamp,
        kind,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn reference_messages_round_trip(msg in reference_message()) {
        let json = encode_message(&msg, Dialect::Reference);
        prop_assert_eq!(decode_message(json.as_bytes()), Ok((msg, Dialect::Reference)));
    }

    #[test]
    fn seed_messages_round_trip(msg in seed_message()) {
        let json = encode_message(&msg, Dialect::Seed);
        prop_assert_eq!(decode_message(json.as_bytes()), Ok((msg, Dialect::Seed)));
    }

    #[test]
    fn reference_events_round_trip(ev in event(reference_event_kind().boxed())) {
        let json = encode_event(&ev, Dialect::Reference);
        prop_assert_eq!(decode_event(json.as_bytes()), Ok((ev, Dialect::Reference)));
    }

    #[test]
    fn seed_events_round_trip(ev in event(seed_event_kind().boxed())) {
        let json = encode_event(&ev, Dialect::Seed);
        prop_assert_eq!(decode_event(json.as_bytes()), Ok((ev, Dialect::Seed)));
    }

    #[test]
    fn handles_round_trip(h in handle(), path in "[a-zA-Z]{0,12}") {
        let v = encode_handle(&h);
        prop_assert_eq!(decode_handle(&v, &path), Ok(h));
    }

    #[test]
    fn encoder_never_writes_null(msg in reference_message(), ev in event(reference_event_kind().boxed())) {
        fn no_null(v: &Value) -> bool {
            match v {
                Value::Null => false,
                Value::Array(a) => a.iter().all(no_null),
                Value::Object(o) => o.values().all(no_null),
                _ => true,
            }
        }
        let m = message_to_value(&msg, Dialect::Reference);
        prop_assert_eq!(m["version"].as_str(), Some("1"));
        prop_assert!(no_null(&m));
        prop_assert!(no_null(&message_to_value(&msg, Dialect::Seed)));
        prop_assert!(no_null(&event_to_value(&ev, Dialect::Reference)));
    }

    #[test]
    fn encoding_an_owned_message_writes_the_same_text(msg in reference_message()) {
        for d in [Dialect::Reference, Dialect::Seed] {
            let text = encode_message_owned(msg.clone(), d);
            prop_assert_eq!(&text, &encode_message(&msg, d));
            let owned = decode_message_owned(text.clone().into_bytes()).map_err(|(e, _)| e);
            prop_assert_eq!(owned, decode_message(text.as_bytes()));
        }
    }

    #[test]
    fn the_wire_types_go_through_serde_json_as_the_codec_writes_and_reads_them(
        r in reference_message(),
        s in seed_message(),
        ev in event(reference_event_kind().boxed()),
        sev in event(seed_event_kind().boxed()),
        h in handle(),
    ) {
        use awcp_proto::wire::InDialect;
        // Written: a message or event on its own is the reference dialect; `InDialect` picks.
        prop_assert_eq!(serde_json::to_string(&r).unwrap(), encode_message(&r, Dialect::Reference));
        prop_assert_eq!(serde_json::to_string(&InDialect(&s, Dialect::Seed)).unwrap(), encode_message(&s, Dialect::Seed));
        prop_assert_eq!(serde_json::to_string(&ev).unwrap(), encode_event(&ev, Dialect::Reference));
        prop_assert_eq!(serde_json::to_string(&InDialect(&sev, Dialect::Seed)).unwrap(), encode_event(&sev, Dialect::Seed));
        prop_assert_eq!(serde_json::to_value(&h).unwrap(), encode_handle(&h));
        // Read: either dialect, as the decoders read it.
        for (msg, d) in [(&r, Dialect::Reference), (&s, Dialect::Seed)] {
            let text = encode_message(msg, d);
            prop_assert_eq!(&serde_json::from_str::<Message>(&text).unwrap(), msg);
        }
        for (e, d) in [(&ev, Dialect::Reference), (&sev, Dialect::Seed)] {
            let text = encode_event(e, d);
            prop_assert_eq!(&serde_json::from_str::<TaskEvent>(&text).unwrap(), e);
        }
        prop_assert_eq!(serde_json::from_value::<TransportHandle>(encode_handle(&h)).unwrap(), h);
    }

    #[test]
    fn decoders_never_panic_on_bytes(bytes in vec(any::<u8>(), 0..256)) {
        let _ = decode_message(&bytes);
        let _ = decode_event(&bytes);
    }

    #[test]
    fn decoders_never_panic_on_damaged_messages(
        msg in reference_message(),
        ev in event(reference_event_kind().boxed()),
        cut in any::<prop::sample::Index>(),
        junk in prop_oneof![
            Just(Value::Null),
            Just(Value::from(-1)),
            Just(Value::from(1.5e300)),
            Just(Value::from("../..")),
            Just(serde_json::json!([])),
            Just(serde_json::json!({})),
        ],
    ) {
        // Replace one (possibly nested) field by junk; decoding must fail or succeed cleanly.
        fn damage(v: &mut Value, n: &mut usize, junk: &Value) {
            if let Value::Object(o) = v {
                for (_, child) in o.iter_mut() {
                    if *n == 0 {
                        *child = junk.clone();
                        *n = usize::MAX;
                        return;
                    }
                    *n -= 1;
                    damage(child, n, junk);
                    if *n == usize::MAX {
                        return;
                    }
                }
            }
        }
        for mut v in [message_to_value(&msg, Dialect::Reference), event_to_value(&ev, Dialect::Reference)] {
            let mut n = cut.index(32);
            damage(&mut v, &mut n, &junk);
            let bytes = v.to_string();
            let _ = decode_message(bytes.as_bytes());
            let _ = decode_event(bytes.as_bytes());
        }
    }
}

/// A refused body comes back whole, to be quoted.
#[test]
fn an_undecodable_owned_body_is_handed_back() {
    let body = br#"{"type":"START","delegationId":"dlg_x"}"#.to_vec();
    let (e, back) = decode_message_owned(body.clone()).unwrap_err();
    assert_eq!(back, body);
    assert_eq!(Err(e), decode_message(&body).map(|_| ()));
}

/// A START with a large inline archive: the owned encoding reuses the archive's text and
/// writes exactly what the borrowing one writes, also when the task's text mimics the field,
/// and falls back for text that would need escaping.
#[test]
fn an_owned_start_with_a_large_inline_archive_encodes_the_same() {
    let id = DelegationId::new("dlg_owned").unwrap();
    let b64 = "QUJD+/9=".repeat(20_000);
    for text in [b64.clone(), format!("{b64}\"quote")] {
        let start = Message::Start(Start {
            delegation_id: id.clone(),
            lease: ActiveLease {
                expires_at: Timestamp::from_unix_millis(1_700_000_000_000),
                access_mode: AccessMode::Rw,
            },
            handle: TransportHandle::Archive(ArchiveHandle {
                data: ArchiveData {
                    base64: Some(text.clone()),
                    url: None,
                    local_file: None,
                    local_file_sha256: None,
                },
                checksum: "c".repeat(64),
                size_bytes: Some(1),
            }),
        });
        for d in [Dialect::Reference, Dialect::Seed] {
            let owned = encode_message_owned(start.clone(), d);
            assert_eq!(owned, encode_message(&start, d));
            let (back, _) = decode_message(owned.as_bytes()).unwrap();
            assert_eq!(back, start);
            let (back, _) = decode_message_owned(owned.clone().into_bytes()).unwrap();
            assert_eq!(back, start, "decoded in the body's buffer");
            // The same archive with JSON escapes (`\/`), as another encoder may write it:
            // copied out instead, same message.
            let escaped = owned.replace('/', "\\/");
            let (back, _) = decode_message_owned(escaped.into_bytes()).unwrap();
            assert_eq!(back, start, "escaped");
        }
    }
}

/// A START whose archive is a local file: the split encoding with the file's base64 between
/// head and tail is exactly the plain encoding; read back through the diverter in pieces of
/// any size, the archive text comes out and the kept JSON decodes to the same START with
/// that field empty. In both dialects, also with `/` escaped as another encoder may write it.
#[test]
fn a_start_split_around_its_archive_file_travels_and_is_diverted_whole() {
    use awcp_proto::wire::divert::ArchiveTextDiverter;
    let id = DelegationId::new("dlg_split").unwrap();
    let b64 = "QUJD+/9a".repeat(5_000);
    let start_with = |data: ArchiveData| {
        Message::Start(Start {
            delegation_id: id.clone(),
            lease: ActiveLease {
                expires_at: Timestamp::from_unix_millis(1_700_000_000_000),
                access_mode: AccessMode::Rw,
            },
            handle: TransportHandle::Archive(ArchiveHandle {
                data,
                checksum: "c".repeat(64),
                size_bytes: Some(30_000),
            }),
        })
    };
    let inline = start_with(ArchiveData {
        base64: Some(b64.clone()),
        url: None,
        local_file: None,
        local_file_sha256: None,
    });
    let from_file = start_with(ArchiveData {
        base64: None,
        url: None,
        local_file: Some("/tmp/x.zip".into()),
        local_file_sha256: None,
    });
    let emptied = start_with(ArchiveData {
        base64: Some(String::new()),
        url: None,
        local_file: None,
        local_file_sha256: None,
    });
    assert_eq!(encode_message_split(&inline, Dialect::Reference), None);
    for d in [Dialect::Reference, Dialect::Seed] {
        let split = encode_message_split(&from_file, d).unwrap();
        assert_eq!(split.file, "/tmp/x.zip");
        let whole = format!("{}{b64}{}", split.head, split.tail);
        assert_eq!(whole, encode_message(&inline, d));
        assert_eq!(split.body_len(30_000), whole.len() as u64);
        for body in [whole.clone(), whole.replace('/', "\\/")] {
            for piece in [1, 7, 4096, body.len()] {
                let mut div = ArchiveTextDiverter::new(1 << 16);
                let mut text = Vec::new();
                for c in body.as_bytes().chunks(piece) {
                    div.push(c, &mut text).unwrap();
                }
                assert!(div.diverted());
                assert_eq!(text, b64.as_bytes(), "{d:?} piece {piece}");
                let (back, dialect) = decode_message(&div.finish()).unwrap();
                assert_eq!(dialect, d);
                assert_eq!(back, emptied, "{d:?} piece {piece}");
            }
        }
    }
}

/// A `snapshot` event ([R]), a `done` event ([S]) and a `GET …/result` body whose result is a
/// local file: the split encoding with the file's base64 between head and tail is exactly the
/// plain encoding with the archive inline; read back through the delegator's diverting SSE
/// decoder in pieces of any size, the archive text comes out whole and the rest decodes to the
/// same event with the field empty.
#[test]
fn results_split_around_their_archive_file_travel_and_are_diverted_whole() {
    use awcp_proto::engine::executor::{ResultBody, ResultStatus};
    use awcp_proto::http_binding::{encode_response, encode_response_split};
    use awcp_proto::sse::{encode_data, DivertingSseDecoder, SsePiece};
    let id = DelegationId::new("dlg_split").unwrap();
    let b64 = "QUJD+/9a".repeat(5_000);
    let data = |base64: Option<&str>, file: Option<&str>| ArchiveData {
        base64: base64.map(str::to_owned),
        url: None,
        local_file: file.map(str::to_owned),
        local_file_sha256: None,
    };
    let snapshot = |data: ArchiveData| SnapshotEvent {
        snapshot_id: SnapshotId::new("snap_0123456789ab").unwrap(),
        summary: r#"wrote "snapshotBase64":"" as text"#.into(),
        highlights: vec!["out.bin".into()],
        data,
        checksum: Some("c".repeat(64)),
        recommended: Some(true),
        metadata: BTreeMap::from([("fileCount".to_owned(), serde_json::json!(3))]),
    };
    let event = |kind| TaskEvent {
        delegation_id: id.clone(),
        timestamp: Timestamp::from_unix_millis(1_700_000_000_000),
        kind,
    };
    let done = |inline: Option<&str>, file: Option<&str>| {
        TaskEventKind::Done(DoneEvent {
            summary: "s".into(),
            highlights: vec![],
            snapshot_ids: vec![],
            recommended_snapshot_id: None,
            result_base64: inline.map(str::to_owned),
            result_local_file: file.map(str::to_owned),
        })
    };
    let cases = [
        (
            Dialect::Reference,
            event(TaskEventKind::Snapshot(snapshot(data(Some(&b64), None)))),
            event(TaskEventKind::Snapshot(snapshot(data(
                None,
                Some("/tmp/r.zip"),
            )))),
            event(TaskEventKind::Snapshot(snapshot(data(Some(""), None)))),
        ),
        (
            Dialect::Seed,
            event(done(Some(&b64), None)),
            event(done(None, Some("/tmp/r.zip"))),
            event(done(Some(""), None)),
        ),
    ];
    for (d, inline, from_file, emptied) in cases {
        assert_eq!(encode_event_split(&inline, d), None);
        let split = encode_event_split(&from_file, d).unwrap();
        assert_eq!(split.file, "/tmp/r.zip");
        let whole = format!("{}{b64}{}", split.head, split.tail);
        assert_eq!(whole, encode_event(&inline, d), "{d:?}");
        let frame = encode_data(&whole);
        for piece in [1, 7, 4096, frame.len()] {
            let mut dec = DivertingSseDecoder::new(1 << 12, 1 << 20);
            let mut pieces = Vec::new();
            for c in frame.as_bytes().chunks(piece) {
                dec.push(c, &mut pieces);
            }
            let mut text = Vec::new();
            let mut kept = None;
            for p in pieces {
                match p {
                    SsePiece::ArchiveText(t) => text.extend_from_slice(&t),
                    SsePiece::Event { data, diverted, .. } => {
                        assert!(diverted);
                        kept = Some(data);
                    }
                    SsePiece::Dropped(r) => panic!("{r}"),
                }
            }
            assert_eq!(text, b64.as_bytes(), "{d:?} piece {piece}");
            let (back, _) = decode_event(kept.unwrap().as_bytes()).unwrap();
            assert_eq!(back, emptied, "{d:?} piece {piece}");
        }
    }
    // The same for a `GET …/result` answer.
    let result = |data: ArchiveData| {
        awcp_proto::engine::executor::Response::Result(Box::new(ResultBody {
            status: ResultStatus::Completed,
            completed_at: Some(Timestamp::from_unix_millis(1_700_000_000_000)),
            outcome: Some(TaskOutcome {
                summary: "s".into(),
                highlights: vec![],
            }),
            snapshot: Some(snapshot(data)),
            error: None,
        }))
    };
    assert_eq!(encode_response_split(&result(data(Some(&b64), None))), None);
    let (status, split) = encode_response_split(&result(data(None, Some("/tmp/r.zip")))).unwrap();
    let (want_status, want) = encode_response(&result(data(Some(&b64), None)));
    assert_eq!(status, want_status);
    assert_eq!(format!("{}{b64}{}", split.head, split.tail), want);
}
