//! The shipped monitoring against the real thing: a Prometheus 3.16 server (built by
//! tests/build-tools.sh), on loopback, scrapes the operator on the local cluster as job
//! `pulumi-operator-metrics` and loads the chart's PrometheusRule, rendered by the real `helm`
//! with short `for` values. A Stack whose program fails is retried until it stalls, and
//! Prometheus's own API reports PulumiStackFailing and PulumiStackStalled firing for it, with
//! their annotations, while the operator's alerts stay quiet. Then every query of the Grafana
//! dashboard, as Grafana sends it, is valid and returns data, with a Stack that tracks a branch
//! (ls-remote, drift detection), one whose operation is still running, and a suspended one.

use serde_json::Value;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use test_support::{kubectl, wait_for, StackFixture, OPERATOR_NAMESPACE};

const JOB: &str = "pulumi-operator-metrics";

/// A Prometheus server on a free loopback port, its data in `dir`; killed when dropped.
struct Prometheus {
    port: u16,
    dir: PathBuf,
    child: Child,
    stop_targets: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.stop_targets
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The `ip:8080` of each running operator pod, as file_sd targets (JSON).
fn operator_targets() -> String {
    let ips = kubectl(&[
        "-n",
        OPERATOR_NAMESPACE,
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/name=pulumi-operator",
        "--field-selector=status.phase=Running",
        "-o",
        "jsonpath={.items[*].status.podIP}",
    ]);
    let targets: Vec<String> = ips
        .split_whitespace()
        .map(|ip| format!("{ip}:8080"))
        .collect();
    serde_json::json!([{"targets": targets}]).to_string()
}

/// Keeps `path` listing the operator pods (they change when a pod is replaced): Prometheus
/// reads the file again when it changes.
fn follow_operator_pods(path: PathBuf, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) {
    std::thread::spawn(move || {
        let mut last = String::new();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let now = operator_targets();
            if now != last {
                let tmp = path.with_extension("tmp");
                if std::fs::write(&tmp, &now).is_ok() && std::fs::rename(&tmp, &path).is_ok() {
                    last = now;
                }
            }
            std::thread::sleep(Duration::from_secs(2));
        }
    });
}

