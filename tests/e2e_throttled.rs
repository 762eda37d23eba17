//! Issue 44 §5: the operator under real API Priority and Fairness throttling. The API server
//! puts the operator's ServiceAccount in a priority level of one concurrency share that rejects
//! what it cannot serve at once (429 with `Retry-After`), and leaves its leader-election Lease
//! in the built-in `leader-election` level, as docs/operations.md tells an administrator to.
//! Then STACKS (200) Stacks arrive at once. Asserted from the API server's audit log: requests
//! were rejected (else the test proves nothing), every rejected request was retried no sooner
//! than its `Retry-After`, and the operator's requests per Stack stay bounded (no spinning);
//! from /proc: the operator's memory stays bounded, and never two Pulumi processes of one stack
//! at once; and every Stack becomes Ready with no lock left.
//!
//!     THROTTLED_STACKS=50 cargo test --release --test e2e_throttled -- --nocapture

use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use test_support::{kubectl, kubectl_stdin, repo_root, wait_until, StackFixture};

const OPERATOR_USER: &str = "system:serviceaccount:pulumi-operator:pulumi-operator";

/// The operator's requests the Stacks may cost each, at most, under throttling (measured: about
/// 30 without throttling; retries of rejected requests come on top).
const MAX_REQUESTS_PER_STACK: f64 = 80.0;

/// The operator's resident memory may not pass this during the burst.
const MAX_RSS_KIB: u64 = 150 * 1024;

const PROGRAM: &str = "name: e2e\nruntime: yaml\nresources:\n  rec:\n    type: standin:index:Record\n    properties:\n      value: throttled\noutputs:\n  value: ${rec.value}\n";

