//! The producer's error type. An event's own errors — [`ValidationError`], [`DecodeError`] —
//! are the contract's (`awsmp_contract::error`), with the stable reason codes the consumer
//! records for rejected events.

use awsmp_contract::error::ValidationError;
use awsmp_contract::event::Event;

/// Errors from the producer's API. Errors about one event give the event back
/// ([`ProducerError::into_event`]): nothing is dropped silently.
#[derive(Debug, thiserror::Error)]
pub enum ProducerError {
    /// The event breaks a v1 rule; it was not buffered. What is wrong is the source.
    #[error("invalid event ({})", source.reason())]
    Invalid {
        /// What is wrong.
        source: ValidationError,
        /// The event, untouched.
        event: Box<Event>,
    },
    /// `try_record`: the buffer is full (back-pressure); retry later or use `record().await`.
    #[error("producer buffer is full")]
    Full(Box<Event>),
    /// The producer was shut down; the event was not buffered.
    #[error("producer is shut down")]
    Closed(Option<Box<Event>>),
    /// The configuration is unusable.
    #[error("invalid producer configuration: {0}")]
    Config(String),
    /// `start_with`/`build` was called outside a Tokio runtime.
    #[error("the producer needs a Tokio runtime")]
    NoRuntime,
}

impl ProducerError {
    /// The event this error is about, if any.
    pub fn into_event(self) -> Option<Event> {
        match self {
            ProducerError::Invalid { event, .. } | ProducerError::Full(event) => Some(*event),
            ProducerError::Closed(e) => e.map(|e| *e),
            ProducerError::Config(_) | ProducerError::NoRuntime => None,
        }
    }

    /// True for [`ProducerError::Full`] (retrying later can succeed).
    pub fn is_full(&self) -> bool {
        matches!(self, ProducerError::Full(_))
    }

    /// Stable reason code.
    pub fn reason(&self) -> &'static str {
        match self {
            ProducerError::Invalid { source, .. } => source.reason(),
            ProducerError::Full(_) => "Full",
            ProducerError::Closed(_) => "Closed",
            ProducerError::Config(_) => "Config",
            ProducerError::NoRuntime => "NoRuntime",
        }
    }
}

/// An error and its sources, `error: source: source…`, for a log field or a hand-back message
/// (each error's own `Display` shows only itself).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        text.push_str(": ");
        text.push_str(&s.to_string());
        next = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invalid_event_prints_its_reason_once_and_keeps_the_detail_as_source() {
        let event = Event::new("arn", "1", "d", 1, chrono::Utc::now());
        let err = ProducerError::Invalid {
            source: ValidationError::InvalidAccountId("1".into()),
            event: Box::new(event),
        };
        assert_eq!(err.to_string(), "invalid event (InvalidAccountId)");
        assert_eq!(
            error_chain(&err),
            "invalid event (InvalidAccountId): customerAWSAccountId \"1\" is not 12 digits"
        );
    }
}