/// The chart's PrometheusRule rendered with `sets`, as a rules file.
fn rendered_rules(sets: &[&str]) -> String {
    let mut args = vec![
        "template",
        "pulumi-operator",
        "charts/pulumi-operator",
        "--namespace",
        OPERATOR_NAMESPACE,
        "--show-only",
        "templates/prometheusrule.yaml",
        "--set",
        "prometheusRule.enabled=true",
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    let home = std::env::temp_dir().join("e2e-prometheus-helm");
    let out = Command::new(test_support::tool("helm"))
        .args(&args)
        .current_dir(test_support::repo_root())
        .env("HELM_CACHE_HOME", &home)
        .env("HELM_CONFIG_HOME", &home)
        .env("HELM_DATA_HOME", &home)
        .output()
        .expect("run helm");
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rule: serde_norway::Value =
        serde_norway::from_slice(&out.stdout).expect("the PrometheusRule");
    let mut file = serde_norway::Mapping::new();
    file.insert("groups".into(), rule["spec"]["groups"].clone());
    serde_norway::to_string(&file).expect("rules yaml")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Prometheus {
    fn start(rules: &str) -> Prometheus {
        let dir = std::env::temp_dir().join(format!("e2e-prometheus-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("prometheus dir");
        std::fs::write(dir.join("rules.yaml"), rules).expect("rules");
        let targets = dir.join("targets.json");
        std::fs::write(&targets, operator_targets()).expect("targets");
        let stop_targets = std::sync::Arc::default();
        follow_operator_pods(targets, std::sync::Arc::clone(&stop_targets));
        let config = format!(
            "global: {{scrape_interval: 2s, scrape_timeout: 2s, evaluation_interval: 2s}}\n\
             rule_files: [rules.yaml]\n\
             scrape_configs:\n\
             - job_name: {JOB}\n  file_sd_configs: [{{files: [targets.json], refresh_interval: 2s}}]\n"
        );
        std::fs::write(dir.join("prometheus.yml"), config).expect("config");
        let port = free_port();
        let log = std::fs::File::create(dir.join("prometheus.log")).expect("log");
        let child = Command::new(test_support::tool("prometheus"))
            .current_dir(&dir)
            .args([
                "--config.file=prometheus.yml",
                "--storage.tsdb.path=data",
                &format!("--web.listen-address=127.0.0.1:{port}"),
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        let p = Prometheus {
            port,
            dir,
            child,
            stop_targets,
        };
        p.wait_ready();
        p
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    fn wait_ready(&self) {
        for _ in 0..150 {
            if self.get("/-/ready").is_some_and(|b| b.contains("Ready")) {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("prometheus did not become ready:\n{}", self.log());
    }

    /// GET `path` (HTTP/1.0: the whole body, then the connection closes).
    fn get(&self, path: &str) -> Option<String> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        text.split_once("\r\n\r\n")
            .map(|(_, body)| body.to_string())
    }

    /// An instant query through `/api/v1/query`: the API's whole answer.
    fn query(&self, promql: &str) -> Value {
        let body = self
            .get(&format!("/api/v1/query?query={}", encode(promql)))
            .unwrap_or_else(|| panic!("no answer from prometheus:\n{}", self.log()));
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
    }

    /// The result vector of a query that must succeed.
    fn series(&self, promql: &str) -> Vec<Value> {
        let answer = self.query(promql);
        assert_eq!(answer["status"], "success", "{promql}: {answer}");
        answer["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

/// Percent-encodes a query parameter.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The expression as Grafana sends it with every job and namespace selected.
fn grafana_to_promql(expr: &str) -> String {
    expr.replace("$__rate_interval", "2m")
        .replace("$job", ".*")
        .replace("$namespace", ".*")
}

fn dashboard_queries(path: &Path) -> Vec<(String, String)> {
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("dashboard")).expect("json");
    let mut out = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let title = panel["title"].as_str().unwrap_or_default().to_string();
            out.push((
                title,
                grafana_to_promql(target["expr"].as_str().expect("expr")),
            ));
        }
    }
    out
}

fn record(name: &str) -> String {
    format!(
        "name: e2e\nruntime: yaml\nresources:\n  rec:\n    type: standin:index:Record\n    properties:\n      value: {name}\n"
    )
}

fn stalled(s: &pulumi_operator_api::Stack) -> bool {
    s.status
        .as_ref()
        .and_then(|x| x.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Stalled" && c.status == "True"))
}

/// Waits until `promql` returns at least one series.
async fn until_series(p: &Prometheus, promql: &str, timeout: Duration) -> Vec<Value> {
    wait_for(timeout, promql, || {
        let found = p.series(promql);
        async move { (!found.is_empty()).then_some(found) }
    })
    .await
}

#[tokio::test]
async fn prometheus_fires_the_stall_alert_and_answers_every_dashboard_query() {
    let f = StackFixture::new("prometheus").await;
    let rules = rendered_rules(&[
        "prometheusRule.for.PulumiStackFailing=4s",
        "prometheusRule.for.PulumiStackStalled=4s",
    ]);
    let p = Prometheus::start(&rules);
    let loaded = p.get("/api/v1/rules").expect("rules");
    assert!(loaded.contains("PulumiStackStalled"), "{loaded}");
    until_series(
        &p,
        &format!("up{{job=\"{JOB}\"}} == 1"),
        Duration::from_secs(60),
    )
    .await;

    let broken = f.repo.commit(
        &[(
            "Pulumi.yaml",
            "name: e2e\nruntime: yaml\nresources:\n  broken:\n    type: standin:index:Fail\n    properties:\n      message: this program always fails\n",
        )],
        "broken",
    );
    f.sn.ns.apply(&f.stack_yaml(
        "broken",
        &format!("commit: {broken}"),
        "  retryMaxBackoffDurationSeconds: 1\n",
    ));
    // The dashboard's other data: a branch (ls-remote) with drift detection, and an operation
    // that keeps running.
    f.repo
        .commit(&[("Pulumi.yaml", &record("tracked"))], "tracked");
    // On a Pulumi stack of its own: on `broken`'s, whose retries hold its lock every second,
    // an operation could fail on the lock and raise PulumiStackFailing.
    f.sn.ns.apply(&f.own_stack_yaml(
        "tracked",
        "branch: main",
        "  driftDetection:\n    schedules: [\"0 0 1 1 *\"]\n",
    ));
    let slow = f.repo.commit(
        &[("slow/Pulumi.yaml", &test_support::sleeping_program(900))],
        "slow",
    );
    f.sn.ns
        .apply(&f.own_stack_yaml("slow", &format!("commit: {slow}\n  repoDir: slow"), ""));

    // A suspended Stack (spec.suspend) is counted as such.
    f.sn.ns
        .apply(&f.own_stack_yaml("paused", "branch: main", "  suspend: true\n"));

    f.wait_stack_for(
        Duration::from_secs(300),
        "broken",
        "the failing Stack to stall",
        stalled,
    )
    .await;
    let ns = f.ns().to_string();
    let firing = |alert: &str| {
        format!("ALERTS{{alertname=\"{alert}\",alertstate=\"firing\",namespace=\"{ns}\",name=\"broken\"}}")
    };
    until_series(&p, &firing("PulumiStackStalled"), Duration::from_secs(60)).await;
    until_series(&p, &firing("PulumiStackFailing"), Duration::from_secs(60)).await;
    let alerts: Value = serde_json::from_str(&p.get("/api/v1/alerts").expect("alerts")).unwrap();
    let stall = alerts["data"]["alerts"]
        .as_array()
        .expect("alerts")
        .iter()
        .find(|a| {
            a["labels"]["alertname"] == "PulumiStackStalled" && a["labels"]["namespace"] == *ns
        })
        .cloned()
        .expect("the stall alert in /api/v1/alerts");
    assert_eq!(stall["state"], "firing", "{stall}");
    assert_eq!(stall["labels"]["severity"], "warning", "{stall}");
    let description = stall["annotations"]["description"]
        .as_str()
        .unwrap_or_default();
    assert!(
        description.contains(&format!("kubectl -n {ns} describe stack broken")),
        "{description}"
    );
    eprintln!("firing: {stall}");
    // The operator's own alerts stay quiet (it is up and leading), and a Stack that is fine
    // raises nothing.
    for quiet in [
        "ALERTS{alertname=\"PulumiOperatorDown\"}".to_string(),
        "ALERTS{alertname=\"PulumiOperatorNotLeading\"}".to_string(),
        format!("ALERTS{{namespace=\"{ns}\",name=\"tracked\"}}"),
    ] {
        let raised = p.series(&quiet);
        assert!(
            raised.is_empty(),
            "{quiet} must not be pending or firing: {raised:?}"
        );
    }

    until_series(
        &p,
        &format!(
            "pulumi_operator_stack_state{{namespace=\"{ns}\",name=\"paused\",state=\"suspended\"}}"
        ),
        Duration::from_secs(60),
    )
    .await;
    assert!(
        !p.series("pulumi_operator_stacks{state=\"suspended\"} >= 1")
            .is_empty(),
        "the suspended Stack in pulumi_operator_stacks"
    );

    every_dashboard_query_returns_data(&p, &f).await;
}

async fn every_dashboard_query_returns_data(p: &Prometheus, f: &StackFixture) {
    f.wait_stack(
        "tracked",
        "the branch Stack Ready",
        test_support::stack_ready,
    )
    .await;
    let path =
        test_support::repo_root().join("charts/pulumi-operator/files/grafana-dashboard.json");
    let queries = dashboard_queries(&path);
    for (panel, promql) in &queries {
        // Parsed and evaluated by Prometheus itself.
        let answer = p.query(promql);
        assert_eq!(answer["status"], "success", "{panel}: {promql}: {answer}");
    }
    for (panel, promql) in &queries {
        let found = wait_for(
            Duration::from_secs(120),
            &format!("data for {panel}: {promql}"),
            || {
                let n = p.series(promql).len();
                async move { (n > 0).then_some(n) }
            },
        )
        .await;
        eprintln!("{panel}: {promql} → {found} series");
    }
    eprintln!("{} dashboard queries answered", queries.len());
}
