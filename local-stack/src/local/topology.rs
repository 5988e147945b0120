//! A seller's shape on the local stack: one events stack and, for each product in each
//! region, the ingest and main stacks' resources (docs/local-stack.md, "Many products, many
//! regions"; the stacks are those of docs/deploy.md).
//!
//! `awsmp-local up --products N --regions us-east-1,eu-west-1` starts one set of emulators and
//! one Marketplace simulator per region (dynalite and kinesalite ignore the region of a
//! request's signing scope, so one process per region is what lets two regions hold the same
//! table and stream names), creates every product's resources in every region under the names
//! the templates give them (`awsmp-<stage>-<product>-…`, the events stack's `awsmp-<stage>-…`),
//! writes one env file per product and region and `topology.json`, which `tick` and `run` read
//! to drive every site.

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

use super::resources::Resources;
use super::{LOCAL_ACCOUNT, LOCAL_REGION, LocalEnv, Paths, State};

/// The stage name the local stack deploys a multi-product, multi-region topology as
/// (`StageName` of docs/deploy.md).
pub const LOCAL_STAGE: &str = "local";
/// The events stack's region: AWS Marketplace delivers its events to EventBridge in us-east-1
/// (<https://docs.aws.amazon.com/marketplace/latest/userguide/saas-notification.html>).
pub const EVENTS_REGION: &str = LOCAL_REGION;
/// Licenses of each demo product after the first (the first keeps the demo catalog's 200).
pub const EXTRA_PRODUCT_LICENSES: usize = 50;
/// Products `up --products` accepts: enough for any local scenario, few enough to start fast.
pub const MAX_PRODUCTS: usize = 8;
/// Env variable: the events region's DynamoDB endpoint, for a site in another region (its
/// subscribers table is there: in AWS the region of the client says so, `AWSMP_EVENTS_REGION`).
pub const EVENTS_DYNAMODB_ENDPOINT: &str = "AWSMP_LOCAL_EVENTS_ENDPOINT_URL_DYNAMODB";

/// What `up` was asked to hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    /// How many products (the catalog's first N).
    pub products: usize,
    /// The metering regions; the first is the events region.
    pub regions: Vec<String>,
}

impl Default for Shape {
    fn default() -> Self {
        Self {
            products: 1,
            regions: vec![LOCAL_REGION.into()],
        }
    }
}

impl Shape {
    /// From `--products` and `--regions`: the events region first, no region twice, names
    /// shaped like regions.
    pub fn new(products: usize, regions: &[String]) -> Result<Self> {
        if products == 0 || products > MAX_PRODUCTS {
            bail!("--products must be 1 to {MAX_PRODUCTS}, not {products}");
        }
        let mut out: Vec<String> = vec![EVENTS_REGION.into()];
        for r in regions {
            if !is_region_name(r) {
                bail!("{r:?} is not a region name (e.g. eu-west-1)");
            }
            if !out.contains(r) {
                out.push(r.clone());
            }
        }
        if !regions.is_empty() && !regions.iter().any(|r| r == EVENTS_REGION) {
            bail!(
                "--regions must include {EVENTS_REGION}: the events stack lives there, where \
                 AWS Marketplace delivers its events"
            );
        }
        Ok(Self {
            products,
            regions: out,
        })
    }

    /// Today's single product in a single region, with the unprefixed names.
    pub fn is_single(&self) -> bool {
        self.products == 1 && self.regions.len() == 1
    }
}

fn is_region_name(r: &str) -> bool {
    let parts: Vec<&str> = r.split('-').collect();
    parts.len() >= 3
        && parts.iter().all(|p| !p.is_empty())
        && parts[..parts.len() - 1]
            .iter()
            .all(|p| p.chars().all(|c| c.is_ascii_lowercase()))
        && parts[parts.len() - 1].chars().all(|c| c.is_ascii_digit())
}

/// One product in one region: its ingest and main stacks' resources and its env file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Site {
    /// The product.
    pub product_code: String,
    /// The region.
    pub region: String,
    /// Its env file (the default site's is `.awsmp-local/env`).
    pub env_file: PathBuf,
    /// Checkpoints of its usage stream's event source mapping.
    pub checkpoints: PathBuf,
    /// Whether this site's runner also plays the events stack (subscription queue and Lambda,
    /// deprovision-cleanup): exactly one site, the default one, in the events region.
    pub events: bool,
}

impl Site {
    /// `product/region`, as reports name it.
    pub fn label(&self) -> String {
        format!("{}/{}", self.product_code, self.region)
    }
}

