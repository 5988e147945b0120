//! The staging area's own tests: payloads over several buffers, the buffer made ready, and
//! the take's order across the shards of several recording threads.

use super::*;
use bytes::BufMut;

/// Payloads past a buffer's capacity go to a new buffer, the full one kept as it is:
/// every payload is taken back whole, in order, with its split, key and charge, over
/// several buffers per shard and over two takes.
#[test]
fn payloads_over_several_buffers_come_back_whole() {
    let staging = Staging::new(usize::MAX, Counted::default());
    let keys: Vec<Arc<str>> = vec!["a".into(), "b".into()];
    for round in 0..2u32 {
        let mut want = Vec::new();
        for i in 0..3_000u32 {
            let payload: Vec<u8> = (0..(50 + i % 200)).map(|b| (b ^ i ^ round) as u8).collect();
            let split = (i % 3 == 0).then_some((i % 7, i % 11));
            let key = &keys[(i % 2) as usize];
            let pushed = staging.push(
                payload.len(),
                |buf| buf.extend_from_slice(&payload),
                split,
                key,
                0,
                i as usize,
            );
            assert!(pushed);
            want.push((payload, split, key.clone(), i as usize));
        }
        let mut got = Vec::new();
        staging.take(false, |inc| {
            got.push((
                inc.payload.to_vec(),
                inc.split,
                inc.partition_key,
                inc.bytes,
            ));
        });
        assert_eq!(got, want);
        assert_eq!(staging.bytes(), 0);
    }
}

/// After a take, a shard that staged holds a buffer made ready by the task, and the
/// push that fills its current buffer goes on in that one (no fresh allocation).
#[test]
fn a_full_buffer_goes_on_in_the_one_made_ready() {
    let staging = Staging::new(usize::MAX, Counted::default());
    let key: Arc<str> = "k".into();
    let push = |byte: u8, len: usize| {
        assert!(staging.push(len, |buf| buf.put_bytes(byte, len), None, &key, 0, len));
    };
    push(1, 100);
    staging.take(false, |_| {});
    let ready = {
        let s = Staging::lock(&staging.shards[this_threads_shard()]);
        assert_eq!(s.ready.capacity(), STAGING_BUFFER_BYTES);
        s.ready.as_ptr()
    };
    // Fill what is left of the current buffer, then one more payload.
    let left = {
        let s = Staging::lock(&staging.shards[this_threads_shard()]);
        s.buffer.capacity() - s.buffer.len()
    };
    push(2, left);
    push(3, 10);
    let mut got = Vec::new();
    staging.take(false, |inc| {
        got.push((inc.payload.as_ptr(), inc.payload.to_vec()))
    });
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].1, vec![2; left]);
    assert_eq!(
        got[1],
        (ready, vec![3; 10]),
        "written into the ready buffer"
    );
    // The shard is given another ready buffer for its next one, with room for twice what
    // this take found.
    let next = Staging::lock(&staging.shards[this_threads_shard()])
        .ready
        .capacity();
    assert!(next >= 2 * (left + 10), "{next}");
}

/// Pushes `label`'s payloads `0..n` on a thread of their own, each after `turn` says it is
/// its turn, then passes the turn on: two such threads push strictly one after the other.
fn push_in_turns(
    staging: &Arc<Staging>,
    label: u8,
    n: u8,
    turn: std::sync::mpsc::Receiver<()>,
    next: std::sync::mpsc::Sender<()>,
) -> std::thread::JoinHandle<()> {
    let staging = staging.clone();
    std::thread::spawn(move || {
        let key: Arc<str> = "k".into();
        for k in 0..n {
            turn.recv().unwrap();
            let payload = [label, k];
            let write = |buf: &mut BytesMut| buf.extend_from_slice(&payload);
            assert!(staging.push(2, write, None, &key, 0, 2));
            let _ = next.send(());
        }
    })
}

/// Two threads push in turns, each into its own shard: one take hands their events over in
/// the order they were pushed (merged across the shards), as one shard would have.
#[test]
fn a_take_merges_the_threads_shards_in_the_order_they_were_pushed() {
    let staging = Arc::new(Staging::new(usize::MAX, Counted::default()));
    let (to_a, a_turn) = std::sync::mpsc::channel();
    let (to_b, b_turn) = std::sync::mpsc::channel();
    let a = push_in_turns(&staging, b'a', 50, a_turn, to_b);
    let b = push_in_turns(&staging, b'b', 50, b_turn, to_a.clone());
    to_a.send(()).unwrap();
    a.join().unwrap();
    b.join().unwrap();
    let shards_used = staging
        .shards
        .iter()
        .filter(|s| !Staging::lock(s).items.is_empty())
        .count();
    assert_eq!(shards_used, 2, "each thread pushes into a shard of its own");
    let mut got = Vec::new();
    staging.take(false, |inc| got.push(inc.payload.to_vec()));
    let want: Vec<Vec<u8>> = (0..50u8)
        .flat_map(|k| [vec![b'a', k], vec![b'b', k]])
        .collect();
    assert_eq!(got, want);
    assert_eq!(staging.bytes(), 0);
}

