//! Shape checks for AWS Marketplace identifiers.
//!
//! These are *structural* checks only (the server stays authoritative), shared by the
//! aggregator's guardrails and by the Marketplace simulator so both agree on what a
//! malformed identifier is.

/// Length of the hex part of a License Manager license id (`l-` + 32 lowercase hex digits).
const LICENSE_ID_HEX_LEN: usize = 32;

/// True when `arn` has the shape of a License Manager license ARN as AWS Marketplace issues
/// them: `arn:<partition>:license-manager::<12-digit account>:license:l-<32 hex>`.
///
/// ```
/// use awsmp_contract::ids::is_valid_license_arn;
/// assert!(is_valid_license_arn(
///     "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef"
/// ));
/// assert!(!is_valid_license_arn("arn:aws:license-manager::123:license:l-xyz"));
/// ```
pub fn is_valid_license_arn(arn: &str) -> bool {
    let parts: Vec<&str> = arn.split(':').collect();
    // arn : partition : service : region(empty) : account : resource-type : resource-id
    let [prefix, partition, service, region, account, kind, id] = parts.as_slice() else {
        return false;
    };
    let Some(hex) = id.strip_prefix("l-") else {
        return false;
    };
    *prefix == "arn"
        && is_partition(partition)
        && *service == "license-manager"
        && region.is_empty()
        && is_valid_account_id(account)
        && *kind == "license"
        && hex.len() == LICENSE_ID_HEX_LEN
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn is_partition(p: &str) -> bool {
    // aws, aws-cn, aws-us-gov, aws-iso-b, ...
    p == "aws"
        || p.strip_prefix("aws-").is_some_and(|rest| {
            !rest.is_empty()
                && rest
                    .split('-')
                    .all(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_lowercase()))
        })
}

/// True when `id` is a 12-digit AWS account id.
///
/// ```
/// use awsmp_contract::ids::is_valid_account_id;
/// assert!(is_valid_account_id("123456789012"));
/// assert!(!is_valid_account_id("12345678901"));
/// ```
pub fn is_valid_account_id(id: &str) -> bool {
    id.len() == 12 && id.bytes().all(|b| b.is_ascii_digit())
}

/// True when `code` looks like a Marketplace product code: 1–255 lowercase letters and digits.
pub fn is_valid_product_code(code: &str) -> bool {
    !code.is_empty()
        && code.len() <= 255
        && code
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str =
        "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef";

    #[test]
    fn accepts_marketplace_license_arns() {
        assert!(is_valid_license_arn(GOOD));
        assert!(is_valid_license_arn(
            "arn:aws-us-gov:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef"
        ));
    }

    #[test]
    fn rejects_each_malformed_part() {
        for bad in [
            "",
            "arn:aws:license-manager::123456789012:license",
            "arm:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef",
            "arn:AWS:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef",
            "arn:aws:s3::123456789012:license:l-0123456789abcdef0123456789abcdef",
            "arn:aws:license-manager:us-east-1:123456789012:license:l-0123456789abcdef0123456789abcdef",
            "arn:aws:license-manager::12345678901:license:l-0123456789abcdef0123456789abcdef",
            "arn:aws:license-manager::123456789012:grant:l-0123456789abcdef0123456789abcdef",
            "arn:aws:license-manager::123456789012:license:0123456789abcdef0123456789abcdef",
            "arn:aws:license-manager::123456789012:license:l-0123456789ABCDEF0123456789abcdef",
            "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcde",
            "arn:aws:license-manager::123456789012:license:l-0123456789abcdef0123456789abcdef:x",
        ] {
            assert!(!is_valid_license_arn(bad), "{bad}");
        }
    }

    #[test]
    fn product_codes() {
        assert!(is_valid_product_code("4ml54db8vrmjuykaw1psroool"));
        assert!(!is_valid_product_code(""));
        assert!(!is_valid_product_code("Bad-Code"));
    }
}
