//! The one list of awsmp's Lambdas, `infra/stages.json` (docs/adding-a-lambda.md), as data:
//! per stage its binary and crate, stack, memory, timeout, reserved concurrency, trigger
//! (schedules with their constant inputs, SQS or Kinesis mappings, async invoke, API), its
//! environment variables and the clock it reads on the local stack.
//!
//! `infra/generate.py` builds the templates from the same file; here the local runner takes
//! from it which functions to host and on which clock, and the simulation its stages and their
//! timeouts. Grants and alarms are the generator's business and are not read here.

use serde::Deserialize;
use serde_json::Value;
use std::sync::OnceLock;

/// The list, compiled in.
pub const STAGES_JSON: &str = include_str!("../../infra/stages.json");

/// The stack a stage is deployed in (docs/deploy.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Stack {
    /// Per region and product: the usage stream and its consumers.
    Ingest,
    /// Per region and product: the metering pipeline and registration.
    Main,
    /// us-east-1, shared by a stage's products: the subscription lifecycle.
    Events,
}

/// The clock a stage's binary reads when the local runner hosts it (docs/local-stack.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StageClock {
    /// The run's virtual clock (libfaketime): the scheduled stages and those their queues feed.
    Virtual,
    /// The wall clock, beside the producers.
    Wall,
}

/// What invokes a stage.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Trigger {
    /// EventBridge schedule rules.
    Schedule(Vec<Schedule>),
    /// SQS event source mappings.
    Sqs(Vec<SqsMapping>),
    /// A Kinesis event source mapping.
    Kinesis(KinesisMapping),
    /// Asynchronous invokes by other accounts' code.
    Invoke(Value),
    /// An API Gateway method.
    Api(Api),
}

/// One schedule of a stage.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Schedule {
    /// The rule's name (stages naming one rule share it).
    pub rule: String,
    /// Its EventBridge schedule expression.
    pub rate: String,
    /// Its constant inputs, one target each; none: one target with the scheduled event.
    #[serde(default)]
    pub inputs: Vec<Value>,
}

/// An SQS event source mapping.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SqsMapping {
    /// The queue's logical id (`infra/resources.json`).
    pub queue: String,
    /// Messages per invocation.
    pub batch_size: u32,
    /// Concurrent invocations the mapping makes.
    pub maximum_concurrency: u32,
}

/// A Kinesis event source mapping.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KinesisMapping {
    /// The stream's logical id.
    pub stream: String,
    /// The queue a discarded batch's metadata goes to.
    pub on_failure: String,
}

/// An API Gateway trigger.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Api {
    /// The resource path.
    pub path: String,
    /// Its HTTP methods.
    pub methods: Vec<String>,
}

/// One Lambda of the list.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stage {
    /// The binary's name, also the function's (kebab-case).
    pub name: String,
    /// The crate directory its binary is in (`<crate>/src/bin/<name>.rs`).
    #[serde(rename = "crate")]
    pub crate_dir: String,
    /// Its stack.
    pub stack: Stack,
    /// What it does.
    pub description: String,
    /// Memory in MB.
    pub memory: u32,
    /// Lambda's timeout in seconds.
    pub timeout: u32,
    /// Reserved concurrent executions, if any.
    #[serde(default)]
    pub reserved_concurrency: Option<u32>,
    /// The template condition it exists under (`IsFull`: full deployment mode only).
    #[serde(default)]
    pub condition: Option<String>,
    /// The clock it reads under the local runner.
    pub clock: StageClock,
    /// What invokes it.
    pub trigger: Trigger,
    /// Its environment: variable names and names of `environmentGroups`.
    environment: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct List {
    environment_groups: std::collections::BTreeMap<String, Vec<String>>,
    stages: Vec<Stage>,
}

fn list() -> &'static List {
    static LIST: OnceLock<List> = OnceLock::new();
    // The file is compiled in and parsed by this crate's tests: a malformed list fails them.
    LIST.get_or_init(|| serde_json::from_str(STAGES_JSON).expect("infra/stages.json parses"))
}

/// Every stage, in the list's order.
pub fn all() -> &'static [Stage] {
    &list().stages
}

