//! Who is calling: the module identity is the qualified function ARN Lambda invoked
//! (`Context::invoked_function_arn`), never anything in the payload (docs/meter-ingest.md,
//! "Identity").

use std::collections::HashSet;

use awsmp_contract::reasons;

use awsmp_consumer::domain::verify::Refusal;

/// The version qualifier that names no module: the unpublished code of the function.
pub const LATEST_QUALIFIER: &str = "$LATEST";
/// The metric label of an invocation whose ARN names no module.
pub const UNIDENTIFIED_MODULE: &str = "unidentified";

/// A module's identity: the parts of a qualified Lambda function ARN
/// (`arn:{partition}:lambda:{region}:{account}:function:{name}:{qualifier}`,
/// <https://docs.aws.amazon.com/lambda/latest/dg/configuration-versions.html>).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvokerIdentity {
    /// The whole qualified ARN: the mapping's key.
    pub arn: String,
    /// Region.
    pub region: String,
    /// The account the function (and so the alias) lives in.
    pub account: String,
    /// Function name.
    pub function: String,
    /// Alias or version: the module.
    pub qualifier: String,
}

/// The label a metric carries for the module of `arn`: its qualifier when it has one.
pub fn module_label(arn: &str) -> String {
    parse_invoked_arn(arn).map_or_else(|_| UNIDENTIFIED_MODULE.to_owned(), |id| id.qualifier)
}

/// The identity in `arn`, or `UnqualifiedInvoker` when it is not a qualified Lambda function
/// ARN (no qualifier, `$LATEST`, another service, a malformed account).
pub fn parse_invoked_arn(arn: &str) -> Result<InvokerIdentity, Refusal> {
    let refuse = |why: &str| Refusal {
        reason: reasons::UNQUALIFIED_INVOKER,
        detail: format!("{arn:?} {why}"),
    };
    let parts: Vec<&str> = arn.split(':').collect();
    let shape = parts.len() >= 7
        && parts[0] == "arn"
        && !parts[1].is_empty()
        && parts[2] == "lambda"
        && !parts[3].is_empty()
        && parts[5] == "function"
        && !parts[6].is_empty();
    if !shape || parts.len() > 8 {
        return Err(refuse("is not a Lambda function ARN"));
    }
    let account = parts[4];
    if account.len() != 12 || !account.bytes().all(|b| b.is_ascii_digit()) {
        return Err(refuse("has no 12-digit account id"));
    }
    let qualifier = match parts.get(7) {
        None | Some(&"") => return Err(refuse("names no alias or version")),
        Some(&LATEST_QUALIFIER) => return Err(refuse("is $LATEST, not a module's alias")),
        Some(q) => *q,
    };
    Ok(InvokerIdentity {
        arn: arn.to_owned(),
        region: parts[3].to_owned(),
        account: account.to_owned(),
        function: parts[6].to_owned(),
        qualifier: qualifier.to_owned(),
    })
}

/// The environment's allowlist: which accounts may invoke this environment's function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowlist {
    /// The environment (`prod`, `staging`, …): a mapping entry of another one is refused.
    pub environment: String,
    /// Accounts whose aliases may bill here.
    pub accounts: HashSet<String>,
}

impl Allowlist {
    /// `AccountNotAllowlisted` unless `identity`'s account is on the list.
    pub fn check(&self, identity: &InvokerIdentity) -> Result<(), Refusal> {
        if self.accounts.contains(&identity.account) {
            return Ok(());
        }
        Err(Refusal {
            reason: reasons::ACCOUNT_NOT_ALLOWLISTED,
            detail: format!(
                "account {} is not in the {} allowlist",
                identity.account, self.environment
            ),
        })
    }

    /// `AccountNotAllowlisted` unless a mapping entry of `environment` belongs here.
    pub fn check_environment(&self, environment: &str) -> Result<(), Refusal> {
        if environment == self.environment {
            return Ok(());
        }
        Err(Refusal {
            reason: reasons::ACCOUNT_NOT_ALLOWLISTED,
            detail: format!(
                "the mapping entry is for {environment:?}, this function serves {:?}",
                self.environment
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "arn:aws:lambda:us-east-1:111111111111:function:awsmp-meter-ingest:module-a";

    #[test]
    fn a_qualified_arn_names_its_module() {
        let id = parse_invoked_arn(A).unwrap();
        assert_eq!(id.qualifier, "module-a");
        assert_eq!(id.account, "111111111111");
        assert_eq!(id.function, "awsmp-meter-ingest");
        assert_eq!(module_label(A), "module-a");
    }

    #[test]
    fn unqualified_latest_and_foreign_arns_are_refused() {
        for arn in [
            "arn:aws:lambda:us-east-1:111111111111:function:awsmp-meter-ingest",
            "arn:aws:lambda:us-east-1:111111111111:function:awsmp-meter-ingest:",
            "arn:aws:lambda:us-east-1:111111111111:function:awsmp-meter-ingest:$LATEST",
            "arn:aws:sqs:us-east-1:111111111111:function:x:y",
            "arn:aws:lambda:us-east-1:1111:function:x:y",
            "arn:aws:lambda:us-east-1:111111111111:function:x:y:z",
            "module-a",
            "",
        ] {
            let r = parse_invoked_arn(arn).unwrap_err();
            assert_eq!(r.reason, reasons::UNQUALIFIED_INVOKER, "{arn}");
            assert_eq!(module_label(arn), UNIDENTIFIED_MODULE);
        }
    }

    #[test]
    fn the_allowlist_refuses_other_accounts_and_environments() {
        let list = Allowlist {
            environment: "prod".into(),
            accounts: HashSet::from(["111111111111".to_owned()]),
        };
        assert!(list.check(&parse_invoked_arn(A).unwrap()).is_ok());
        let staging = A.replace("111111111111", "222222222222");
        let r = list
            .check(&parse_invoked_arn(&staging).unwrap())
            .unwrap_err();
        assert_eq!(r.reason, reasons::ACCOUNT_NOT_ALLOWLISTED);
        assert!(list.check_environment("prod").is_ok());
        assert_eq!(
            list.check_environment("staging").unwrap_err().reason,
            reasons::ACCOUNT_NOT_ALLOWLISTED
        );
    }
}
