//! Seeds for the sans-IO engines, which draw no randomness themselves.

/// `seed`, or, when it is 0 (every engine config's default), a seed drawn from the operating
/// system's random source. An engine's seed makes the ids it mints (AWCP snapshot ids, AIP
/// message ids and notification tokens) and keys its maps of peer-chosen ids: with a fixed
/// seed every process would mint the same ids and tokens (a receiver would accept a forged
/// notification) and hash ids the same way (a peer could pick colliding ids). If the random
/// source fails, the error is logged and 0 is returned.
pub fn seed_or_random(seed: u64) -> u64 {
    if seed != 0 {
        return seed;
    }
    let mut b = [0u8; 8];
    match getrandom::fill(&mut b) {
        Ok(()) => u64::from_le_bytes(b).max(1),
        Err(e) => {
            tracing::error!("the operating system's random source failed ({e}): a fixed seed");
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_seed_is_kept_and_zero_is_replaced_by_a_fresh_one() {
        assert_eq!(seed_or_random(7), 7);
        let (a, b) = (seed_or_random(0), seed_or_random(0));
        assert_ne!(a, 0);
        assert_ne!(a, b);
    }
}
