//! Each function's environment for the local stack, rendered from `infra/functions.json` (never a
//! second list): the local stack's env file (`.awsmp-local/env`, written by `awsmp-local up`)
//! fills the templates' parameters, `Ref`s and `Fn::GetAtt`s, and its endpoints, region and
//! credentials are added on top as the local stack's overlay (docs/local-stack.md, "Lambdas as
//! processes").
//!
//! - Parameters: `StageName` is `AWSMP_ENVIRONMENT` when the env file sets it (the ingest
//!   mapping's environment), else `local`; `ProductCode` is `AWSMP_PRODUCT_CODE`. Any other
//!   parameter a function's variable is a plain `Ref` of takes the env file's value of that
//!   variable (the local stack's 7-day `UsageTableTtlDays`, for one); the rest keep their
//!   defaults.
//! - Resources: `Ref` of a table, stream or bucket is its local name, of a queue the URL the env
//!   file gives for it; `Fn::GetAtt [Id, Arn]` its ARN in the local account and region.
//! - A name one stack builds for another stack's resource (`awsmp-${StageName}-…`, or the table
//!   ARN the main stack gives for the events stack's subscribers table) becomes that resource's
//!   local name: the local stack names its resources `awsmp-…` and its DynamoDB emulator takes no
//!   table ARN.
//! - A variable that carries a local resource must have the name the env file (and so the code,
//!   `infra/resources.json`'s `env`) gives that resource, or rendering fails naming both.

use crate::Error;
use crate::template::{Context, FunctionManifest, Manifest, Schedule, StackManifest};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// The stage name of the local stack when the env file names none.
pub const LOCAL_STAGE: &str = "local";

/// The local stack's account (the emulators' and the simulator's).
pub const LOCAL_ACCOUNT: &str = "123456789012";

/// One function as the local stack runs it.
#[derive(Debug, Clone)]
pub struct LocalFunction {
    /// Its stack (`events`, `ingest`, `main`).
    pub stack: String,
    /// The binary's name, also the function's name here.
    pub binary: String,
    /// What the template gives it, resolved for the local stack.
    pub environment: BTreeMap<String, String>,
    /// The local stack's overlay: endpoints (`AWS_ENDPOINT_URL_*`), region and credentials.
    pub overlay: BTreeMap<String, String>,
    pub timeout: Duration,
    pub memory_mb: u32,
    /// Its unqualified ARN in the local account.
    pub arn: String,
    /// The schedule targets that exist (their condition holds).
    pub schedules: Vec<Schedule>,
    /// The logical ids of the queues and streams whose mappings feed it.
    pub sources: Vec<String>,
}

impl LocalFunction {
    /// Everything the process gets besides Lambda's own variables: the template's environment
    /// and the overlay.
    pub fn env(&self) -> BTreeMap<String, String> {
        let mut env = self.overlay.clone();
        env.extend(self.environment.clone());
        env
    }

    /// What the host needs to run it from `bin_dir`.
    pub fn spec(&self, bin_dir: &Path) -> crate::FunctionSpec {
        crate::FunctionSpec {
            name: self.binary.clone(),
            binary: bin_dir.join(&self.binary),
            env: self.env(),
            timeout: self.timeout,
            memory_mb: self.memory_mb,
            arn: self.arn.clone(),
        }
    }
}

/// Read an env file (`KEY=value` lines, values optionally single-quoted as `awsmp-local`
/// writes them).
pub fn read_env_file(path: &Path) -> Result<BTreeMap<String, String>, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Template(format!("reading {}: {e}", path.display())))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| {
            let v = v.trim();
            let v = v
                .strip_prefix('\'')
                .and_then(|s| s.strip_suffix('\''))
                .map_or_else(|| v.to_owned(), |s| s.replace(r"'\''", "'"));
            (k.trim().to_owned(), v)
        })
        .collect())
}

