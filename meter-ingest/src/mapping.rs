//! The platform-owned mapping: invoked ARN → what that module may bill (docs/meter-ingest.md,
//! "Mapping"). Stored in DynamoDB (`AWSMP_INGEST_MAPPING_TABLE`, hash key `invokedArn`) and
//! seeded from a mapping file.

use std::collections::HashSet;

use awsmp_contract::event::{validate_account_id, validate_license_arn};
use awsmp_contract::limits::marketplace::MAX_USAGE_QUANTITY;
use serde::{Deserialize, Serialize};

use super::identity::parse_invoked_arn;

/// One license a module may bill: the buyer's license and account.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LicenseGrant {
    /// The buyer's license ARN.
    #[serde(rename = "licenseArn")]
    pub license_arn: String,
    /// The buyer's account id.
    #[serde(rename = "customerAWSAccountId")]
    pub customer_aws_account_id: String,
}

/// One module's entry: keyed by its qualified invoked ARN.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MappingEntry {
    /// The module's qualified function ARN (alias or version).
    pub invoked_arn: String,
    /// The environment the entry belongs to (in a file: the file's, when left out).
    #[serde(default)]
    pub environment: String,
    /// The platform's app id of the module, if it has one (reported, never taken from a hint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_id: Option<String>,
    /// The licenses the module may bill (at least one).
    pub licenses: Vec<LicenseGrant>,
    /// The dimensions the module may bill (at least one).
    pub dimensions: Vec<String>,
    /// Rate limit: events per second of receive time; the excess is held.
    pub max_events_per_second: u64,
    /// Anomaly bound: the largest quantity of one event; a larger one is held.
    pub max_quantity: u64,
}

/// A mapping file: the environment, its account allowlist and the modules' entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MappingFile {
    /// The environment (`prod`, `staging`, …).
    pub environment: String,
    /// Accounts whose aliases may invoke this environment's function.
    pub allowed_accounts: Vec<String>,
    /// The modules.
    pub modules: Vec<MappingEntry>,
}

impl MappingEntry {
    /// Every rule an entry must meet before it is stored: a qualified ARN, valid licenses, at
    /// least one dimension, bounds within the `BatchMeterUsage` quantity maximum.
    pub fn validate(&self) -> Result<(), String> {
        let arn = &self.invoked_arn;
        parse_invoked_arn(arn).map_err(|r| r.detail)?;
        if self.environment.is_empty() {
            return Err(format!("{arn}: no environment"));
        }
        if self.licenses.is_empty() {
            return Err(format!("{arn}: no licenses"));
        }
        for l in &self.licenses {
            validate_license_arn(&l.license_arn).map_err(|e| format!("{arn}: {e}"))?;
            validate_account_id(&l.customer_aws_account_id).map_err(|e| format!("{arn}: {e}"))?;
        }
        if self.dimensions.is_empty() || self.dimensions.iter().any(String::is_empty) {
            return Err(format!("{arn}: no dimensions, or an empty one"));
        }
        if self.max_events_per_second == 0 {
            return Err(format!("{arn}: maxEventsPerSecond must be at least 1"));
        }
        if self.max_quantity == 0 || self.max_quantity > MAX_USAGE_QUANTITY {
            return Err(format!(
                "{arn}: maxQuantity must be 1..={MAX_USAGE_QUANTITY} (the BatchMeterUsage maximum)"
            ));
        }
        Ok(())
    }
}

impl MappingFile {
    /// Parse and validate a mapping file; each entry gets the file's environment.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut file: MappingFile =
            serde_json::from_str(text).map_err(|e| format!("mapping file: {e}"))?;
        if file.environment.is_empty() {
            return Err("mapping file: empty environment".into());
        }
        for a in &file.allowed_accounts {
            validate_account_id(a).map_err(|e| format!("mapping file allowedAccounts: {e}"))?;
        }
        let allowed: HashSet<&str> = file.allowed_accounts.iter().map(String::as_str).collect();
        let mut seen = HashSet::new();
        for m in &mut file.modules {
            if m.environment.is_empty() {
                m.environment.clone_from(&file.environment);
            }
            if m.environment != file.environment {
                return Err(format!(
                    "{}: environment {:?} in a {:?} file",
                    m.invoked_arn, m.environment, file.environment
                ));
            }
            m.validate()?;
            let account = parse_invoked_arn(&m.invoked_arn)
                .map_err(|r| r.detail)?
                .account;
            if !allowed.contains(account.as_str()) {
                return Err(format!(
                    "{}: account {account} is not in allowedAccounts",
                    m.invoked_arn
                ));
            }
            if !seen.insert(m.invoked_arn.clone()) {
                return Err(format!("{}: listed twice", m.invoked_arn));
            }
        }
        Ok(file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(modules: &str) -> String {
        format!(
            r#"{{"environment":"prod","allowedAccounts":["111111111111"],"modules":[{modules}]}}"#
        )
    }

    const MODULE: &str = r#"{"invokedArn":"arn:aws:lambda:us-east-1:111111111111:function:awsmp-meter-ingest:module-a",
        "licenses":[{"licenseArn":"arn:aws:license-manager::111111111111:license:l-0123456789abcdef0123456789abcdef","customerAWSAccountId":"222222222222"}],
        "dimensions":["requests"],"maxEventsPerSecond":100,"maxQuantity":1000000}"#;

    #[test]
    fn the_issue_format_parses_and_takes_the_file_environment() {
        let f = MappingFile::parse(&file(MODULE)).unwrap();
        assert_eq!(f.modules.len(), 1);
        assert_eq!(f.modules[0].environment, "prod");
        assert_eq!(f.modules[0].max_events_per_second, 100);
    }

    #[test]
    fn bad_files_are_refused_with_the_offending_entry() {
        let cases = [
            MODULE.replace(":module-a", ""),
            MODULE.replace("\"requests\"", ""),
            MODULE.replace("1000000", "0"),
            MODULE.replace("100,", "0,"),
            MODULE.replace("222222222222", "22"),
            MODULE.replace("111111111111:function", "333333333333:function"),
            MODULE.replace("\"maxQuantity\"", "\"maxQty\""),
            format!("{MODULE},{MODULE}"),
        ];
        for modules in cases {
            assert!(MappingFile::parse(&file(&modules)).is_err(), "{modules}");
        }
        let staging = MODULE.replace(
            "{\"invokedArn\"",
            "{\"environment\":\"staging\",\"invokedArn\"",
        );
        assert!(MappingFile::parse(&file(&staging)).is_err());
    }
}
