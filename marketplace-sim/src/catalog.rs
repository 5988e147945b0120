//! The simulator's catalog: products, their dimensions, licenses, legacy customers and
//! registration tokens (the catalog JSON of docs/local-stack.md, field for field).

use std::collections::{HashMap, HashSet};

use awsmp_contract::ids::{is_valid_account_id, is_valid_license_arn, is_valid_product_code};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::error::SimError;

/// Default metering window when the catalog names none (hours before "now" a timestamp may be).
pub const DEFAULT_WINDOW_HOURS: u32 = 24;
/// Default BatchMeterUsage quota: 10 requests/s per account and region (AWS service quotas).
pub const DEFAULT_REQUESTS_PER_SECOND: u32 = 10;
/// Default cap on usage allocations per UsageRecord (AWS Marketplace VMT: 2,500 tag-sets).
pub const DEFAULT_MAX_ALLOCATIONS_PER_RECORD: u32 = 2500;

fn default_window_hours() -> u32 {
    DEFAULT_WINDOW_HOURS
}
fn default_requests_per_second() -> u32 {
    DEFAULT_REQUESTS_PER_SECOND
}
fn default_max_allocations() -> u32 {
    DEFAULT_MAX_ALLOCATIONS_PER_RECORD
}

/// Whether a license or legacy customer may still be metered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SubscriptionStatus {
    /// Subscribed: usage is billed.
    Active,
    /// Agreement ended: usage gets `CustomerNotSubscribed`.
    Ended,
}

/// The whole catalog file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Catalog {
    /// Hours before now a usage timestamp may lie (default 24).
    #[serde(default = "default_window_hours")]
    pub window_hours: u32,
    /// BatchMeterUsage token-bucket rate and burst (default 10).
    #[serde(default = "default_requests_per_second")]
    pub requests_per_second: u32,
    /// Cap on UsageAllocations per record (default 2500).
    #[serde(default = "default_max_allocations")]
    pub max_allocations_per_record: u32,
    /// The seller's products.
    #[serde(default)]
    pub products: Vec<Product>,
}

impl Default for Catalog {
    fn default() -> Self {
        Self {
            window_hours: DEFAULT_WINDOW_HOURS,
            requests_per_second: DEFAULT_REQUESTS_PER_SECOND,
            max_allocations_per_record: DEFAULT_MAX_ALLOCATIONS_PER_RECORD,
            products: Vec::new(),
        }
    }
}

/// One SaaS product.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Product {
    /// The product code (lowercase letters and digits).
    pub product_code: String,
    /// Dimension API names, case-sensitive.
    pub dimensions: Vec<String>,
    /// Concurrent-Agreements licenses.
    #[serde(default)]
    pub licenses: Vec<License>,
    /// Legacy (pre-CA) customers identified by CustomerIdentifier.
    #[serde(default)]
    pub legacy_customers: Vec<LegacyCustomer>,
    /// Tokens ResolveCustomer accepts.
    #[serde(default)]
    pub registration_tokens: Vec<RegistrationToken>,
}

/// A license granted to one buyer account.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct License {
    /// `arn:aws:license-manager::<account>:license:l-<32 hex>`.
    pub license_arn: String,
    /// The buyer's 12-digit account id.
    #[serde(rename = "customerAWSAccountId")]
    pub customer_aws_account_id: String,
    /// Active or ended.
    pub status: SubscriptionStatus,
}

/// A legacy customer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LegacyCustomer {
    /// The opaque identifier ResolveCustomer used to return.
    pub customer_identifier: String,
    /// Active or ended.
    pub status: SubscriptionStatus,
}

/// A registration token (`x-amzn-marketplace-token`) and what it resolves to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegistrationToken {
    /// The token string.
    pub token: String,
    /// The license it resolves to.
    pub license_arn: String,
    /// The buyer account it resolves to.
    #[serde(rename = "customerAWSAccountId")]
    pub customer_aws_account_id: String,
    /// After this instant (simulator clock) the token is expired.
    pub expires_at: DateTime<Utc>,
}

impl Catalog {
    /// Parse catalog JSON and check it (see [`Catalog::validate`]).
    pub fn from_json(json: &str) -> Result<Self, SimError> {
        let catalog: Catalog = serde_json::from_str(json).map_err(|source| SimError::Json {
            what: "catalog",
            source,
        })?;
        catalog.validate()?;
        Ok(catalog)
    }