/// A caller that moves to another thread mid-window and back (as a task does between a
/// runtime's workers) has its events handed over in the order it recorded them, though they
/// sit in two shards: whichever shard comes first, its own order would put one thread's
/// events before all of the other's.
#[test]
fn a_caller_that_moves_between_threads_keeps_its_order() {
    let staging = Arc::new(Staging::new(usize::MAX, Counted::default()));
    // Two threads, each pushing the ranges it is sent and answering when done.
    let (done_tx, done) = std::sync::mpsc::channel::<()>();
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (staging, done_tx) = (staging.clone(), done_tx.clone());
            let (tx, rx) = std::sync::mpsc::channel::<std::ops::Range<u32>>();
            let handle = std::thread::spawn(move || {
                let key: Arc<str> = "group".into();
                for range in rx {
                    for k in range {
                        let write = |buf: &mut BytesMut| buf.extend_from_slice(&k.to_be_bytes());
                        assert!(staging.push(4, write, None, &key, 0, 4));
                    }
                    done_tx.send(()).unwrap();
                }
            });
            (tx, handle)
        })
        .collect();
    for round in 0..2u32 {
        let base = round * 900;
        for (thread, range) in [(0, 0..300), (1, 300..600), (0, 600..900)] {
            threads[thread]
                .0
                .send(base + range.start..base + range.end)
                .unwrap();
            done.recv().unwrap();
        }
        let mut got = Vec::new();
        staging.take(false, |inc| {
            got.push(u32::from_be_bytes(inc.payload[..].try_into().unwrap()));
        });
        assert_eq!(got, (base..base + 900).collect::<Vec<_>>());
    }
    for (tx, handle) in threads {
        drop(tx);
        handle.join().unwrap();
    }
}

/// After a take, a thread's shard has room made ready for twice what the take found in it:
/// a round of pushes half again as large as the last neither regrows the item vector nor
/// starts a buffer the task did not make ready (memory the caller would fault in). The
/// vector made ready at one take is pushed into after the next (the two alternate).
#[test]
fn a_shard_is_made_ready_for_twice_what_its_last_take_found() {
    let staging = Staging::new(usize::MAX, Counted::default());
    let key: Arc<str> = "k".into();
    let push = |n: usize| {
        for _ in 0..n {
            assert!(staging.push(100, |buf| buf.put_bytes(7, 100), None, &key, 0, 100));
        }
    };
    let shard = || Staging::lock(&staging.shards[this_threads_shard()]);
    for _ in 0..2 {
        push(3_000);
        staging.take(false, |_| {});
        let s = shard();
        assert!(s.spare.capacity() >= 6_000, "{}", s.spare.capacity());
        assert!(s.ready.capacity() >= 600_000, "{}", s.ready.capacity());
    }
    let (vector, ready) = {
        let s = shard();
        assert!(s.items.capacity() >= 6_000, "{}", s.items.capacity());
        (s.items.as_ptr(), s.ready.as_ptr())
    };
    push(4_500);
    {
        let s = shard();
        assert_eq!(s.items.as_ptr(), vector, "the item vector was not regrown");
        assert!(s.chunks.len() <= 1, "{} buffers filled", s.chunks.len());
        if !s.chunks.is_empty() {
            assert_eq!(
                s.buffer.as_ptr(),
                ready,
                "pushes went on in the ready buffer"
            );
        }
    }
    let mut got = 0;
    staging.take(false, |inc| {
        assert_eq!(&inc.payload[..], &[7; 100][..]);
        got += 1;
    });
    assert_eq!(got, 4_500);
}

/// A take past the cap of what is made ready ([`MOST_READY_ITEMS`]) still leaves a vector
/// with room for what it held: past the cap nothing more is made ready, and nothing less.
#[test]
fn a_take_past_the_cap_keeps_room_for_what_it_held() {
    let staging = Staging::new(usize::MAX, Counted::default());
    let key: Arc<str> = "k".into();
    let n = MOST_READY_ITEMS + 4_000;
    for _ in 0..n {
        assert!(staging.push(1, |buf| buf.put_u8(1), None, &key, 0, 1));
    }
    let mut got = 0;
    staging.take(false, |_| got += 1);
    assert_eq!(got, n);
    let spare = Staging::lock(&staging.shards[this_threads_shard()])
        .spare
        .capacity();
    assert!((n..2 * MOST_READY_ITEMS).contains(&spare), "{spare}");
}
