//! Pure domain: lifecycle events, the subscriber state and its transitions, the registration
//! form. No AWS SDK, no environment.

pub mod event;
pub mod registration;
pub mod state;