    /// Read and parse a catalog file.
    pub fn from_file(path: &std::path::Path) -> Result<Self, SimError> {
        let text = std::fs::read_to_string(path).map_err(|source| SimError::CatalogRead {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_json(&text)
    }

    /// Reject a catalog the simulator could not answer consistently: malformed identifiers,
    /// a license or token listed twice, zero limits.
    pub fn validate(&self) -> Result<(), SimError> {
        let bad = |msg: String| Err(SimError::InvalidCatalog(msg));
        if self.window_hours == 0 {
            return bad("windowHours must be at least 1".into());
        }
        if self.requests_per_second == 0 {
            return bad("requestsPerSecond must be at least 1".into());
        }
        if self.max_allocations_per_record == 0 {
            return bad("maxAllocationsPerRecord must be at least 1".into());
        }
        let mut codes = HashSet::new();
        let mut licenses = HashSet::new();
        let mut tokens = HashSet::new();
        for p in &self.products {
            if !is_valid_product_code(&p.product_code) {
                return bad(format!("malformed productCode {:?}", p.product_code));
            }
            if !codes.insert(p.product_code.as_str()) {
                return bad(format!("productCode {} listed twice", p.product_code));
            }
            if p.dimensions.iter().any(|d| d.is_empty()) {
                return bad(format!("product {} has an empty dimension", p.product_code));
            }
            for l in &p.licenses {
                if !is_valid_license_arn(&l.license_arn) {
                    return bad(format!("malformed licenseArn {:?}", l.license_arn));
                }
                if !is_valid_account_id(&l.customer_aws_account_id) {
                    return bad(format!(
                        "malformed customerAWSAccountId {:?}",
                        l.customer_aws_account_id
                    ));
                }
                if !licenses.insert(l.license_arn.as_str()) {
                    return bad(format!("licenseArn {} listed twice", l.license_arn));
                }
            }
            let mut legacy = HashSet::new();
            for c in &p.legacy_customers {
                if c.customer_identifier.is_empty()
                    || !legacy.insert(c.customer_identifier.as_str())
                {
                    return bad(format!(
                        "product {}: empty or repeated customerIdentifier {:?}",
                        p.product_code, c.customer_identifier
                    ));
                }
            }
            for t in &p.registration_tokens {
                if t.token.is_empty() || !tokens.insert(t.token.as_str()) {
                    return bad(format!(
                        "empty or repeated registration token {:?}",
                        t.token
                    ));
                }
                if !is_valid_license_arn(&t.license_arn)
                    || !is_valid_account_id(&t.customer_aws_account_id)
                {
                    return bad(format!(
                        "registration token {:?} resolves to a malformed identity",
                        t.token
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Fast lookups over a validated catalog.
#[derive(Debug, Clone)]
pub struct CatalogIndex {
    catalog: Catalog,
    product_by_code: HashMap<String, usize>,
    license_by_arn: HashMap<String, (usize, usize)>,
    token_by_value: HashMap<String, (usize, usize)>,
    all_dimensions: HashSet<String>,
}

/// What the catalog knows about a license.
#[derive(Debug, Clone, Copy)]
pub struct LicenseInfo<'a> {
    /// The product the license belongs to.
    pub product: &'a Product,
    /// The license entry.
    pub license: &'a License,
}

impl CatalogIndex {
    /// Index a catalog (validating it first).
    pub fn new(catalog: Catalog) -> Result<Self, SimError> {
        catalog.validate()?;
        let mut product_by_code = HashMap::new();
        let mut license_by_arn = HashMap::new();
        let mut token_by_value = HashMap::new();
        let mut all_dimensions = HashSet::new();
        for (pi, p) in catalog.products.iter().enumerate() {
            product_by_code.insert(p.product_code.clone(), pi);
            all_dimensions.extend(p.dimensions.iter().cloned());
            for (li, l) in p.licenses.iter().enumerate() {
                license_by_arn.insert(l.license_arn.clone(), (pi, li));
            }
            for (ti, t) in p.registration_tokens.iter().enumerate() {
                token_by_value.insert(t.token.clone(), (pi, ti));
            }
        }
        Ok(Self {
            catalog,
            product_by_code,
            license_by_arn,
            token_by_value,
            all_dimensions,
        })
    }

    /// The catalog as loaded.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// A product by code.
    pub fn product(&self, code: &str) -> Option<&Product> {
        self.product_by_code
            .get(code)
            .map(|&i| &self.catalog.products[i])
    }

    /// A license by ARN, with its product.
    pub fn license(&self, arn: &str) -> Option<LicenseInfo<'_>> {
        self.license_by_arn.get(arn).map(|&(pi, li)| {
            let product = &self.catalog.products[pi];
            LicenseInfo {
                product,
                license: &product.licenses[li],
            }
        })
    }

    /// A registration token, with its product.
    pub fn token(&self, token: &str) -> Option<(&Product, &RegistrationToken)> {
        self.token_by_value.get(token).map(|&(pi, ti)| {
            let product = &self.catalog.products[pi];
            (product, &product.registration_tokens[ti])
        })
    }

    /// True when any product of the catalog defines `dimension`.
    pub fn any_product_has_dimension(&self, dimension: &str) -> bool {
        self.all_dimensions.contains(dimension)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARN: &str =
        "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";

    #[test]
    fn parses_spec_shape_with_defaults() {
        let c = Catalog::from_json(&format!(
            r#"{{"products":[{{"productCode":"prod1","dimensions":["requests"],
                "licenses":[{{"licenseArn":"{ARN}","customerAWSAccountId":"111122223333","status":"active"}}],
                "legacyCustomers":[{{"customerIdentifier":"cust-1","status":"ended"}}],
                "registrationTokens":[{{"token":"t","licenseArn":"{ARN}","customerAWSAccountId":"111122223333",
                   "expiresAt":"2026-12-01T00:00:00Z"}}]}}]}}"#
        ))
        .expect("valid catalog");
        assert_eq!(c.window_hours, 24);
        assert_eq!(c.requests_per_second, 10);
        assert_eq!(c.max_allocations_per_record, 2500);
        assert_eq!(c.products[0].licenses[0].status, SubscriptionStatus::Active);
        assert_eq!(
            c.products[0].legacy_customers[0].status,
            SubscriptionStatus::Ended
        );
        let idx = CatalogIndex::new(c).expect("index");
        assert_eq!(
            idx.license(ARN).map(|l| l.product.product_code.as_str()),
            Some("prod1")
        );
        assert!(idx.token("t").is_some());
        assert!(idx.any_product_has_dimension("requests"));
        assert!(!idx.any_product_has_dimension("Requests"));
    }

    #[test]
    fn explicit_limits_are_kept() {
        let c = Catalog::from_json(
            r#"{"windowHours":6,"requestsPerSecond":3,"maxAllocationsPerRecord":7,"products":[]}"#,
        )
        .expect("valid");
        assert_eq!(
            (
                c.window_hours,
                c.requests_per_second,
                c.max_allocations_per_record
            ),
            (6, 3, 7)
        );
    }

    #[test]
    fn rejects_unknown_fields_and_bad_status() {
        assert!(Catalog::from_json(r#"{"windowHour":6}"#).is_err());
        assert!(
            Catalog::from_json(&format!(
                r#"{{"products":[{{"productCode":"p","dimensions":["d"],
                "licenses":[{{"licenseArn":"{ARN}","customerAWSAccountId":"111122223333","status":"paused"}}]}}]}}"#
            ))
            .is_err()
        );
    }

