//! Unit tests of the client.

use super::*;

#[test]
fn urls_split() {
    let t = split_url("http://127.0.0.1:8080/awcp").unwrap();
    assert_eq!(
        (t.tls, t.host.as_str(), t.port, t.path.as_str()),
        (false, "127.0.0.1", 8080, "/awcp")
    );
    assert_eq!(split_url("http://h/").unwrap().port, 80);
    let t = split_url("https://h/x?y=1").unwrap();
    assert_eq!((t.tls, t.port, t.path.as_str()), (true, 443, "/x?y=1"));
    let t = split_url("https://[::1]:9/").unwrap();
    assert_eq!(
        (t.host.as_str(), t.authority()),
        ("::1", "[::1]:9".to_owned())
    );
    assert!(split_url("ftp://h/").is_err());
    assert!(split_url("nonsense").is_err());
}
