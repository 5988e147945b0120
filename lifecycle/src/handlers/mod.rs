//! Handlers: event → domain call → response. The `src/bin/` mains only wire them.

pub mod deprovision_cleanup;
pub mod register;
pub mod subscription;
