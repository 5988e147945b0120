//! Helpers shared by the crate's unit tests.

/// A current-thread runtime with time paused: every call runs on the test's thread, and a
/// linger passes only when the test sleeps (then at once, in order).
pub(crate) fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}
