//! The `marketplace-sim` binary: first stdout line, flags, loopback-only, clean SIGTERM exit.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_marketplace-sim");
const L1: &str = "arn:aws:license-manager::123456789012:license:l-11111111111111111111111111111111";

struct Sim {
    child: Child,
    url: String,
}

impl Sim {
    fn start(args: &[&str]) -> Self {
        let mut child = Command::new(BIN)
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn marketplace-sim");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("first line");
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        Self { child, url }
    }

    async fn call(&self, op: &str, body: Value) -> (u16, Value) {
        let resp = reqwest::Client::new()
            .post(&self.url)
            .header("x-amz-target", format!("AWSMPMeteringService.{op}"))
            .header("content-type", "application/x-amz-json-1.1")
            .body(body.to_string())
            .send()
            .await
            .expect("call");
        (resp.status().as_u16(), resp.json().await.expect("JSON"))
    }

    /// SIGTERM, then the exit status.
    fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let killed = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        assert!(killed.success());
        for _ in 0..100 {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        panic!("marketplace-sim did not exit within 5 s of SIGTERM");
    }
}

fn catalog_file() -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        f.path(),
        json!({"windowHours": 24, "requestsPerSecond": 100, "products": [{"productCode": "prod1",
            "dimensions": ["requests"],
            "licenses": [{"licenseArn": L1, "customerAWSAccountId": "111111111111", "status": "active"}]}]})
        .to_string(),
    )
    .unwrap();
    f
}

fn record(hours_ago: i64) -> Value {
    let t = chrono::Utc::now() - chrono::Duration::hours(hours_ago);
    json!({"UsageRecords": [{"Timestamp": t.timestamp(), "Dimension": "requests", "Quantity": 3,
        "CustomerAWSAccountId": "111111111111", "LicenseArn": L1}]})
}

#[tokio::test]
async fn serves_the_catalog_and_exits_cleanly_on_sigterm() {
    let catalog = catalog_file();
    let sim = Sim::start(&[
        "--catalog",
        catalog.path().to_str().unwrap(),
        "--region",
        "eu-west-1",
    ]);
    let (status, body) = sim.call("BatchMeterUsage", record(1)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["Results"][0]["Status"], "Success");
    let ledger: Value = reqwest::get(format!("{}/_sim/ledger", sim.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ledger["region"], "eu-west-1");
    assert_eq!(ledger["records"][0]["quantity"], 3);
    assert!(sim.terminate().success());
}

#[tokio::test]
async fn window_override_disabled_and_start_faults() {
    let catalog = catalog_file();
    let path = catalog.path().to_str().unwrap();

    let sim = Sim::start(&["--catalog", path, "--window-hours", "6"]);
    let (status, body) = sim.call("BatchMeterUsage", record(7)).await;
    assert_eq!(
        (status, body["__type"].as_str()),
        (400, Some("TimestampOutOfBoundsException"))
    );
    assert!(sim.terminate().success());

    let sim = Sim::start(&["--catalog", path, "--disabled"]);
    let (status, body) = sim.call("BatchMeterUsage", record(1)).await;
    assert_eq!(
        (status, body["__type"].as_str()),
        (400, Some("DisabledApiException"))
    );
    assert!(sim.terminate().success());

    let sim = Sim::start(&[
        "--catalog",
        path,
        "--faults",
        r#"{"internalErrorRate":1.0,"seed":3}"#,
    ]);
    let (status, body) = sim.call("BatchMeterUsage", record(1)).await;
    assert_eq!(
        (status, body["__type"].as_str()),
        (500, Some("InternalServiceErrorException"))
    );
    assert!(sim.terminate().success());
}

#[test]
fn refuses_non_loopback_and_bad_input() {
    let bad_catalog = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        bad_catalog.path(),
        r#"{"products":[{"productCode":"Bad Code","dimensions":["d"]}]}"#,
    )
    .unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["--listen", "0.0.0.0:0"],
        vec!["--catalog", bad_catalog.path().to_str().unwrap()],
        vec!["--catalog", "/nonexistent/catalog.json"],
        vec!["--faults", r#"{"throttleRate":7}"#],
    ];
    for args in cases {
        let out = Command::new(BIN).args(&args).output().expect("run");
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(out.stdout.is_empty(), "{args:?} printed no address");
        assert!(!out.stderr.is_empty(), "{args:?} explains why");
    }
}

#[test]
fn sigterm_right_after_the_address_line_is_a_clean_exit() {
    // The handler is installed before the address is printed, so a supervisor that signals
    // at once never kills the process with the default action.
    for _ in 0..5 {
        assert!(Sim::start(&[]).terminate().success());
    }
}
