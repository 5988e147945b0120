//! The simulator's two error kinds: API exceptions it answers with (what a client sees on the
//! wire) and setup errors (bad catalog, bad address) raised before it serves anything.

use std::net::SocketAddr;

/// An `AWSMPMeteringService` exception name, as sent in `x-amzn-ErrorType` and `__type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorCode {
    /// Input violates a constraint (record count, size, ranges, identifier combinations).
    Validation,
    /// The body is not JSON, or a member has the wrong JSON type.
    Serialization,
    /// A malformed LicenseArn, or LicenseArns of more than one product in one call.
    InvalidLicense,
    /// The request's ProductCode is not a product of the catalog.
    InvalidProductCode,
    /// A legacy CustomerIdentifier is not a customer of the product.
    InvalidCustomerIdentifier,
    /// A Dimension is not one of the product's dimensions (case-sensitive).
    InvalidUsageDimension,
    /// A Timestamp is outside the metering window.
    TimestampOutOfBounds,
    /// An allocation has no tags, more than 5, or an empty key or value.
    InvalidTag,
    /// Allocations are empty, too many, or do not sum to the record's quantity.
    InvalidUsageAllocations,
    /// Over the request-rate quota (or an injected throttle).
    Throttling,
    /// The API is not available in this region (`--disabled`).
    DisabledApi,
    /// An (injected) internal error; answered with HTTP 500.
    InternalServiceError,
    /// ResolveCustomer: the registration token is unknown.
    InvalidToken,
    /// ResolveCustomer: the registration token has expired.
    ExpiredToken,
    /// The `X-Amz-Target` header names no operation this service has.
    UnknownOperation,
}

impl ErrorCode {
    /// The exception name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Self::Validation => "ValidationException",
            Self::Serialization => "SerializationException",
            Self::InvalidLicense => "InvalidLicenseException",
            Self::InvalidProductCode => "InvalidProductCodeException",
            Self::InvalidCustomerIdentifier => "InvalidCustomerIdentifierException",
            Self::InvalidUsageDimension => "InvalidUsageDimensionException",
            Self::TimestampOutOfBounds => "TimestampOutOfBoundsException",
            Self::InvalidTag => "InvalidTagException",
            Self::InvalidUsageAllocations => "InvalidUsageAllocationsException",
            Self::Throttling => "ThrottlingException",
            Self::DisabledApi => "DisabledApiException",
            Self::InternalServiceError => "InternalServiceErrorException",
            Self::InvalidToken => "InvalidTokenException",
            Self::ExpiredToken => "ExpiredTokenException",
            Self::UnknownOperation => "UnknownOperationException",
        }
    }

    /// HTTP status: AWS answers client faults with 400 and its own failures with 500.
    pub fn http_status(self) -> u16 {
        match self {
            Self::InternalServiceError => 500,
            _ => 400,
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A request-level API exception: the whole call fails and nothing is billed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    /// Which exception.
    pub code: ErrorCode,
    /// Human-readable detail (which record, which value).
    pub message: String,
}

impl ApiError {
    /// Build an exception with a message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// `e` and every source below it, `": "`-separated (what a log line or an admin reply needs).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(": ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    out
}

/// Why the simulator could not be configured or started.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The catalog file could not be read.
    #[error("reading catalog {path}")]
    CatalogRead {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The catalog (or faults) JSON does not parse into the documented shape.
    #[error("parsing {what}")]
    Json {
        /// What was being parsed.
        what: &'static str,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// The catalog parses but is inconsistent (duplicate license, malformed ARN, ...).
    #[error("invalid catalog: {0}")]
    InvalidCatalog(String),
    /// Fault settings out of range (a rate outside 0..=1).
    #[error("invalid faults: {0}")]
    InvalidFaults(String),
    /// The simulator only ever listens on loopback.
    #[error("refusing to listen on non-loopback address {0}")]
    NotLoopback(SocketAddr),
    /// Binding or serving failed.
    #[error("network")]
    Io(#[from] std::io::Error),
}