/// The stage named `name`.
pub fn get(name: &str) -> Option<&'static Stage> {
    all().iter().find(|s| s.name == name)
}

/// The stage named `name`; panics when the list has none (a name the caller spells as a
/// literal, which the list's tests keep in step).
pub fn named(name: &str) -> &'static Stage {
    get(name).unwrap_or_else(|| panic!("{name} is no stage of infra/stages.json"))
}

impl Stage {
    /// The environment variables its template sets, in order (groups expanded).
    pub fn environment(&self) -> Vec<&str> {
        let groups = &list().environment_groups;
        self.environment
            .iter()
            .flat_map(|e| match groups.get(e) {
                Some(names) => names.iter().map(String::as_str).collect(),
                None => vec![e.as_str()],
            })
            .collect()
    }

    /// Lambda's timeout.
    pub fn timeout(&self) -> chrono::Duration {
        chrono::Duration::seconds(i64::from(self.timeout))
    }

    /// Whether it runs on the run's virtual clock under the local runner.
    pub fn on_virtual_clock(&self) -> bool {
        self.clock == StageClock::Virtual
    }

    /// The constant inputs of its schedules' targets, in order (empty when it has none).
    pub fn schedule_inputs(&self) -> Vec<&Value> {
        match &self.trigger {
            Trigger::Schedule(schedules) => schedules.iter().flat_map(|s| &s.inputs).collect(),
            _ => Vec::new(),
        }
    }

    /// Whether a Kinesis event source mapping feeds it.
    pub fn reads_the_stream(&self) -> bool {
        matches!(self.trigger, Trigger::Kinesis(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::{AGEOUT_SHARDS, MAX_HOUR_OFFSET};
    use std::collections::BTreeSet;
    use std::path::Path;

    fn root() -> &'static Path {
        Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
    }

    #[test]
    fn the_list_parses_and_names_each_stage_once() {
        let names: BTreeSet<&str> = all().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names.len(), all().len());
        assert!(all().len() >= 11, "{names:?}");
    }

    #[test]
    fn every_stage_has_its_binary_and_every_lambda_binary_is_a_stage() {
        let mut crates = BTreeSet::new();
        for s in all() {
            let bin = root()
                .join(&s.crate_dir)
                .join("src/bin")
                .join(format!("{}.rs", s.name));
            assert!(bin.is_file(), "{}: no {}", s.name, bin.display());
            crates.insert(s.crate_dir.as_str());
        }
        // The other way: every binary of a Lambda crate is in the list.
        for c in crates {
            for entry in std::fs::read_dir(root().join(c).join("src/bin")).unwrap() {
                let file = entry.unwrap().file_name().into_string().unwrap();
                let name = file.trim_end_matches(".rs");
                assert!(
                    get(name).is_some(),
                    "{c}/src/bin/{file} is no stage of infra/stages.json"
                );
            }
        }
    }

    #[test]
    fn the_discoverer_is_scheduled_for_every_hour_offset_and_age_out_shard() {
        let inputs = named("discoverer").schedule_inputs();
        let meter: Vec<u64> = inputs
            .iter()
            .filter(|i| i["mode"] == "meter")
            .map(|i| i["hourOffset"].as_u64().unwrap())
            .collect();
        let ageout: Vec<u64> = inputs
            .iter()
            .filter(|i| i["mode"] == "ageout")
            .map(|i| i["shard"].as_u64().unwrap())
            .collect();
        assert_eq!(meter, (1..=u64::from(MAX_HOUR_OFFSET)).collect::<Vec<_>>());
        assert_eq!(ageout, (0..u64::from(AGEOUT_SHARDS)).collect::<Vec<_>>());
        assert!(inputs.iter().any(|i| i["mode"] == "flush-deprovisioning"));
    }

    #[test]
    fn groups_expand_in_place() {
        let env = named("discoverer").environment();
        assert_eq!(env.first(), Some(&"AWSMP_PRODUCT_CODE"));
        assert_eq!(env.last(), Some(&"AWSMP_USAGE_STREAM"));
        assert!(env.contains(&"AWSMP_WORK_QUEUE_URL"));
        assert_eq!(named("stream-heartbeat").environment().len(), 2);
    }
}
