//! `infra/functions.json` (written by `infra/generate.py` from the templates) and the
//! CloudFormation intrinsics its environments hold, resolved against a host's own resources and
//! parameter values: `Ref`, `Fn::Sub`, `Fn::GetAtt`, `Fn::If`, `Fn::Join`, the condition
//! functions and the pseudo parameters
//! (<https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/intrinsic-function-reference.html>).

use crate::Error;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// The whole manifest: one entry per stack (`events`, `ingest`, `main`).
#[derive(Debug, Clone, Deserialize)]
pub struct Manifest {
    pub stacks: BTreeMap<String, StackManifest>,
}

/// One stack's parameters (defaults; `null` when it has none), conditions and functions.
#[derive(Debug, Clone, Deserialize)]
pub struct StackManifest {
    pub parameters: BTreeMap<String, Value>,
    pub conditions: Map<String, Value>,
    pub functions: Vec<FunctionManifest>,
}

/// One function as its template gives it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FunctionManifest {
    pub logical_id: String,
    pub binary: String,
    pub condition: Option<String>,
    pub timeout: u64,
    pub memory: u32,
    /// `Environment.Variables`, intrinsics as the template has them.
    pub environment: Map<String, Value>,
    pub schedules: Vec<Schedule>,
    pub mappings: Vec<Mapping>,
}

/// An EventBridge schedule target of the function.
#[derive(Debug, Clone, Deserialize)]
pub struct Schedule {
    pub rule: String,
    pub target: String,
    pub expression: String,
    /// The target's constant input (the event the function gets); `None`: the scheduled event.
    pub input: Option<Value>,
    pub condition: Option<String>,
}

/// An event source mapping feeding the function.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mapping {
    pub mapping: String,
    /// The queue's or stream's logical id.
    pub source: Option<String>,
    pub batch_size: Option<Value>,
    #[serde(default)]
    pub function_response_types: Vec<String>,
}

impl Manifest {
    /// Read `infra/functions.json`.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Template(format!("reading {}: {e}", path.display())))?;
        Self::parse(&text)
    }

    /// Parse the manifest's text.
    pub fn parse(text: &str) -> Result<Self, Error> {
        serde_json::from_str(text).map_err(|e| Error::Template(format!("functions.json: {e}")))
    }

    /// Every function, with its stack's name and manifest.
    pub fn functions(&self) -> impl Iterator<Item = (&str, &StackManifest, &FunctionManifest)> {
        self.stacks
            .iter()
            .flat_map(|(name, s)| s.functions.iter().map(move |f| (name.as_str(), s, f)))
    }

    /// The stack and the function whose binary is `binary`.
    pub fn function(&self, binary: &str) -> Option<(&str, &StackManifest, &FunctionManifest)> {
        self.stacks.iter().find_map(|(stack, s)| {
            s.functions
                .iter()
                .find(|f| f.binary == binary)
                .map(|f| (stack.as_str(), s, f))
        })
    }
}

/// What a stack's intrinsics resolve against.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// Parameter values over the template's defaults.
    pub parameters: BTreeMap<String, String>,
    /// `Ref` of a resource: a table's or stream's name, a queue's URL…
    pub refs: BTreeMap<String, String>,
    /// `Fn::GetAtt [Id, Attr]`, keyed `Id.Attr`.
    pub attributes: BTreeMap<String, String>,
    pub account_id: String,
    pub region: String,
    pub partition: String,
    pub stack_name: String,
}

/// A resolved value: a string, or `AWS::NoValue` (the variable is left out).
type Resolved = Option<String>;

struct Resolver<'a> {
    stack: &'a StackManifest,
    ctx: &'a Context,
}

impl StackManifest {
    /// The function's environment with every intrinsic resolved; a variable whose value is
    /// `AWS::NoValue` is left out, as CloudFormation leaves it out.
    pub fn environment(
        &self,
        function: &FunctionManifest,
        ctx: &Context,
    ) -> Result<BTreeMap<String, String>, Error> {
        let r = Resolver { stack: self, ctx };
        let mut out = BTreeMap::new();
        for (k, v) in &function.environment {
            let resolved = r
                .value(v)
                .map_err(|e| Error::Template(format!("{}: {k}: {e}", function.binary)))?;
            if let Some(v) = resolved {
                out.insert(k.clone(), v);
            }
        }
        Ok(out)
    }

    /// Whether the named condition holds (a function or schedule under a false condition
    /// does not exist).
    pub fn condition(&self, name: &str, ctx: &Context) -> Result<bool, Error> {
        Resolver { stack: self, ctx }
            .condition(name)
            .map_err(Error::Template)
    }
}

