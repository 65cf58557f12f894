//! The streaming inline-archive diverter on arbitrary bodies cut at arbitrary places: it may
//! not panic, what it keeps and diverts may not depend on where the body was cut, and a body
//! that is JSON stays JSON once its archive text is taken out.
#![no_main]

use awcp_proto::wire::divert::ArchiveTextDiverter;
use libfuzzer_sys::fuzz_target;

const MAX_KEPT: usize = 4096;

/// Runs a diverter over `body` in pieces of the given sizes (cycled); the kept JSON, the
/// diverted text and whether it diverted, or the error.
fn run(
    mut d: ArchiveTextDiverter,
    body: &[u8],
    cuts: &[u8],
) -> Result<(Vec<u8>, Vec<u8>, bool), String> {
    let mut text = Vec::new();
    let mut rest = body;
    let mut i = 0;
    while !rest.is_empty() {
        let n = match cuts.get(i % cuts.len().max(1)) {
            Some(&c) => (usize::from(c) % 17 + 1).min(rest.len()),
            None => rest.len(),
        };
        i += 1;
        d.push(&rest[..n], &mut text).map_err(|e| e.to_string())?;
        rest = &rest[n..];
    }
    let diverted = d.diverted();
    Ok((d.finish(), text, diverted))
}

fuzz_target!(|data: &[u8]| {
    // The first bytes say where to cut, the rest is the body.
    let (cuts, body) = data.split_at(data.len().min(8));
    for make in [ArchiveTextDiverter::new, ArchiveTextDiverter::for_results] {
        let whole = run(make(MAX_KEPT), body, &[]);
        let cut = run(make(MAX_KEPT), body, cuts);
        assert_eq!(whole, cut, "the result depends on where the body was cut");
        if let Ok((kept, _, true)) = &whole {
            if serde_json::from_slice::<serde_json::Value>(body).is_ok() {
                assert!(
                    serde_json::from_slice::<serde_json::Value>(kept).is_ok(),
                    "JSON with its archive text taken out is not JSON: {}",
                    String::from_utf8_lossy(kept)
                );
            }
        }
    }
});
