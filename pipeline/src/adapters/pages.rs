//! A paginated read whose next page is fetched while the current one is handed on: page N+1's
//! request is in flight (a task of its own) while page N's items go through the caller's
//! callback, e.g. the aggregator's fold. The pages, their order, their start keys and their
//! items are exactly those of the sequential loop ([`sequential`]); only the waiting overlaps.
//! At most one page is held ahead, so memory stays bounded by two pages.
//!
//! ```
//! use awsmp_pipeline::adapters::pages::{Page, prefetched};
//! let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! let mut seen = Vec::new();
//! rt.block_on(prefetched(
//!     |start: Option<u32>| async move {
//!         let at = start.unwrap_or(0);
//!         Ok::<_, String>(Page { items: vec![at, at + 1], next: (at < 4).then_some(at + 2) })
//!     },
//!     |item| seen.push(item),
//! ))
//! .unwrap();
//! assert_eq!(seen, [0, 1, 2, 3, 4, 5]);
//! ```

use std::future::Future;

use tokio::task::JoinHandle;

/// One page of a paginated read: its items and the key the next page starts after (`None`:
/// the last page).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T, K> {
    /// The page's items, in order.
    pub items: Vec<T>,
    /// `LastEvaluatedKey`: where the next page starts; `None` on the last page.
    pub next: Option<K>,
}

/// A spawned page fetch, aborted if the read is dropped before it is awaited.
struct InFlight<T>(JoinHandle<T>);

impl<T> InFlight<T> {
    async fn join(mut self) -> T {
        match (&mut self.0).await {
            Ok(v) => v,
            // The fetch panicked: so does the read, as the sequential loop would.
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Only `Drop` below aborts a fetch, and it has not run: not reachable, but a
            // cancelled runtime ends the read the way a dropped one would.
            Err(_) => std::future::pending().await,
        }
    }
}

impl<T> Drop for InFlight<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Read every page (`fetch(None)` first, then `fetch(Some(next))` until a page has no next),
/// handing each item to `each` in order while the next page is fetched. The first error ends
/// the read where the sequential loop would end it: after the items of the pages before it.
pub async fn prefetched<T, K, E, F, Fut>(mut fetch: F, mut each: impl FnMut(T)) -> Result<(), E>
where
    F: FnMut(Option<K>) -> Fut,
    Fut: Future<Output = Result<Page<T, K>, E>> + Send + 'static,
    T: Send + 'static,
    K: Send + 'static,
    E: Send + 'static,
{
    let mut in_flight = InFlight(tokio::spawn(fetch(None)));
    loop {
        let page = in_flight.join().await?;
        let next = page.next.map(|k| InFlight(tokio::spawn(fetch(Some(k)))));
        if next.is_some() {
            // Let the fetch send its request before the items are handed on (on a
            // current-thread runtime it would otherwise only start at the next await).
            tokio::task::yield_now().await;
        }
        page.items.into_iter().for_each(&mut each);
        match next {
            Some(n) => in_flight = n,
            None => return Ok(()),
        }
    }
}

/// The same read one page after another: each page fetched only once the previous one's items
/// were handed on (what [`prefetched`] is measured against).
pub async fn sequential<T, K, E, F, Fut>(mut fetch: F, mut each: impl FnMut(T)) -> Result<(), E>
where
    F: FnMut(Option<K>) -> Fut,
    Fut: Future<Output = Result<Page<T, K>, E>>,
{
    let mut start = None;
    loop {
        let page = fetch(start).await?;
        page.items.into_iter().for_each(&mut each);
        match page.next {
            Some(k) => start = Some(k),
            None => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// Pages of 3 items over 0..n; `fail_at`: the page that fails.
    fn pager(
        n: u32,
        fail_at: Option<u32>,
        log: Arc<Mutex<Vec<String>>>,
    ) -> impl FnMut(Option<u32>) -> futures::future::BoxFuture<'static, Result<Page<u32, u32>, String>>
    {
        move |start| {
            let log = log.clone();
            Box::pin(async move {
                let at = start.unwrap_or(0);
                log.lock().unwrap().push(format!("fetch {at}"));
                tokio::time::sleep(Duration::from_millis(20)).await;
                if Some(at) == fail_at {
                    return Err(format!("page at {at} failed"));
                }
                let end = (at + 3).min(n);
                Ok(Page {
                    items: (at..end).collect(),
                    next: (end < n).then_some(end),
                })
            })
        }
    }

    async fn both(n: u32, fail_at: Option<u32>) -> [(Result<(), String>, Vec<u32>); 2] {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut a = Vec::new();
        let ra = prefetched(pager(n, fail_at, log.clone()), |i| a.push(i)).await;
        let mut b = Vec::new();
        let rb = sequential(pager(n, fail_at, log), |i| b.push(i)).await;
        [(ra, a), (rb, b)]
    }

    #[tokio::test]
    async fn the_same_items_in_the_same_order_and_the_same_error() {
        for n in [0, 1, 3, 4, 10] {
            let [a, b] = both(n, None).await;
            assert_eq!(a, b, "{n} items");
            assert_eq!(a.1, (0..n).collect::<Vec<_>>());
        }
        let [a, b] = both(10, Some(6)).await;
        assert_eq!(a, b);
        assert_eq!(a.0, Err("page at 6 failed".into()));
        assert_eq!(
            a.1,
            [0, 1, 2, 3, 4, 5],
            "the pages before the error were handed on"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_next_page_is_fetched_while_the_current_one_is_handed_on() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let seen = log.clone();
        prefetched(pager(9, None, log.clone()), move |i| {
            if i == 0 {
                // While page 0's first item is handed on, page 1 is already asked for.
                assert_eq!(*seen.lock().unwrap(), ["fetch 0", "fetch 3"]);
            }
        })
        .await
        .unwrap();
        assert_eq!(*log.lock().unwrap(), ["fetch 0", "fetch 3", "fetch 6"]);
    }
}
