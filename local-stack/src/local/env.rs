//! `.awsmp-local/env`: how every binary, test and script finds the local stack.

use super::{LOCAL_CREDENTIAL, LOCAL_REGION, State};
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::path::Path;

/// The variables of the env file, in the conventions the AWS SDKs read
/// (`AWS_ENDPOINT_URL_<SERVICE>`, `AWS_REGION`, credentials) plus awsmp's resource names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalEnv {
    /// Variable → value, sorted so the file is stable.
    pub vars: BTreeMap<String, String>,
}

impl LocalEnv {
    /// Endpoints, region and credentials for the running services.
    pub fn for_services(state: &State) -> Result<Self> {
        Self::for_region(state, LOCAL_REGION)
    }

    /// Endpoints, region and credentials for the services of `region` (named `service@region`
    /// outside the events region, [`super::topology::service_name`]).
    pub fn for_region(state: &State, region: &str) -> Result<Self> {
        let mut vars = BTreeMap::new();
        vars.insert("AWS_REGION".into(), region.into());
        vars.insert("AWS_DEFAULT_REGION".into(), region.into());
        vars.insert("AWS_ACCESS_KEY_ID".into(), LOCAL_CREDENTIAL.into());
        vars.insert("AWS_SECRET_ACCESS_KEY".into(), LOCAL_CREDENTIAL.into());
        // Never read a developer's real ~/.aws profile while pointed at the emulators.
        vars.insert("AWS_CONFIG_FILE".into(), "/dev/null".into());
        vars.insert("AWS_SHARED_CREDENTIALS_FILE".into(), "/dev/null".into());
        vars.insert("AWS_EC2_METADATA_DISABLED".into(), "true".into());
        for s in &state.services {
            let name = match s.name.split_once('@') {
                Some((name, r)) if r == region => name,
                Some(_) => continue,
                None if region == LOCAL_REGION => s.name.as_str(),
                None => continue,
            };
            let url = format!("http://127.0.0.1:{}", s.port);
            let key = match name {
                "dynamodb" => "AWS_ENDPOINT_URL_DYNAMODB",
                "kinesis" => "AWS_ENDPOINT_URL_KINESIS",
                "sqs" => {
                    // moto's server serves every service on one port: S3 too.
                    vars.insert("AWS_ENDPOINT_URL_S3".into(), url.clone());
                    "AWS_ENDPOINT_URL_SQS"
                }
                "marketplace-metering" => {
                    vars.insert("AWSMP_SIM_ADMIN_URL".into(), url.clone());
                    // The simulator also serves CloudTrail's LookupEvents (docs/meterctl.md).
                    vars.insert("AWS_ENDPOINT_URL_CLOUDTRAIL".into(), url.clone());
                    "AWS_ENDPOINT_URL_MARKETPLACE_METERING"
                }
                other => bail!("unknown service {other}"),
            };
            vars.insert(key.into(), url);
        }
        Ok(Self { vars })
    }

