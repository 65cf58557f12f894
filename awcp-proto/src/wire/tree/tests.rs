//! Tests of the flat parsed JSON: lookups, repeated keys, nesting, against `serde_json`.

#![allow(clippy::unwrap_used)]

use super::*;

#[test]
fn strings_borrow_unless_escaped_and_the_last_duplicate_key_wins() {
    let text = br#"{"a":"plain","b":"esc\"aped","a":"again","n":[1,-2,1.5,null,true]}"#;
    let doc = Doc::parse(text).unwrap();
    let j = doc.root();
    assert!(matches!(j.get("b").unwrap().as_cow(), Some(Cow::Owned(s)) if s == "esc\"aped"));
    assert!(matches!(
        j.get("a").unwrap().as_cow(),
        Some(Cow::Borrowed("again"))
    ));
    let v: Value = serde_json::from_slice(text).unwrap();
    assert_eq!(j.to_value(), v);
    assert_eq!(Doc::from_value(&v).root().to_value(), v);
    assert!(j.get("missing").is_none());
    assert_eq!(j.get("n").unwrap().as_array().unwrap().len(), 5);
    assert_eq!(doc.member_at(0, "a"), Some(6));
    assert_eq!(doc.member_at(0, "n"), Some(8));
}

#[test]
fn a_member_of_a_nested_object_is_looked_up_in_that_object_only() {
    // The parent's next key has the name looked up in the nested object.
    let text = br#"{"h":{"transport":"archive"},"workspaceBase64":"parent's"}"#;
    let doc = Doc::parse(text).unwrap();
    let h = doc.member_at(0, "h").unwrap();
    assert_eq!(doc.member_at(h, "workspaceBase64"), None);
    assert_eq!(doc.member_at(h, "transport"), Some(h + 2));
    assert_eq!(doc.member_at(0, "workspaceBase64"), Some(6));
}

#[test]
fn nested_values_are_skipped_whole() {
    let text = br#"{"x":{"y":[1,{"z":[]},[2,3]],"w":{}},"k":"v","e":[]}"#;
    let doc = Doc::parse(text).unwrap();
    let j = doc.root();
    assert_eq!(j.get("k").and_then(Json::as_str), Some("v"));
    assert_eq!(j.get("e").unwrap().as_array().unwrap().len(), 0);
    let y: Vec<Value> = j
        .get("x")
        .unwrap()
        .get("y")
        .unwrap()
        .as_array()
        .unwrap()
        .map(Json::to_value)
        .collect();
    assert_eq!(
        y,
        vec![
            serde_json::json!(1),
            serde_json::json!({"z": []}),
            serde_json::json!([2, 3])
        ]
    );
    assert!(j.get("x").unwrap().get("w").unwrap().as_object().is_some());
}

#[test]
fn a_repeated_key_is_found_wherever_it_repeats_and_its_last_value_counts() {
    for n in 1..40 {
        for repeated in 0..n {
            let mut text = String::from("{");
            for i in 0..n {
                text.push_str(&format!("\"k{i}\":{{\"v\":{i}}},"));
            }
            text.push_str(&format!("\"k{repeated}\":\"last\"}}"));
            let doc = Doc::parse(text.as_bytes()).unwrap();
            let v: Value = serde_json::from_str(&text).unwrap();
            for i in 0..n {
                let key = format!("k{i}");
                assert_eq!(
                    doc.root().get(&key).map(Json::to_value).as_ref(),
                    v.get(&key)
                );
            }
        }
    }
}

#[test]
fn a_lookup_started_at_any_member_finds_what_one_from_the_start_finds() {
    for text in [
        r#"{"a":1,"bb":{"x":[1,2]},"c":[{"d":1}],"dd":null,"e":"s"}"#,
        r#"{"a":1,"bb":2,"a":3,"c":4}"#,
        r#"{}"#,
    ] {
        let doc = Doc::parse(text.as_bytes()).unwrap();
        let root = doc.root();
        // Every member's start, and the end.
        let mut starts = Vec::new();
        let mut at = 1;
        for (_, v) in root.as_object().unwrap() {
            starts.push(at);
            at += 1 + v.span();
        }
        starts.push(at);
        for key in ["a", "bb", "c", "dd", "e", "missing", ""] {
            let plain = root.get(key).map(Json::to_value);
            for &hint in &starts {
                let hinted = root.member_from(key, hint).map(|(_, v)| v.to_value());
                assert_eq!(hinted, plain, "{text} {key} from {hint}");
            }
        }
    }
}

#[test]
fn a_large_object_of_similar_keys_is_read_whole_and_its_last_repeat_counts() {
    // 100,000 keys of one length and last byte (each a "maybe" for the repeat filter):
    // checking each against all earlier ones would be 5 billion comparisons.
    let mut text = String::from("{");
    for i in 0..100_000 {
        text.push_str(&format!("\"k{i:06}x\":{i},"));
    }
    text.push_str("\"k000007x\":\"last\"}");
    let doc = Doc::parse(text.as_bytes()).unwrap();
    let root = doc.root();
    assert_eq!(root.as_object().unwrap().count(), 100_001);
    assert_eq!(root.get("k000007x").and_then(Json::as_str), Some("last"));
    assert_eq!(
        root.get("k099999x").map(Json::to_value),
        Some(serde_json::json!(99_999))
    );
}

proptest::proptest! {
    /// The key filter in an object's header never hides a key that is there: every key,
    /// present or absent, looked up in a parsed text or a borrowed `Value`, gives what
    /// `serde_json` gives (up to 40 members, past the 32 checked for repeats).
    #[test]
    fn a_lookup_finds_exactly_what_serde_json_finds(
        keys in proptest::collection::vec("[ab]{0,3}|[a-z]{4,9}", 0..40),
        queries in proptest::collection::vec("[ab]{0,3}|[a-z]{4,9}", 0..20),
    ) {
        let mut text = String::from("{");
        for (i, k) in keys.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            text.push_str(&format!("\"{k}\":{{\"{k}\":{i}}}"));
        }
        text.push('}');
        let v: Value = serde_json::from_str(&text).unwrap();
        let doc = Doc::parse(text.as_bytes()).unwrap();
        let borrowed = Doc::from_value(&v);
        for q in keys.iter().chain(&queries) {
            let expected = v.get(q).cloned();
            proptest::prop_assert_eq!(doc.root().get(q).map(Json::to_value), expected.clone());
            proptest::prop_assert_eq!(borrowed.root().get(q).map(Json::to_value), expected);
            // And inside the nested object, which holds one key.
            if let Some(inner) = doc.root().get(q) {
                proptest::prop_assert!(inner.get(q).is_some());
            }
        }
    }
}

#[test]
fn hostile_nesting_is_refused_not_overflowed() {
    let deep = "[".repeat(100_000);
    assert!(Doc::parse(deep.as_bytes()).is_err());
    let deep_obj = "{\"a\":".repeat(100_000);
    assert!(Doc::parse(deep_obj.as_bytes()).is_err());
}
