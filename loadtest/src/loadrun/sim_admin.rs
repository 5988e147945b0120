//! The simulator's admin API (`/_sim/...`, see `marketplace-sim/README.md`), as a local run uses it.

use crate::conservation::GroupHour;
use anyhow::{Result, bail};
use awsmp_local_stack::local::LocalEnv;

/// The simulator's admin API.
pub(super) struct SimAdmin {
    url: String,
    http: reqwest::Client,
}

impl SimAdmin {
    pub(super) fn new(env: &LocalEnv) -> Result<Self> {
        Ok(Self {
            url: env.get("AWSMP_SIM_ADMIN_URL")?.to_owned(),
            http: reqwest::Client::new(),
        })
    }

    pub(super) async fn post(&self, path: &str, body: serde_json::Value) -> Result<()> {
        self.call(path, body).await.map(drop)
    }

    /// POST `body` to `path`; the answer's JSON (`null` when it has none).
    pub(super) async fn call(
        &self,
        path: &str,
        body: serde_json::Value,
    ) -> Result<serde_json::Value> {
        let res = self
            .http
            .post(format!("{}{path}", self.url))
            .json(&body)
            .send()
            .await?;
        if !res.status().is_success() {
            bail!(
                "simulator {path}: {} {}",
                res.status(),
                res.text().await.unwrap_or_default()
            );
        }
        let text = res.text().await?;
        if text.trim().is_empty() {
            return Ok(serde_json::Value::Null);
        }
        Ok(serde_json::from_str(&text)?)
    }

    pub(super) async fn ledger(&self) -> Result<serde_json::Value> {
        Ok(self
            .http
            .get(format!("{}/_sim/ledger", self.url))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?)
    }
}

/// The group-hour of one simulator ledger record.
pub(super) fn ledger_group_hour(r: &serde_json::Value) -> GroupHour {
    let field = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
    (
        field("licenseArn"),
        field("customerAWSAccountId"),
        field("dimension"),
        field("hour"),
    )
}
