//! The registration form: the token field, the allowlisted fields with their length bounds,
//! and masking for logs (docs/lifecycle.md, "Registration").

use std::collections::BTreeMap;

use awsmp_contract::reasons;

use super::event::LicenseKey;

/// The form field AWS Marketplace posts the registration token in
/// (<https://docs.aws.amazon.com/marketplace/latest/userguide/saas-product-customer-setup.html>).
pub const TOKEN_FIELD: &str = "x-amzn-marketplace-token";
/// Largest body the register Lambda reads (our bound: the form is a handful of short fields).
pub const MAX_BODY_BYTES: usize = 16 * 1024;
/// Largest token accepted (our bound; tokens AWS issues are far shorter).
pub const MAX_TOKEN_LEN: usize = 2048;

/// One allowlisted registration field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// Form name and key in `registrationData`.
    pub name: &'static str,
    /// Label on the page.
    pub label: &'static str,
    /// Longest value, in characters.
    pub max_len: usize,
    /// HTML input type (`text`, `email`, or `textarea` for a multi-line value).
    pub input: &'static str,
}

/// The fields the register Lambda stores; anything else posted is dropped, never stored.
pub const FIELDS: [Field; 4] = [
    Field {
        name: "companyName",
        label: "Company",
        max_len: 256,
        input: "text",
    },
    Field {
        name: "contactName",
        label: "Your name",
        max_len: 128,
        input: "text",
    },
    Field {
        name: "contactEmail",
        label: "Email",
        max_len: 254,
        input: "email",
    },
    Field {
        name: "useCase",
        label: "What will you use it for?",
        max_len: 1000,
        input: "textarea",
    },
];

/// What `ResolveCustomer` returned, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedCustomer {
    /// The license and the buyer.
    pub key: LicenseKey,
    /// The product the token is for.
    pub product_code: String,
}

/// The allowlisted fields a buyer filled in (empty values dropped).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Registration {
    /// Field name → value.
    pub fields: BTreeMap<String, String>,
}

/// A posted form, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Form {
    /// The registration token.
    pub token: String,
    /// The allowlisted fields.
    pub registration: Registration,
}

/// Why a form is refused (a 4xx page).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct FormError {
    /// A reason code of [`awsmp_contract::reasons`].
    pub reason: &'static str,
    /// What the buyer is told (no field values).
    pub message: String,
}

fn refused(reason: &'static str, message: impl Into<String>) -> FormError {
    FormError {
        reason,
        message: message.into(),
    }
}

fn is_plausible_email(v: &str) -> bool {
    let mut parts = v.split('@');
    matches!(
        (parts.next(), parts.next(), parts.next()),
        (Some(local), Some(domain), None)
            if !local.is_empty() && domain.contains('.') && !domain.starts_with('.') && !domain.ends_with('.')
    ) && !v.chars().any(char::is_whitespace)
}

fn check_field(field: &Field, value: &str) -> Result<(), FormError> {
    if value.chars().count() > field.max_len {
        return Err(refused(
            reasons::MALFORMED_FORM,
            format!(
                "{} is longer than {} characters",
                field.label, field.max_len
            ),
        ));
    }
    let multi_line = field.input == "textarea";
    if value
        .chars()
        .any(|c| c.is_control() && !(multi_line && matches!(c, '\n' | '\r' | '\t')))
    {
        return Err(refused(
            reasons::MALFORMED_FORM,
            format!("{} contains control characters", field.label),
        ));
    }
    if field.input == "email" && !is_plausible_email(value) {
        return Err(refused(
            reasons::MALFORMED_FORM,
            format!("{} is not an email address", field.label),
        ));
    }
    Ok(())
}