    #[test]
    fn rejects_inconsistent_catalogs() {
        let lic = |arn: &str, acct: &str| License {
            license_arn: arn.into(),
            customer_aws_account_id: acct.into(),
            status: SubscriptionStatus::Active,
        };
        let product = |code: &str, licenses: Vec<License>| Product {
            product_code: code.into(),
            dimensions: vec!["d".into()],
            licenses,
            legacy_customers: vec![],
            registration_tokens: vec![],
        };
        let cases = [
            Catalog {
                window_hours: 0,
                ..Catalog::default()
            },
            Catalog {
                requests_per_second: 0,
                ..Catalog::default()
            },
            Catalog {
                products: vec![product("Bad-Code", vec![])],
                ..Catalog::default()
            },
            Catalog {
                products: vec![product("p", vec![]), product("p", vec![])],
                ..Catalog::default()
            },
            Catalog {
                products: vec![product("p", vec![lic("arn:bad", "111122223333")])],
                ..Catalog::default()
            },
            Catalog {
                products: vec![product("p", vec![lic(ARN, "1111")])],
                ..Catalog::default()
            },
            Catalog {
                products: vec![
                    product("p", vec![lic(ARN, "111122223333")]),
                    product("q", vec![lic(ARN, "111122223333")]),
                ],
                ..Catalog::default()
            },
        ];
        for c in cases {
            assert!(
                matches!(c.validate(), Err(SimError::InvalidCatalog(_))),
                "{c:?}"
            );
        }
    }
}