impl Resolver<'_> {
    fn value(&self, v: &Value) -> Result<Resolved, String> {
        match v {
            Value::String(s) => Ok(Some(s.clone())),
            Value::Number(n) => Ok(Some(n.to_string())),
            Value::Bool(b) => Ok(Some(b.to_string())),
            Value::Object(o) if o.len() == 1 => {
                let (f, arg) = o.iter().next().expect("one entry");
                self.intrinsic(f, arg)
            }
            other => Err(format!("not a scalar or an intrinsic: {other}")),
        }
    }

    fn string(&self, v: &Value) -> Result<String, String> {
        self.value(v)?
            .ok_or_else(|| "AWS::NoValue where a value is needed".to_owned())
    }

    fn intrinsic(&self, f: &str, arg: &Value) -> Result<Resolved, String> {
        let list = || arg.as_array().ok_or_else(|| format!("{f}: not a list"));
        match f {
            "Ref" => self.reference(arg.as_str().ok_or("Ref: not a name")?),
            "Fn::Sub" => self.sub(arg).map(Some),
            "Fn::GetAtt" => {
                let l = list()?;
                let (id, attr) = match (l.first(), l.get(1)) {
                    (Some(Value::String(id)), Some(Value::String(a))) => (id, a),
                    _ => return Err("Fn::GetAtt: [LogicalId, Attribute]".into()),
                };
                self.attribute(id, attr).map(Some)
            }
            "Fn::If" => {
                let l = list()?;
                let name = l
                    .first()
                    .and_then(Value::as_str)
                    .ok_or("Fn::If: no condition")?;
                let branch = if self.condition(name)? { 1 } else { 2 };
                self.value(l.get(branch).ok_or("Fn::If: two branches")?)
            }
            "Fn::Join" => {
                let l = list()?;
                let sep = l
                    .first()
                    .and_then(Value::as_str)
                    .ok_or("Fn::Join: delimiter")?;
                let parts = l.get(1).and_then(Value::as_array).ok_or("Fn::Join: list")?;
                let parts: Result<Vec<_>, _> = parts.iter().map(|p| self.string(p)).collect();
                Ok(Some(parts?.join(sep)))
            }
            other => Err(format!("{other} is not supported here")),
        }
    }

    fn reference(&self, name: &str) -> Result<Resolved, String> {
        let ctx = self.ctx;
        let pseudo = match name {
            "AWS::NoValue" => return Ok(None),
            "AWS::AccountId" => Some(&ctx.account_id),
            "AWS::Region" => Some(&ctx.region),
            "AWS::Partition" => Some(&ctx.partition),
            "AWS::StackName" => Some(&ctx.stack_name),
            _ => None,
        };
        if let Some(v) = pseudo {
            return Ok(Some(v.clone()));
        }
        if let Some(v) = ctx.parameters.get(name) {
            return Ok(Some(v.clone()));
        }
        if let Some(default) = self.stack.parameters.get(name) {
            return match default {
                Value::Null => Err(format!("parameter {name} has no default and no value")),
                v => self.value(v),
            };
        }
        ctx.refs
            .get(name)
            .cloned()
            .map(Some)
            .ok_or_else(|| format!("Ref {name}: no such parameter or resource here"))
    }

    fn attribute(&self, id: &str, attr: &str) -> Result<String, String> {
        self.ctx
            .attributes
            .get(&format!("{id}.{attr}"))
            .cloned()
            .ok_or_else(|| format!("Fn::GetAtt {id}.{attr}: unknown here"))
    }

    /// `Fn::Sub`: a template string, or `[template, {variables}]`; `${!x}` is a literal `${x}`.
    fn sub(&self, arg: &Value) -> Result<String, String> {
        let (template, vars) = match arg {
            Value::String(s) => (s.as_str(), None),
            Value::Array(l) => (
                l.first()
                    .and_then(Value::as_str)
                    .ok_or("Fn::Sub: template")?,
                l.get(1).and_then(Value::as_object),
            ),
            _ => return Err("Fn::Sub: a string or a list".into()),
        };
        let mut out = String::new();
        let mut rest = template;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let end = after.find('}').ok_or("Fn::Sub: unclosed ${")?;
            let name = &after[..end];
            if let Some(literal) = name.strip_prefix('!') {
                out.push_str("${");
                out.push_str(literal);
                out.push('}');
            } else if let Some(v) = vars.and_then(|m| m.get(name)) {
                out.push_str(&self.string(v)?);
            } else if let Some((id, attr)) = name.split_once('.') {
                out.push_str(&self.attribute(id, attr)?);
            } else {
                out.push_str(&self.reference(name)?.unwrap_or_default());
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    fn condition(&self, name: &str) -> Result<bool, String> {
        let c = self
            .stack
            .conditions
            .get(name)
            .ok_or_else(|| format!("no condition {name}"))?;
        self.truth(c)
    }

    fn truth(&self, v: &Value) -> Result<bool, String> {
        let o = v
            .as_object()
            .filter(|o| o.len() == 1)
            .ok_or("not a condition")?;
        let (f, arg) = o.iter().next().expect("one entry");
        let list = || arg.as_array().ok_or_else(|| format!("{f}: not a list"));
        match f.as_str() {
            "Condition" => self.condition(arg.as_str().ok_or("Condition: a name")?),
            "Fn::Equals" => {
                let l = list()?;
                match (l.first(), l.get(1)) {
                    (Some(a), Some(b)) => Ok(self.value(a)? == self.value(b)?),
                    _ => Err("Fn::Equals: two values".into()),
                }
            }
            "Fn::Not" => Ok(!self.truth(list()?.first().ok_or("Fn::Not: one condition")?)?),
            "Fn::And" => list()?
                .iter()
                .try_fold(true, |acc, c| Ok(acc && self.truth(c)?)),
            "Fn::Or" => list()?
                .iter()
                .try_fold(false, |acc, c| Ok(acc || self.truth(c)?)),
            other => Err(format!("{other} is not a condition function")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stack() -> StackManifest {
        serde_json::from_value(json!({
            "parameters": {"StageName": null, "Mode": "full", "Accounts": "", "Hours": 24},
            "conditions": {
                "IsFull": {"Fn::Equals": [{"Ref": "Mode"}, "full"]},
                "OwnAccount": {"Fn::Equals": [{"Ref": "Accounts"}, ""]},
                "Both": {"Fn::And": [{"Condition": "IsFull"}, {"Fn::Not": [{"Condition": "OwnAccount"}]}]}
            },
            "functions": [{
                "logicalId": "AFunction", "binary": "a", "condition": null, "timeout": 30,
                "memory": 256, "schedules": [], "mappings": [],
                "environment": {
                    "TABLE": {"Ref": "UsageTable"},
                    "NAME": {"Fn::Sub": "awsmp-${StageName}-x-${!Literal}-${AWS::Region}"},
                    "ACCOUNTS": {"Fn::If": ["OwnAccount", {"Ref": "AWS::AccountId"}, {"Ref": "Accounts"}]},
                    "QUEUE_ONLY_IN_FULL": {"Fn::If": ["Both", "yes", {"Ref": "AWS::NoValue"}]},
                    "HOURS": {"Ref": "Hours"},
                    "ARN": {"Fn::Sub": ["${T}/index", {"T": {"Fn::GetAtt": ["UsageTable", "Arn"]}}]}
                }
            }]
        }))
        .unwrap()
    }

    fn ctx() -> Context {
        Context {
            parameters: BTreeMap::from([("StageName".into(), "local".into())]),
            refs: BTreeMap::from([("UsageTable".into(), "awsmp-usage".into())]),
            attributes: BTreeMap::from([("UsageTable.Arn".into(), "arn:t".into())]),
            account_id: "123456789012".into(),
            region: "us-east-1".into(),
            partition: "aws".into(),
            stack_name: "s".into(),
        }
    }

    #[test]
    fn every_intrinsic_resolves_against_the_context() {
        let s = stack();
        let env = s.environment(&s.functions[0], &ctx()).unwrap();
        assert_eq!(env["TABLE"], "awsmp-usage");
        assert_eq!(env["NAME"], "awsmp-local-x-${Literal}-us-east-1");
        assert_eq!(env["ACCOUNTS"], "123456789012");
        assert_eq!(env["HOURS"], "24");
        assert_eq!(env["ARN"], "arn:t/index");
        // `Both` is false (own account): AWS::NoValue leaves the variable out.
        assert!(!env.contains_key("QUEUE_ONLY_IN_FULL"));
        let mut c = ctx();
        c.parameters
            .insert("Accounts".into(), "111122223333".into());
        let env = s.environment(&s.functions[0], &c).unwrap();
        assert_eq!(env["ACCOUNTS"], "111122223333");
        assert_eq!(env["QUEUE_ONLY_IN_FULL"], "yes");
    }

    #[test]
    fn a_parameter_without_default_or_value_is_named() {
        let s = stack();
        let mut c = ctx();
        c.parameters.clear();
        let err = s.environment(&s.functions[0], &c).unwrap_err().to_string();
        assert!(err.contains("parameter StageName has no default"), "{err}");
    }

    #[test]
    fn the_committed_manifest_resolves_for_a_complete_context() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../infra/functions.json");
        let m = Manifest::load(&path).unwrap();
        assert_eq!(
            m.stacks.values().map(|s| s.functions.len()).sum::<usize>(),
            11
        );
        let (_, _, ingest) = m.function("meter-ingest").unwrap();
        assert!(ingest.environment.contains_key("AWSMP_ALLOWED_ACCOUNTS"));
    }
}
