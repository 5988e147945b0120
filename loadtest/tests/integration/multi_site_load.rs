//! A load run over a seller's shape (docs/local-stack.md, "Many products, many regions"): two
//! products in two regions. This test starts a stack of its own (`awsmp-local up --products 2
//! --regions us-east-1,eu-west-1`, in a temporary directory), checks that a plain run refuses
//! it naming `--sites`, then runs `awsmp-loadtest run --sites all`: every site conserves, each
//! region's simulator bills only the licenses of that region's sites (under their product),
//! and the units billed over all sites are the units produced.

use anyhow::{Context, Result, ensure};
use awsmp_local_stack::local::LocalEnv;
use awsmp_local_stack::local::topology::Topology;
use awsmp_local_stack::testing::MultiStack;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Output;

/// A plain load run over the stack (`extra` adds flags).
fn load_run(stack: &MultiStack, extra: &[&str]) -> Result<Output> {
    let mut cmd = stack.cmd("awsmp-loadtest")?;
    cmd.args([
        "run", "--events", "4000", "--rate", "2000", "--groups", "40", "--seed", "5", "--quiet",
    ])
    .args(extra);
    Ok(cmd.output()?)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_default()
}

#[tokio::test]
#[ignore = "starts its own emulators (installed by awsmp-local up); run by scripts/test"]
async fn a_run_spread_over_two_products_in_two_regions_conserves_in_every_site() -> Result<()> {
    let stack = MultiStack::up()?;
    let refused = load_run(&stack, &[])?;
    ensure!(
        !refused.status.success(),
        "a plain run took a multi-site stack"
    );
    ensure!(
        stderr(&refused).contains("--sites all"),
        "the refusal does not name --sites: {}",
        stderr(&refused)
    );

    let out = load_run(&stack, &["--sites", "all", "--json"])?;
    let stdout = String::from_utf8(out.stdout.clone())?;
    let v: Value = serde_json::from_str(stdout.trim())
        .map_err(|e| anyhow::anyhow!("no JSON on stdout ({e}); stderr:\n{}", stderr(&out)))?;
    ensure!(out.status.success(), "run --sites all failed: {v:#}");
    ensure!(v["conserved"] == true, "{v:#}");
    ensure!(
        v["misbilled"].as_array().is_some_and(Vec::is_empty),
        "{v:#}"
    );

    let topology = Topology::load(&stack.paths)?.context("no topology.json")?;
    let sites = v["sites"].as_array().context("sites")?;
    let labels: Vec<String> = topology.sites.iter().map(|s| s.label()).collect();
    let reported: Vec<&str> = sites.iter().filter_map(|s| s["site"].as_str()).collect();
    ensure!(
        reported == labels,
        "sites {reported:?}, topology {labels:?}"
    );

    // license → (product, region) of its site; the shares are disjoint and none is empty.
    let mut home = BTreeMap::new();
    let (mut produced, mut billed) = (0, 0);
    for s in sites {
        let c = &s["report"]["conservation"];
        ensure!(c["conserved"] == true, "{}: {c:#}", s["site"]);
        let funnel = &c["funnel"];
        ensure!(
            u(&funnel["produced"]) > 0,
            "{}: nothing produced",
            s["site"]
        );
        // No faults: every unit produced in a site is billed there.
        ensure!(
            funnel["billed"] == funnel["produced"],
            "{}: {funnel:#}",
            s["site"]
        );
        produced += u(&funnel["produced"]);
        billed += u(&funnel["billed"]);
        let licenses = s["licenses"].as_array().context("licenses")?;
        ensure!(!licenses.is_empty(), "{}: no licenses", s["site"]);
        for l in licenses {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            let at = (text(&s["productCode"]), text(&s["region"]));
            ensure!(home.insert(text(l), at).is_none(), "{l} in two shares");
        }
    }
    ensure!(
        home.len() == 14,
        "40 groups over 3 dimensions: {} licenses",
        home.len()
    );
    ensure!(
        produced == u(&v["produced"]) && billed == u(&v["billed"]),
        "{v:#}"
    );
    ensure!(billed == produced, "billed {billed} of {produced} produced");

    let billed_in_ledgers = ledgers_bill_only_their_sites(&topology, &home).await?;
    ensure!(
        billed_in_ledgers == produced,
        "the ledgers hold {billed_in_ledgers} of {produced} units"
    );
    Ok(())
}

/// Each region's simulator billed only its own sites' licenses, under their product; returns
/// the units all the ledgers hold. `home`: license → (product, region) of its site.
async fn ledgers_bill_only_their_sites(
    topology: &Topology,
    home: &BTreeMap<String, (String, String)>,
) -> Result<u64> {
    let mut billed_in_ledgers = 0;
    let mut regions_seen = BTreeSet::new();
    for site in &topology.sites {
        if !regions_seen.insert(site.region.clone()) {
            continue;
        }
        let env = LocalEnv::read(&site.env_file)?;
        let url = format!("{}/_sim/ledger", env.get("AWSMP_SIM_ADMIN_URL")?);
        let ledger: Value = reqwest::get(&url).await?.error_for_status()?.json().await?;
        for r in ledger["records"].as_array().into_iter().flatten() {
            let (product, region) = home
                .get(r["licenseArn"].as_str().unwrap_or_default())
                .with_context(|| format!("{url}: a record of no share: {r}"))?;
            ensure!(
                *region == site.region && r["productCode"] == product.as_str(),
                "{url} ({}) billed {r} of {product}/{region}",
                site.region
            );
            billed_in_ledgers += u(&r["quantity"]);
        }
    }
    Ok(billed_in_ledgers)
}
