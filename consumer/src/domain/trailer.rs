//! The MD5 trailers of a batch's KPL aggregates, checked together. One MD5 stream cannot be
//! parallelized (each 64-byte block depends on the one before), but a batch holds up to a
//! hundred independent aggregates: `md5-many` hashes them side by side in SIMD lanes (8 with
//! AVX2, 16 with AVX-512, 4 with NEON), several times faster per core than one stream at a time
//! (consumer/README.md, "The hot path"; docs/benchmarks-journal.md, "Consumer hot path").
//!
//! A record whose trailer does not match here is decoded by the general path, which hashes it
//! again with `md-5` and refuses it (`Md5Mismatch`) only then: no record is ever refused on
//! this module's word alone.

use std::sync::LazyLock;

use awsmp_contract::wire::{AGGREGATE_OVERHEAD, KPL_MAGIC, MD5_LEN, is_aggregated};
use md5_many::Md5Many;

/// The engine for this CPU (its SIMD level detected once per process).
static ENGINE: LazyLock<Md5Many> = LazyLock::new(Md5Many::new);

/// The body an aggregate's trailer covers (between the magic and the trailer) and the
/// trailer; `None` when `data` is not long enough to be an aggregate.
pub fn body_and_trailer(data: &[u8]) -> Option<(&[u8], &[u8])> {
    if data.len() < AGGREGATE_OVERHEAD {
        return None;
    }
    Some(data[KPL_MAGIC.len()..].split_at(data.len() - AGGREGATE_OVERHEAD))
}

/// For each record's data: true when it is a KPL aggregate whose MD5 trailer is the MD5 of
/// its body; false for anything else (a plain record, a short or corrupt aggregate).
pub fn trailers_match(records: &[&[u8]]) -> Vec<bool> {
    let mut bodies: Vec<&[u8]> = Vec::with_capacity(records.len());
    let mut at: Vec<Option<usize>> = Vec::with_capacity(records.len());
    for data in records {
        match body_and_trailer(data).filter(|_| is_aggregated(data)) {
            Some((body, _)) => {
                at.push(Some(bodies.len()));
                bodies.push(body);
            }
            None => at.push(None),
        }
    }
    let mut digests = vec![[0u8; MD5_LEN]; bodies.len()];
    ENGINE.hash_many(&bodies, &mut digests);
    records
        .iter()
        .zip(at)
        .map(|(data, at)| {
            at.is_some_and(|i| body_and_trailer(data).is_some_and(|(_, t)| t == digests[i]))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use md5::{Digest, Md5};
    use proptest::prelude::*;

    fn aggregate(body: &[u8]) -> Vec<u8> {
        let mut out = KPL_MAGIC.to_vec();
        out.extend_from_slice(body);
        out.extend_from_slice(&Md5::digest(body));
        out
    }

    proptest! {
        /// Side by side with `md-5`, one message at a time: the same verdict on every record
        /// of every batch (lengths around the 64-byte blocks, the padding edge at 56).
        #[test]
        fn the_batch_check_agrees_with_md5_one_at_a_time(
            batch in prop::collection::vec(
                (prop::collection::vec(any::<u8>(), 0..300), any::<bool>(), any::<u8>(), any::<bool>()),
                0..40,
            )
        ) {
            let records: Vec<Vec<u8>> = batch
                .iter()
                .map(|(body, aggregated, flip, corrupt)| {
                    if !aggregated {
                        return body.clone();
                    }
                    let mut r = aggregate(body);
                    if *corrupt {
                        let i = usize::from(*flip) % r.len();
                        r[i] ^= 1 | *flip;
                    }
                    r
                })
                .collect();
            let refs: Vec<&[u8]> = records.iter().map(|r| &r[..]).collect();
            let got = trailers_match(&refs);
            for (data, ok) in records.iter().zip(got) {
                let expected = is_aggregated(data)
                    && body_and_trailer(data)
                        .is_some_and(|(b, t)| Md5::digest(b).as_slice() == t);
                prop_assert_eq!(ok, expected);
            }
        }
    }

    #[test]
    fn long_bodies_of_unequal_lengths_each_get_their_own_digest() {
        let bodies: Vec<Vec<u8>> = (0..20)
            .map(|i| (0..(4_000 + i * 97)).map(|j| (j * 7 + i) as u8).collect())
            .collect();
        let mut records: Vec<Vec<u8>> = bodies.iter().map(|b| aggregate(b)).collect();
        records[7][100] ^= 0x40;
        let refs: Vec<&[u8]> = records.iter().map(|r| &r[..]).collect();
        let ok = trailers_match(&refs);
        assert_eq!(ok.iter().filter(|o| !**o).count(), 1);
        assert!(!ok[7]);
        assert!(
            trailers_match(&[&KPL_MAGIC[..], b"plain"])
                .iter()
                .all(|o| !o)
        );
    }
}