/// Read an `application/x-www-form-urlencoded` body: the token (required) and the allowlisted
/// fields (each at most once, within its bound).
pub fn parse_form(body: &[u8]) -> Result<Form, FormError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(refused(
            reasons::BODY_TOO_LARGE,
            format!("the form is larger than {MAX_BODY_BYTES} bytes"),
        ));
    }
    let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(body)
        .map_err(|_| refused(reasons::MALFORMED_FORM, "the form could not be read"))?;
    let mut token = None;
    let mut fields = BTreeMap::new();
    for (name, value) in pairs {
        if name == TOKEN_FIELD {
            if token.replace(value).is_some() {
                return Err(refused(
                    reasons::MALFORMED_FORM,
                    "the token is posted twice",
                ));
            }
            continue;
        }
        let Some(field) = FIELDS.iter().find(|f| f.name == name) else {
            continue;
        };
        let value = value.trim().to_owned();
        check_field(field, &value)?;
        if fields.insert(name, value).is_some() {
            return Err(refused(
                reasons::MALFORMED_FORM,
                format!("{} is posted twice", field.label),
            ));
        }
    }
    fields.retain(|_, v| !v.is_empty());
    let token = token
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| refused(reasons::MISSING_TOKEN, "the registration token is missing"))?;
    if token.len() > MAX_TOKEN_LEN || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(refused(
            reasons::INVALID_TOKEN,
            "the registration token is malformed",
        ));
    }
    Ok(Form {
        token,
        registration: Registration { fields },
    })
}

/// A value for logs: only its last four characters.
///
/// ```
/// use awsmp_lifecycle::domain::registration::mask;
/// assert_eq!(mask("123456789012"), "****9012");
/// assert_eq!(mask("abc"), "****");
/// ```
pub fn mask(value: &str) -> String {
    let n = value.chars().count();
    if n <= 4 {
        return "****".into();
    }
    let tail: String = value.chars().skip(n - 4).collect();
    format!("****{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(body: &str) -> Result<Form, FormError> {
        parse_form(body.as_bytes())
    }

    #[test]
    fn reads_the_token_and_the_allowlisted_fields_only() {
        let f = form("x-amzn-marketplace-token=tok%2B1&companyName=Acme+Inc&password=x&contactEmail=a%40b.example&useCase=").unwrap();
        assert_eq!(f.token, "tok+1");
        assert_eq!(f.registration.fields.len(), 2);
        assert_eq!(f.registration.fields["companyName"], "Acme Inc");
        assert_eq!(f.registration.fields["contactEmail"], "a@b.example");
    }

    #[test]
    fn refuses_each_bad_input_with_its_reason() {
        assert_eq!(
            form("companyName=x").unwrap_err().reason,
            reasons::MISSING_TOKEN
        );
        assert_eq!(
            form("x-amzn-marketplace-token=").unwrap_err().reason,
            reasons::MISSING_TOKEN
        );
        assert_eq!(
            form("x-amzn-marketplace-token=a&x-amzn-marketplace-token=b")
                .unwrap_err()
                .reason,
            reasons::MALFORMED_FORM
        );
        assert_eq!(
            form("x-amzn-marketplace-token=a&companyName=x&companyName=y")
                .unwrap_err()
                .reason,
            reasons::MALFORMED_FORM
        );
        let long = "a".repeat(257);
        assert_eq!(
            form(&format!("x-amzn-marketplace-token=a&companyName={long}"))
                .unwrap_err()
                .reason,
            reasons::MALFORMED_FORM
        );
        assert_eq!(
            form("x-amzn-marketplace-token=a&contactEmail=not-an-email")
                .unwrap_err()
                .reason,
            reasons::MALFORMED_FORM
        );
        assert_eq!(
            form("x-amzn-marketplace-token=a&contactName=a%00b")
                .unwrap_err()
                .reason,
            reasons::MALFORMED_FORM
        );
        assert_eq!(
            form("x-amzn-marketplace-token=a%20b").unwrap_err().reason,
            reasons::INVALID_TOKEN
        );
        let big = vec![b'a'; MAX_BODY_BYTES + 1];
        assert_eq!(
            parse_form(&big).unwrap_err().reason,
            reasons::BODY_TOO_LARGE
        );
        assert!(parse_form(&[0xff, 0xfe]).is_err());
    }

    #[test]
    fn multi_line_use_case_is_kept() {
        let f = form("x-amzn-marketplace-token=a&useCase=line1%0D%0Aline2").unwrap();
        assert_eq!(f.registration.fields["useCase"], "line1\r\nline2");
    }
}