/// Every function whose condition holds, rendered for the local stack whose env file's
/// variables are `local`.
pub fn render(
    manifest: &Manifest,
    local: &BTreeMap<String, String>,
) -> Result<Vec<LocalFunction>, Error> {
    let region = local
        .get("AWS_REGION")
        .cloned()
        .unwrap_or_else(|| "us-east-1".into());
    let overlay: BTreeMap<String, String> = local
        .iter()
        .filter(|(k, _)| k.starts_with("AWS_"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let contexts = manifest
        .stacks
        .iter()
        .map(|(name, stack)| Ok((name.as_str(), context(name, stack, local, &region)?)))
        .collect::<Result<BTreeMap<_, _>, Error>>()?;
    let deployed = deployed_names(manifest, &contexts)?;
    let mut out = Vec::new();
    for (stack_name, stack, f) in manifest.functions() {
        let ctx = &contexts[stack_name];
        if let Some(c) = &f.condition
            && !stack.condition(c, ctx)?
        {
            continue;
        }
        let mut environment = stack.environment(f, ctx)?;
        for value in environment.values_mut() {
            if let Some(local_name) = deployed.get(value.as_str()) {
                value.clone_from(local_name);
            }
        }
        check_names(f, &environment, local)?;
        if let Some(k) = environment.keys().find(|k| overlay.contains_key(*k)) {
            return Err(Error::Template(format!(
                "{}: the template sets {k}, which the local stack's overlay also sets",
                f.binary
            )));
        }
        out.push(LocalFunction {
            stack: stack_name.to_owned(),
            binary: f.binary.clone(),
            environment,
            overlay: overlay.clone(),
            timeout: Duration::from_secs(f.timeout),
            memory_mb: f.memory,
            arn: format!(
                "arn:aws:lambda:{region}:{LOCAL_ACCOUNT}:function:{}",
                f.binary
            ),
            schedules: schedules(stack, f, ctx)?,
            sources: f.mappings.iter().filter_map(|m| m.source.clone()).collect(),
        });
    }
    Ok(out)
}

/// The stack's parameters, resources and pseudo parameters on the local stack.
fn context(
    stack_name: &str,
    stack: &StackManifest,
    local: &BTreeMap<String, String>,
    region: &str,
) -> Result<Context, Error> {
    let mut parameters = BTreeMap::new();
    let stage = local
        .get("AWSMP_ENVIRONMENT")
        .filter(|s| !s.is_empty())
        .map_or(LOCAL_STAGE, String::as_str);
    parameters.insert("StageName".to_owned(), stage.to_owned());
    if stack.parameters.contains_key("ProductCode") {
        let code = local.get("AWSMP_PRODUCT_CODE").ok_or_else(|| {
            Error::Template("the local env names no AWSMP_PRODUCT_CODE (ProductCode)".into())
        })?;
        parameters.insert("ProductCode".to_owned(), code.clone());
    }
    for f in &stack.functions {
        for (var, value) in &f.environment {
            let param = value.get("Ref").and_then(Value::as_str);
            if let (Some(p), Some(v)) = (param, local.get(var))
                && stack.parameters.contains_key(p)
            {
                parameters.entry(p.to_owned()).or_insert_with(|| v.clone());
            }
        }
    }
    let mut refs = BTreeMap::new();
    let mut attributes = BTreeMap::new();
    for (id, r) in &stack.resources {
        let name = &r.local_name;
        let (reference, arn) = match r.kind.as_str() {
            "AWS::SQS::Queue" => (
                queue_url(local, name)?,
                format!("arn:aws:sqs:{region}:{LOCAL_ACCOUNT}:{name}"),
            ),
            "AWS::DynamoDB::Table" => (
                name.clone(),
                format!("arn:aws:dynamodb:{region}:{LOCAL_ACCOUNT}:table/{name}"),
            ),
            "AWS::Kinesis::Stream" => (
                name.clone(),
                format!("arn:aws:kinesis:{region}:{LOCAL_ACCOUNT}:stream/{name}"),
            ),
            _ => (name.clone(), format!("arn:aws:s3:::{name}")),
        };
        refs.insert(id.clone(), reference);
        attributes.insert(format!("{id}.Arn"), arn);
    }
    Ok(Context {
        parameters,
        refs,
        attributes,
        account_id: LOCAL_ACCOUNT.into(),
        region: region.into(),
        partition: "aws".into(),
        stack_name: format!("awsmp-{stage}-{stack_name}"),
    })
}

/// The env file's URL of the queue named `name`.
fn queue_url(local: &BTreeMap<String, String>, name: &str) -> Result<String, Error> {
    local
        .values()
        .find(|v| v.starts_with("http") && v.rsplit('/').next() == Some(name))
        .cloned()
        .ok_or_else(|| Error::Template(format!("the local env gives no URL for queue {name}")))
}

/// Every resource's deployed name (and, for a table, its ARN) → its local name.
fn deployed_names(
    manifest: &Manifest,
    contexts: &BTreeMap<&str, Context>,
) -> Result<BTreeMap<String, String>, Error> {
    let mut out = BTreeMap::new();
    for (stack_name, stack) in &manifest.stacks {
        let ctx = &contexts[stack_name.as_str()];
        for r in stack.resources.values() {
            let Some(name) = &r.name else { continue };
            let Some(deployed) = stack.resolve(name, ctx)? else {
                continue;
            };
            if r.kind == "AWS::DynamoDB::Table" {
                // Any region: the main stack names the events region's table.
                for region in ["us-east-1", ctx.region.as_str()] {
                    out.insert(
                        format!(
                            "arn:aws:dynamodb:{region}:{}:table/{deployed}",
                            ctx.account_id
                        ),
                        r.local_name.clone(),
                    );
                }
            }
            out.insert(deployed, r.local_name.clone());
        }
    }
    Ok(out)
}

/// A variable carrying a local resource is named as the env file names that resource.
fn check_names(
    f: &FunctionManifest,
    env: &BTreeMap<String, String>,
    local: &BTreeMap<String, String>,
) -> Result<(), Error> {
    for (var, value) in env {
        let named: Vec<&String> = local
            .iter()
            .filter(|(k, v)| k.starts_with("AWSMP_") && *v == value && is_resource(k))
            .map(|(k, _)| k)
            .collect();
        if !named.is_empty() && !named.contains(&var) {
            return Err(Error::Template(format!(
                "{}: the template names {value} {var}; the code reads it as {}",
                f.binary,
                named
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(" or ")
            )));
        }
    }
    Ok(())
}

/// Whether an env file variable names a resource (`infra/resources.json`'s `env`).
fn is_resource(var: &str) -> bool {
    ["_TABLE", "_QUEUE_URL", "_DLQ_URL", "_STREAM", "_BUCKET"]
        .iter()
        .any(|s| var.ends_with(s))
}

fn schedules(
    stack: &StackManifest,
    f: &FunctionManifest,
    ctx: &Context,
) -> Result<Vec<Schedule>, Error> {
    let mut out = Vec::new();
    for s in &f.schedules {
        let exists = match &s.condition {
            Some(c) => stack.condition(c, ctx)?,
            None => true,
        };
        if exists {
            out.push(s.clone());
        }
    }
    Ok(out)
}
