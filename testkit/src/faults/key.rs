//! Hashes of a call's identity: the same input gives the same decision on every platform and run.

/// A 64-bit mix (SplitMix64's finaliser): the same input gives the same output on every
/// platform and run, unlike `std`'s randomly keyed hasher.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// [`mix`] folded over the bytes of `parts`.
pub fn hash(seed: u64, parts: &[&str]) -> u64 {
    let mut h = mix(seed);
    for part in parts {
        for b in part.bytes() {
            h = mix(h ^ u64::from(b));
        }
        h = mix(h ^ 0xff);
    }
    h
}

/// Digits of a producer epoch (`p:{epoch}:{lane}:{seq}`, docs/row-contract.md): random per
/// producer instance, so never part of a fault decision.
const EPOCH_HEX_DIGITS: usize = 32;

/// `key` with every run of [`EPOCH_HEX_DIGITS`] or more hex digits replaced by `*`.
pub fn stable_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut run = String::new();
    for c in key.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_hexdigit() {
            run.push(c);
            continue;
        }
        if run.len() >= EPOCH_HEX_DIGITS {
            out.push('*');
        } else {
            out.push_str(&run);
        }
        run.clear();
        out.push(c);
    }
    out.pop();
    out
}