    /// Read an env file written by `up`.
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| {
            format!(
                "reading {} (is the stack up? run `awsmp-local up`)",
                path.display()
            )
        })?;
        Self::parse(&text)
    }

    /// Parse `KEY=value` lines (comments and blank lines ignored).
    pub fn parse(text: &str) -> Result<Self> {
        let mut vars = BTreeMap::new();
        for line in text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let (k, v) = line
                .split_once('=')
                .with_context(|| format!("bad env line: {line}"))?;
            vars.insert(k.trim().to_owned(), unquote(v.trim()));
        }
        Ok(Self { vars })
    }

    /// Shell-sourceable text.
    pub fn render(&self) -> String {
        let mut out = String::from(
            "# Written by `awsmp-local up`. Source it: set -a; . .awsmp-local/env; set +a\n",
        );
        for (k, v) in &self.vars {
            out.push_str(&format!("{k}={}\n", quote(v)));
        }
        out
    }

    /// A value, or an error naming the missing variable.
    pub fn get(&self, key: &str) -> Result<&str> {
        self.vars
            .get(key)
            .map(String::as_str)
            .with_context(|| format!("{key} missing from the local env"))
    }

    /// Set these variables on a child command.
    pub fn apply_to(&self, cmd: &mut std::process::Command) {
        cmd.envs(&self.vars);
    }

    /// SDK configuration pointed at these endpoints (without touching the process environment).
    pub async fn sdk_config(&self) -> aws_config::SdkConfig {
        let mut loader = awsmp_aws::sdk::config_loader().region(aws_config::Region::new(
            self.vars
                .get("AWS_REGION")
                .cloned()
                .unwrap_or_else(|| LOCAL_REGION.into()),
        ));
        // Keys given (the local stack's dummies, or a session's): use exactly those. Otherwise
        // the SDK's default chain (a real deployment: profile, SSO, instance role…).
        if let (Some(id), Some(secret)) = (
            self.vars.get("AWS_ACCESS_KEY_ID"),
            self.vars.get("AWS_SECRET_ACCESS_KEY"),
        ) {
            loader = loader.credentials_provider(aws_credential_types::Credentials::from_keys(
                id,
                secret,
                self.vars.get("AWS_SESSION_TOKEN").cloned(),
            ));
        }
        loader.load().await
    }

    /// `AWS_ENDPOINT_URL_<SERVICE>` when set; `None` means the service's real AWS endpoint.
    fn endpoint(&self, key: &str) -> Option<&str> {
        self.vars
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// A DynamoDB client (the local endpoint, or AWS when none is set).
    pub async fn dynamodb(&self) -> Result<aws_sdk_dynamodb::Client> {
        let cfg = self.sdk_config().await;
        let mut builder = aws_sdk_dynamodb::config::Builder::from(&cfg);
        builder.set_endpoint_url(
            self.endpoint("AWS_ENDPOINT_URL_DYNAMODB")
                .map(str::to_owned),
        );
        let conf = builder.build();
        Ok(aws_sdk_dynamodb::Client::from_conf(conf))
    }

    /// An SQS client (the local endpoint, or AWS when none is set).
    pub async fn sqs(&self) -> Result<aws_sdk_sqs::Client> {
        let cfg = self.sdk_config().await;
        let mut builder = aws_sdk_sqs::config::Builder::from(&cfg);
        builder.set_endpoint_url(self.endpoint("AWS_ENDPOINT_URL_SQS").map(str::to_owned));
        let conf = builder.build();
        Ok(aws_sdk_sqs::Client::from_conf(conf))
    }

    /// A Kinesis client (the local endpoint, or AWS when none is set).
    pub async fn kinesis(&self) -> Result<aws_sdk_kinesis::Client> {
        let cfg = self.sdk_config().await;
        let mut builder = aws_sdk_kinesis::config::Builder::from(&cfg);
        builder.set_endpoint_url(self.endpoint("AWS_ENDPOINT_URL_KINESIS").map(str::to_owned));
        let conf = builder.build();
        Ok(aws_sdk_kinesis::Client::from_conf(conf))
    }

    /// An S3 client (the local endpoint with path-style addressing, or AWS when none is set).
    pub async fn s3(&self) -> Result<aws_sdk_s3::Client> {
        let cfg = self.sdk_config().await;
        let mut builder = aws_sdk_s3::config::Builder::from(&cfg);
        if let Some(url) = self.endpoint("AWS_ENDPOINT_URL_S3") {
            // 127.0.0.1 has no bucket subdomains.
            builder = builder.endpoint_url(url).force_path_style(true);
        }
        Ok(aws_sdk_s3::Client::from_conf(builder.build()))
    }

    /// A Marketplace Metering client for the simulator, with the request fix every awsmp
    /// submitter uses ([`awsmp_pipeline::metering_client`]).
    pub async fn metering(&self) -> Result<aws_sdk_marketplacemetering::Client> {
        let cfg = self.sdk_config().await;
        let mut builder = aws_sdk_marketplacemetering::config::Builder::from(&cfg);
        builder.set_endpoint_url(
            self.endpoint("AWS_ENDPOINT_URL_MARKETPLACE_METERING")
                .map(str::to_owned),
        );
        let conf = builder
            .interceptor(awsmp_pipeline::metering_client::OmitEmptyCustomerIdentifier)
            .build();
        Ok(aws_sdk_marketplacemetering::Client::from_conf(conf))
    }

    /// The environment of this process as a [`LocalEnv`] (what the test script exported).
    pub fn from_process() -> Self {
        Self {
            vars: std::env::vars()
                .filter(|(k, _)| k.starts_with("AWS"))
                .collect(),
        }
    }
}

fn quote(v: &str) -> String {
    if v.chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_./:@%+,=".contains(c))
    {
        v.to_owned()
    } else {
        format!("'{}'", v.replace('\'', r"'\''"))
    }
}

fn unquote(v: &str) -> String {
    v.strip_prefix('\'')
        .and_then(|s| s.strip_suffix('\''))
        .map_or_else(|| v.to_owned(), |s| s.replace(r"'\''", "'"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_then_parse_round_trips() {
        let mut env = LocalEnv::default();
        env.vars.insert("A".into(), "http://127.0.0.1:1234".into());
        env.vars.insert("B".into(), "it's got spaces".into());
        assert_eq!(LocalEnv::parse(&env.render()).unwrap(), env);
    }
}