/// The priority level and flow schemas of the test; the Lease schema is the administrator's
/// advice in docs/operations.md.
fn flow_control() -> String {
    format!(
        r#"apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {{name: e2e-pulumi-operator-throttled}}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 1
    lendablePercent: 0
    borrowingLimitPercent: 0
    limitResponse: {{type: Reject}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {{name: e2e-pulumi-operator-leases}}
spec:
  matchingPrecedence: 400
  priorityLevelConfiguration: {{name: leader-election}}
  distinguisherMethod: {{type: ByUser}}
  rules:
  - subjects: [{{kind: ServiceAccount, serviceAccount: {{name: pulumi-operator, namespace: pulumi-operator}}}}]
    resourceRules:
    - {{apiGroups: [coordination.k8s.io], resources: [leases], verbs: ["*"], namespaces: ["*"]}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {{name: e2e-pulumi-operator-throttled}}
spec:
  matchingPrecedence: 500
  priorityLevelConfiguration: {{name: e2e-pulumi-operator-throttled}}
  distinguisherMethod: {{type: ByUser}}
  rules:
  - subjects: [{{kind: User, user: {{name: "{OPERATOR_USER}"}}}}]
    resourceRules:
    - {{apiGroups: ["*"], resources: ["*"], verbs: ["*"], clusterScope: true, namespaces: ["*"]}}
    nonResourceRules:
    - {{nonResourceURLs: ["*"], verbs: ["*"]}}
"#
    )
}

/// Removes the throttling however the test ends.
struct Throttled;

impl Throttled {
    fn start() -> Throttled {
        let (ok, out, err) = kubectl_stdin(&["apply", "-f", "-"], &flow_control());
        assert!(ok, "the flow control objects: {out}{err}");
        Throttled
    }
}

impl Drop for Throttled {
    fn drop(&mut self) {
        let _ = kubectl_stdin(
            &["delete", "--ignore-not-found", "--wait=false", "-f", "-"],
            &flow_control(),
        );
    }
}

/// One request of the operator, from the audit log.
struct Audited {
    at: jiff::Timestamp,
    verb: String,
    uri: String,
    code: i64,
}

/// The operator's requests received at or after `since`, from every audit log file.
fn operator_requests(since: jiff::Timestamp) -> Vec<Audited> {
    let dir = repo_root().join(".local-cluster/logs");
    let mut found = Vec::new();
    // A watch is logged twice (its response started, then completed) under one audit ID.
    let mut seen = std::collections::HashSet::new();
    for entry in std::fs::read_dir(&dir)
        .expect("the local cluster's logs")
        .flatten()
    {
        if !entry.file_name().to_string_lossy().starts_with("audit") {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for e in text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        {
            if e["user"]["username"].as_str() != Some(OPERATOR_USER)
                || !seen.insert(e["auditID"].as_str().unwrap_or_default().to_string())
            {
                continue;
            }
            let Some(at) = e["requestReceivedTimestamp"]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .filter(|t| *t >= since)
            else {
                continue;
            };
            found.push(Audited {
                at,
                verb: e["verb"].as_str().unwrap_or_default().to_string(),
                uri: e["requestURI"].as_str().unwrap_or_default().to_string(),
                code: e["responseStatus"]["code"].as_i64().unwrap_or_default(),
            });
        }
    }
    found.sort_by_key(|a| a.at);
    found
}

/// Rejected requests whose same request (verb and URI) came again sooner than a second (the
/// API server's `Retry-After` for a rejection by priority and fairness). Only requests whose
/// URI names their object: a rejected `create` is refused before its body is read, so the log
/// cannot tell its retry from another object's create to the same collection.
fn retried_too_soon(requests: &[Audited]) -> Vec<String> {
    let mut last_rejected: BTreeMap<(&str, &str), jiff::Timestamp> = BTreeMap::new();
    let mut early = Vec::new();
    for r in requests.iter().filter(|r| r.verb != "create") {
        let key = (r.verb.as_str(), r.uri.as_str());
        if let Some(rejected) = last_rejected.get(&key) {
            let gap = r.at.as_millisecond() - rejected.as_millisecond();
            // Audit timestamps are of the request's arrival, in microseconds: a 1 s wait with
            // the client's own timer may show as a few milliseconds less.
            if gap < 950 {
                early.push(format!("{} {} again after {gap} ms", r.verb, r.uri));
            }
        }
        if r.code == 429 {
            last_rejected.insert(key, r.at);
        } else {
            last_rejected.remove(&key);
        }
    }
    early
}

#[tokio::test]
async fn a_burst_under_priority_and_fairness_throttling_converges_without_spinning() {
    let count: usize = std::env::var("THROTTLED_STACKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let f = StackFixture::new("throttled").await;
    let pulumis = test_support::processes::ProcessObserver::start();
    let sha = f.repo.commit(&[("Pulumi.yaml", PROGRAM)], "program");
    let manifest: Vec<String> = (0..count)
        .map(|i| f.own_stack_yaml(&format!("s{i}"), &format!("commit: {sha}"), ""))
        .collect();
    let throttled = Throttled::start();
    // The API server reads flow control objects shortly after they change.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let since = jiff::Timestamp::now();
    let started = Instant::now();
    let peak_rss = Arc::new(AtomicU64::new(0));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, on) = (peak_rss.clone(), sampling.clone());
        std::thread::spawn(move || {
            while on.load(Ordering::Relaxed) {
                if let Some((rss, _)) = test_support::operator_usage() {
                    peak.fetch_max(rss, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(250));
            }
        })
    };
    let (ok, out, err) = kubectl_stdin(
        &["-n", f.ns(), "apply", "--server-side", "-f", "-"],
        &manifest.join("---\n"),
    );
    assert!(ok, "applying {count} Stacks: {out}{err}");
    wait_until(
        Duration::from_secs(1800),
        &format!("all {count} Stacks Ready under throttling"),
        || async {
            let ready = kubectl(&[
                "-n",
                f.ns(),
                "get",
                "stacks",
                "-o",
                "jsonpath={range .items[*]}{.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}",
            ]);
            ready.lines().filter(|l| *l == "True").count() == count
        },
    )
    .await;
    let converged = started.elapsed();
    sampling.store(false, Ordering::Relaxed);
    let _ = sampler.join();
    drop(throttled);
    // The audit log is written as requests end: let the last ones land.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let requests = operator_requests(since);
    let rejected = requests.iter().filter(|r| r.code == 429).count();
    let per_stack = requests.len() as f64 / count as f64;
    let peak = peak_rss.load(Ordering::Relaxed);
    let rejected_named = requests
        .iter()
        .filter(|r| r.code == 429 && r.verb != "create")
        .count();
    println!(
        "throttled: {count} Stacks Ready in {:.0}s; the operator made {} requests ({per_stack:.1} per Stack), {rejected} rejected with 429 ({rejected_named} of them naming their object); resident memory peaked at {} KiB",
        converged.as_secs_f64(),
        requests.len(),
        peak
    );
    assert!(
        rejected > 0,
        "no request of the operator was rejected: the throttling was not real"
    );
    let early = retried_too_soon(&requests);
    assert!(
        early.is_empty(),
        "rejected requests retried before their Retry-After: {early:#?}"
    );
    assert!(
        per_stack <= MAX_REQUESTS_PER_STACK,
        "{per_stack:.1} requests per Stack (at most {MAX_REQUESTS_PER_STACK})"
    );
    assert_eq!(
        pulumis.overlaps_in(&f.sn.backend_url),
        Vec::<String>::new(),
        "two Pulumi processes of one stack ran at once"
    );
    assert_eq!(f.lock_files(), 0, "no stack is left locked");
    assert!(
        peak > 0 && peak <= MAX_RSS_KIB,
        "the operator's resident memory peaked at {peak} KiB (at most {MAX_RSS_KIB})"
    );
}