/// `topology.json`: every site of the stack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Topology {
    /// The stage the names are built with; `None`: the unprefixed single-site names.
    pub stage: Option<String>,
    /// The events stack's region.
    pub events_region: String,
    /// The sites, the default one first.
    pub sites: Vec<Site>,
}

impl Topology {
    /// The topology of a running stack (`None` before `up`, or for a stack `up` wrote none for).
    pub fn load(paths: &Paths) -> Result<Option<Self>> {
        match std::fs::read_to_string(topology_file(paths)) {
            Ok(s) => Ok(Some(
                serde_json::from_str(&s).context("reading topology.json")?,
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether there is more than the default site.
    pub fn is_multi(&self) -> bool {
        self.sites.len() > 1
    }

    /// The site of `product/region`.
    pub fn site(&self, label: &str) -> Result<&Site> {
        self.sites
            .iter()
            .find(|s| s.label() == label)
            .with_context(|| {
                let known: Vec<String> = self.sites.iter().map(Site::label).collect();
                format!("no site {label:?}; the stack has {}", known.join(", "))
            })
    }

    /// The shape this topology was planned from.
    pub fn shape(&self) -> Result<Shape> {
        let mut products: Vec<&String> = self.sites.iter().map(|s| &s.product_code).collect();
        products.sort();
        products.dedup();
        Shape::new(products.len(), &self.regions())
    }

    /// The distinct regions, the events region first.
    pub fn regions(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for s in &self.sites {
            if !out.contains(&s.region) {
                out.push(s.region.clone());
            }
        }
        out
    }
}

/// `.awsmp-local/topology.json`.
pub fn topology_file(paths: &Paths) -> PathBuf {
    paths.root.join("topology.json")
}

/// The directory of the per-site env files and checkpoints.
pub fn sites_dir(paths: &Paths) -> PathBuf {
    paths.root.join("sites")
}

/// The name `local_name` (an `infra/resources.json` name, `awsmp-…`) gets in `stack` for
/// `product` at `stage`, as `infra/cfn/base.py`'s `physical_name` builds it; `None` keeps it.
pub fn physical_name(local_name: &str, stack: &str, stage: Option<&str>, product: &str) -> String {
    let Some(stage) = stage else {
        return local_name.to_owned();
    };
    let rest = local_name.strip_prefix("awsmp").unwrap_or(local_name);
    if stack == "events" {
        format!("awsmp-{stage}{rest}")
    } else {
        format!("awsmp-{stage}-{product}{rest}")
    }
}

/// The service's name in the state file: the bare name in the events region, `name@region`
/// elsewhere.
pub fn service_name(service: &str, region: &str) -> String {
    if region == EVENTS_REGION {
        service.to_owned()
    } else {
        format!("{service}@{region}")
    }
}

/// The catalog's first `n` product codes.
pub fn product_codes(catalog: &Path, n: usize) -> Result<Vec<String>> {
    let v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(catalog)
            .with_context(|| format!("reading {}", catalog.display()))?,
    )
    .with_context(|| format!("parsing {}", catalog.display()))?;
    let codes: Vec<String> = v["products"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["productCode"].as_str().map(str::to_owned))
        .take(n)
        .collect();
    if codes.len() < n {
        bail!(
            "--products {n}, but {} has {} products",
            catalog.display(),
            codes.len()
        );
    }
    Ok(codes)
}

/// The demo product code `k` (0 is [`super::DEMO_PRODUCT_CODE`]).
pub fn demo_product_code(k: usize) -> String {
    format!("awsmpdemo0product0code{:04}", k + 1)
}

/// License `i` of demo product `k` ≥ 1 (product 0's are [`super::demo_license_arn`]).
pub fn demo_product_license_arn(k: usize, i: usize) -> String {
    format!(
        "arn:aws:license-manager::{LOCAL_ACCOUNT}:license:l-{:032x}",
        0xb0b0_0000_u64 + ((k as u64) << 12) + i as u64
    )
}

/// The buyer of license `i` of demo product `k` ≥ 1.
pub fn demo_product_account(k: usize, i: usize) -> String {
    format!(
        "{:012}",
        220_000_000_000_u64 + (k as u64) * 1_000 + i as u64
    )
}

/// The demo catalog with `n` products: the first is [`super::demo_catalog`]'s, each other one
/// has the same dimensions and [`EXTRA_PRODUCT_LICENSES`] active licenses of its own.
pub fn demo_catalog(n: usize) -> serde_json::Value {
    let mut catalog = super::demo_catalog();
    let Some(products) = catalog["products"].as_array_mut() else {
        return catalog;
    };
    for k in 1..n {
        let licenses: Vec<serde_json::Value> = (0..EXTRA_PRODUCT_LICENSES)
            .map(|i| {
                serde_json::json!({"licenseArn": demo_product_license_arn(k, i),
                    "customerAWSAccountId": demo_product_account(k, i), "status": "active"})
            })
            .collect();
        products.push(serde_json::json!({
            "productCode": demo_product_code(k),
            "dimensions": super::DEMO_DIMENSIONS,
            "licenses": licenses,
        }));
    }
    catalog
}

/// The sites of `shape` over `products`, the default one (first product, events region) first.
pub fn plan(paths: &Paths, shape: &Shape, products: &[String]) -> Topology {
    let stage = (!shape.is_single()).then(|| LOCAL_STAGE.to_owned());
    let mut sites = Vec::new();
    for region in &shape.regions {
        for product in products {
            let first = sites.is_empty();
            let (env_file, checkpoints) = if first {
                (paths.env_file(), paths.esm_checkpoints())
            } else {
                let dir = sites_dir(paths).join(product);
                (
                    dir.join(format!("{region}.env")),
                    dir.join(format!("{region}.esm-checkpoints.json")),
                )
            };
            sites.push(Site {
                product_code: product.clone(),
                region: region.clone(),
                env_file,
                checkpoints,
                events: first,
            });
        }
    }
    Topology {
        stage,
        events_region: EVENTS_REGION.into(),
        sites,
    }
}

/// Create every site's resources and write its env file and `topology.json`. `base` is the
/// env every site shares (settings such as the usage table TTL); the default site's env is
/// returned (the caller writes it to `.awsmp-local/env`).
pub async fn provision(
    paths: &Paths,
    state: &State,
    topology: &Topology,
    base: &LocalEnv,
) -> Result<LocalEnv> {
    let resources = Resources::load()?;
    let stage = topology.stage.as_deref();
    let events_env = LocalEnv::for_region(state, &topology.events_region)?;
    let events_ddb = events_env.get("AWS_ENDPOINT_URL_DYNAMODB")?.to_owned();
    let mut default_env = None;
    for site in &topology.sites {
        let mut env = LocalEnv::for_region(state, &site.region)?;
        for (k, v) in &base.vars {
            env.vars.entry(k.clone()).or_insert_with(|| v.clone());
        }
        env.vars
            .insert("AWSMP_PRODUCT_CODE".into(), site.product_code.clone());
        if stage.is_some() {
            env.vars
                .insert("AWSMP_EVENTS_REGION".into(), topology.events_region.clone());
            env.vars.insert(
                "AWSMP_METRICS_NAMESPACE".into(),
                format!("awsmp/{LOCAL_STAGE}/{}", site.product_code),
            );
        }
        if site.region != topology.events_region {
            env.vars
                .insert(EVENTS_DYNAMODB_ENDPOINT.into(), events_ddb.clone());
        }
        create_site(&resources, site, stage, &mut env, &events_env).await?;
        if site.events {
            default_env = Some(env.clone());
        } else {
            super::write_if_changed(&site.env_file, &env.render())?;
        }
    }
    super::write_if_changed(
        &topology_file(paths),
        &serde_json::to_string_pretty(topology)?,
    )?;
    default_env.context("the topology has no events site")
}

/// One site's resources: its product's ingest and main stacks in its region; the events
/// stack's in the events region, once, named in every site's env (the pipeline reads the
/// subscribers table there). Only the events site's env names the subscription queue, so
/// only its runner plays the events stack's Lambdas.
async fn create_site(
    resources: &Resources,
    site: &Site,
    stage: Option<&str>,
    env: &mut LocalEnv,
    events_env: &LocalEnv,
) -> Result<()> {
    let product = site.product_code.as_str();
    let (ddb, events_ddb) = (env.dynamodb().await?, events_env.dynamodb().await?);
    let (sqs, events_sqs) = (env.sqs().await?, events_env.sqs().await?);
    for t in &resources.tables {
        let mut t = t.clone();
        t.name = physical_name(&t.name, &t.stack, stage, product);
        let client = if t.stack == "events" {
            &events_ddb
        } else {
            &ddb
        };
        if t.stack != "events" || site.events {
            super::resources::ensure_table(client, &t).await?;
        }
        env.vars.insert(t.env.clone(), t.name.clone());
    }
    for q in &resources.queues {
        let is_events = q.stack == "events";
        if is_events && !site.events {
            continue;
        }
        let mut q = q.clone();
        q.name = physical_name(&q.name, &q.stack, stage, product);
        if let Some(d) = q.dlq.as_mut() {
            d.name = physical_name(&d.name, &q.stack, stage, product);
        }
        let client = if is_events { &events_sqs } else { &sqs };
        for (k, url) in super::resources::ensure_queue(client, &q).await? {
            env.vars.insert(k, url);
        }
    }
    let kinesis = env.kinesis().await?;
    for s in &resources.streams {
        let mut s = s.clone();
        s.name = physical_name(&s.name, &s.stack, stage, product);
        super::resources::ensure_stream(&kinesis, &s).await?;
        env.vars.insert(s.env.clone(), s.name.clone());
    }
    let s3 = env.s3().await?;
    for b in &resources.buckets {
        let mut b = b.clone();
        // In AWS CloudFormation names the bucket (`infra/cfn/ingest_stack.py` gives none, S3
        // names being global); locally each region's moto is a namespace of its own.
        b.name = physical_name(&b.name, &b.stack, stage, product);
        super::resources::ensure_bucket(&s3, &b).await?;
        env.vars.insert(b.env.clone(), b.name.clone());
    }
    Ok(())
}

/// The shape asked for, else the running stack's, else one product in one region. Services
/// of a region the shape no longer has are stopped.
pub(super) fn resolve_shape(
    paths: &Paths,
    asked: Option<&Shape>,
    state: &mut State,
) -> Result<Shape> {
    let shape = match (asked, Topology::load(paths)?) {
        (Some(s), _) => s.clone(),
        (None, Some(t)) => t.shape()?,
        (None, None) => Shape::default(),
    };
    let mut kept = Vec::new();
    for s in std::mem::take(&mut state.services) {
        let region = s.name.split_once('@').map(|(_, r)| r);
        if region.is_some_and(|r| !shape.regions.iter().any(|x| x == r)) {
            super::procs::stop(&s)?;
        } else {
            kept.push(s);
        }
    }
    state.services = kept;
    Ok(shape)
}

/// `topology.json` and the per-site env files: they describe a running stack only.
pub(super) fn remove_topology(paths: &Paths) -> Result<()> {
    if let Some(t) = Topology::load(paths)? {
        for site in t.sites.iter().filter(|s| !s.events) {
            std::fs::remove_file(&site.env_file).ok();
        }
    }
    std::fs::remove_file(topology_file(paths)).ok();
    Ok(())
}

/// Whether `catalog` is one `up` wrote (the demo catalog, or one of N products).
pub(super) fn is_demo_catalog(paths: &Paths, catalog: &Path) -> bool {
    let name = catalog.file_name().and_then(|n| n.to_str()).unwrap_or("");
    catalog == paths.default_catalog()
        || (catalog.parent() == Some(paths.root.as_path())
            && name.starts_with("catalog-")
            && name.ends_with("-products.json"))
}

/// For `shape` of several products, the demo catalog of that many, written to
/// `catalog-N-products.json`; `None` (the catalog stays as it is) for one product, or when the
/// running stack's catalog is not one `up` wrote.
pub(super) fn grown_demo_catalog(
    paths: &Paths,
    running: Option<&Path>,
    shape: &Shape,
) -> Result<Option<PathBuf>> {
    let products = shape.products;
    if products < 2 || running.is_some_and(|c| !is_demo_catalog(paths, c)) {
        return Ok(None);
    }
    let path = paths.root.join(format!("catalog-{products}-products.json"));
    let demo = demo_catalog(products);
    super::write_if_changed(&path, &serde_json::to_string_pretty(&demo)?)?;
    Ok(Some(path))
}

/// A DynamoDB client for the events region's emulator, when `env` is a site outside it.
pub async fn events_dynamodb(env: &LocalEnv) -> Result<Option<aws_sdk_dynamodb::Client>> {
    let Some(endpoint) = env.vars.get(EVENTS_DYNAMODB_ENDPOINT) else {
        return Ok(None);
    };
    let mut events = env.clone();
    let region = env
        .vars
        .get("AWSMP_EVENTS_REGION")
        .cloned()
        .unwrap_or_else(|| EVENTS_REGION.into());
    events
        .vars
        .insert("AWS_ENDPOINT_URL_DYNAMODB".into(), endpoint.clone());
    events.vars.insert("AWS_REGION".into(), region);
    events.dynamodb().await.map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths() -> Paths {
        Paths {
            root: PathBuf::from("/tmp/stack"),
            tools: PathBuf::from("/tmp/tools"),
        }
    }

    #[test]
    fn names_follow_the_templates_prefixes() {
        let stage = Some("local");
        assert_eq!(
            physical_name("awsmp-usage", "main", stage, "prodb"),
            "awsmp-local-prodb-usage"
        );
        assert_eq!(
            physical_name("awsmp-usage-events", "ingest", stage, "prodb"),
            "awsmp-local-prodb-usage-events"
        );
        assert_eq!(
            physical_name("awsmp-subscribers", "events", stage, "prodb"),
            "awsmp-local-subscribers"
        );
        assert_eq!(
            physical_name("awsmp-usage", "main", None, "prodb"),
            "awsmp-usage"
        );
    }

    #[test]
    fn the_default_shape_is_todays_single_site() {
        let shape = Shape::new(1, &[]).unwrap();
        assert!(shape.is_single());
        assert_eq!(shape, Shape::default());
        let t = plan(&paths(), &shape, &["p1".into()]);
        assert_eq!(t.stage, None);
        assert_eq!(t.sites.len(), 1);
        assert_eq!(t.sites[0].env_file, paths().env_file());
        assert!(t.sites[0].events);
    }

    #[test]
    fn a_multi_shape_has_one_site_per_product_and_region_and_one_events_site() {
        let shape = Shape::new(2, &["eu-west-1".into(), "us-east-1".into()]).unwrap();
        assert_eq!(shape.regions, ["us-east-1", "eu-west-1"]);
        let t = plan(&paths(), &shape, &["p1".into(), "p2".into()]);
        assert_eq!(t.stage.as_deref(), Some(LOCAL_STAGE));
        let labels: Vec<String> = t.sites.iter().map(Site::label).collect();
        assert_eq!(
            labels,
            [
                "p1/us-east-1",
                "p2/us-east-1",
                "p1/eu-west-1",
                "p2/eu-west-1"
            ]
        );
        assert_eq!(t.sites.iter().filter(|s| s.events).count(), 1);
        assert_eq!(t.sites[0].env_file, paths().env_file());
        assert_eq!(
            t.sites[3].env_file,
            PathBuf::from("/tmp/stack/sites/p2/eu-west-1.env")
        );
        assert_eq!(t.regions(), ["us-east-1", "eu-west-1"]);
        assert!(t.site("p2/eu-west-1").is_ok());
        assert!(t.site("p3/eu-west-1").is_err());
    }

    #[test]
    fn only_the_catalogs_up_writes_are_demo_catalogs() {
        let p = paths();
        assert!(is_demo_catalog(&p, &p.default_catalog()));
        assert!(is_demo_catalog(&p, &p.root.join("catalog-3-products.json")));
        assert!(!is_demo_catalog(
            &p,
            Path::new("/tmp/mine/catalog-3-products.json")
        ));
        assert!(!is_demo_catalog(
            &p,
            &p.root.join("loadtest/catalog-1.json")
        ));
    }

    #[test]
    fn bad_shapes_are_refused() {
        assert!(Shape::new(0, &[]).is_err());
        assert!(Shape::new(MAX_PRODUCTS + 1, &[]).is_err());
        assert!(
            Shape::new(1, &["eu-west-1".into()]).is_err(),
            "no us-east-1"
        );
        assert!(Shape::new(1, &["us-east-1".into(), "Europe".into()]).is_err());
        assert!(Shape::new(1, &["us-east-1".into(), "eu-west-x".into()]).is_err());
        assert!(Shape::new(2, &[]).unwrap().regions == ["us-east-1"]);
    }

    #[test]
    fn the_demo_catalog_grows_products_with_their_own_licenses() {
        let c = demo_catalog(3);
        let products = c["products"].as_array().unwrap();
        assert_eq!(products.len(), 3);
        assert_eq!(products[0], super::super::demo_catalog()["products"][0]);
        assert_eq!(products[2]["productCode"], demo_product_code(2));
        let mut arns = std::collections::BTreeSet::new();
        for p in products {
            assert!(awsmp_contract::ids::is_valid_product_code(
                p["productCode"].as_str().unwrap()
            ));
            for l in p["licenses"].as_array().unwrap() {
                let arn = l["licenseArn"].as_str().unwrap();
                assert!(awsmp_contract::ids::is_valid_license_arn(arn), "{arn}");
                assert!(arns.insert(arn.to_owned()), "{arn} twice");
            }
        }
        assert_eq!(arns.len(), 201 + 2 * EXTRA_PRODUCT_LICENSES);
        assert!(awsmp_contract::ids::is_valid_account_id(
            &demo_product_account(7, 49)
        ));
    }
}
