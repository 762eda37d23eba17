//! Benchmark (run by hand, prints figures; not part of the test suite):
//!
//!     BENCH_STACKS=200 cargo test --release --test bench -- --ignored --nocapture
//!
//! Applies N commit-pinned Stacks at once and measures, on the client's clock, how long each
//! waits until its first Job exists (what the operator controls: DESIGN.md targets p99 ≤ 1 s),
//! then the operator's resident memory (its pod is a local process on the test cluster).
//! Kubernetes' own pace (Job → pod, about 6 pods/s from the controller-manager here) is not
//! part of the latency.
//!
//!     BENCH_RUNS=5 cargo test --test bench runner -- --ignored --nocapture
//!
//! Runs one small real-Pulumi update per Stack, one after the other, and prints from each
//! Job's pod status and `kubectl logs --timestamps`: the runner's first line (its first `pulumi`
//! process) → the `pulumi up` process (version, install, stack select/init, config), the
//! `pulumi` container's duration, and the Job's whole time (created → complete; whole seconds).

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use test_support::{kubectl, last_update, stack_ready, StackFixture};

fn operator_rss_kib() -> Vec<u64> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
        if argv0.ends_with(b"/pulumi-operator") {
            let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
            if let Some(kb) = status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
            {
                out.push(kb);
            }
        }
    }
    out
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::test]
#[ignore = "benchmark: run by hand"]
async fn stacks_applied_to_jobs_created() {
    let n: usize = std::env::var("BENCH_STACKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let f = StackFixture::new("bench").await;
    let sha = f.repo.commit(
        &[("Pulumi.yaml", "name: e2e\nruntime: yaml\nresources:\n  a:\n    type: standin:index:Record\n    properties: {value: x}\n")],
        "bench",
    );
    let jobs: Api<Job> = Api::namespaced(f.sn.ns.client.clone(), f.ns());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    let watch = tokio::spawn(async move {
        let mut events = watcher(jobs, watcher::Config::default())
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(Ok(job)) = events.next().await {
            let stack = job
                .metadata
                .labels
                .unwrap_or_default()
                .get("pulumi.com/stack-name")
                .cloned()
                .unwrap_or_default();
            let _ = tx.send((stack, Instant::now()));
        }
    });
    let updates: Api<pulumi_operator_api::Update> = Api::namespaced(f.sn.ns.client.clone(), f.ns());
    let (utx, mut urx) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    let uwatch = tokio::spawn(async move {
        let mut events = watcher(updates, watcher::Config::default())
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(Ok(u)) = events.next().await {
            let stack = u
                .metadata
                .labels
                .unwrap_or_default()
                .get("pulumi.com/stack-name")
                .cloned()
                .unwrap_or_default();
            let _ = utx.send((stack, Instant::now()));
        }
    });
    let rss_before = operator_rss_kib();
    let mut applied: HashMap<String, Instant> = HashMap::new();
    let started = Instant::now();
    let stacks: Api<pulumi_operator_api::Stack> = Api::namespaced(f.sn.ns.client.clone(), f.ns());
    for i in 0..n {
        let name = format!("s{i}");
        let yaml = f.stack_yaml(&name, &format!("commit: {sha}"), "");
        let stack: pulumi_operator_api::Stack = serde_yaml::from_str(&yaml).expect("stack yaml");
        applied.insert(name, Instant::now());
        stacks
            .create(&Default::default(), &stack)
            .await
            .expect("create stack");
    }
    let applied_in = started.elapsed();
    let mut first_job: HashMap<String, Instant> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    while first_job.len() < n && Instant::now() < deadline {
        if let Ok(Some((stack, at))) = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await
        {
            first_job.entry(stack).or_insert(at);
        }
    }
    watch.abort();
    uwatch.abort();
    let mut first_update: HashMap<String, Instant> = HashMap::new();
    while let Ok((stack, at)) = urx.try_recv() {
        first_update.entry(stack).or_insert(at);
    }
    let mut to_update: Vec<Duration> = applied
        .iter()
        .filter_map(|(s, at)| {
            first_update
                .get(s)
                .map(|u| u.saturating_duration_since(*at))
        })
        .collect();
    to_update.sort();
    println!(
        "Stack applied -> Update created: p50 {:?}, p99 {:?}",
        percentile(&to_update, 0.5),
        percentile(&to_update, 0.99)
    );
    let mut latencies: Vec<Duration> = applied
        .iter()
        .filter_map(|(s, at)| first_job.get(s).map(|j| j.saturating_duration_since(*at)))
        .collect();
    latencies.sort();
    let rss_after = operator_rss_kib();
    println!(
        "stacks applied: {n} in {applied_in:?}; Jobs seen for {}",
        latencies.len()
    );
    println!(
        "Stack applied -> Job created: p50 {:?}, p90 {:?}, p99 {:?}, max {:?}",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.9),
        percentile(&latencies, 0.99),
        latencies.last().copied().unwrap_or_default()
    );
    println!("operator RSS (KiB, per replica process): before {rss_before:?}, after {rss_after:?}");
    assert_eq!(
        latencies.len(),
        n,
        "some Stacks got no Job within 5 minutes"
    );
}

/// A `kubectl logs --timestamps` line's time and text.
fn stamped(line: &str) -> Option<(jiff::Timestamp, &str)> {
    let (ts, rest) = line.split_once(' ')?;
    Some((ts.parse().ok()?, rest))
}

fn seconds(from: jiff::Timestamp, to: jiff::Timestamp) -> f64 {
    (to.as_millisecond() - from.as_millisecond()) as f64 / 1000.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

#[tokio::test]
#[ignore]
async fn runner_overhead_and_job_time_with_real_pulumi() {
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let f = StackFixture::new("bench-runner").await;
    let sha = f.repo.commit(
        &[("Pulumi.yaml", "name: bench\nruntime: yaml\nresources:\n  a:\n    type: standin:index:Record\n    properties: {value: x}\noutputs:\n  v: ${a.value}\n")],
        "bench",
    );
    let (mut to_up, mut container, mut job_total) = (vec![], vec![], vec![]);
    for i in 0..runs {
        let name = format!("r{i}");
        f.sn.ns
            .apply(&f.stack_yaml(&name, &format!("commit: {sha}"), ""));
        let s = f
            .wait_stack_for(Duration::from_secs(300), &name, "Ready", stack_ready)
            .await;
        let update = last_update(&s).name.expect("an update");
        let logs = kubectl(&[
            "-n",
            f.ns(),
            "logs",
            &format!("job/{update}"),
            "-c",
            "pulumi",
            "--timestamps",
        ]);
        let lines: Vec<(jiff::Timestamp, &str)> = logs.lines().filter_map(stamped).collect();
        let start = lines.first().map(|l| l.0).expect("runner output");
        let exec = |needle: &str| {
            lines
                .iter()
                .find(|(_, t)| t.contains(needle))
                .map(|(at, _)| seconds(start, *at))
        };
        to_up.push(exec("running pulumi --non-interactive up").unwrap_or(f64::NAN));
        let job: serde_json::Value = serde_json::from_str(&kubectl(&[
            "-n",
            f.ns(),
            "get",
            "job",
            &update,
            "-o",
            "json",
        ]))
        .unwrap();
        let at = |v: &serde_json::Value| v.as_str().and_then(|t| t.parse::<jiff::Timestamp>().ok());
        if let (Some(c), Some(d)) = (
            at(&job["metadata"]["creationTimestamp"]),
            at(&job["status"]["completionTime"]),
        ) {
            job_total.push(seconds(c, d));
        }
        let pods: serde_json::Value = serde_json::from_str(&kubectl(&[
            "-n",
            f.ns(),
            "get",
            "pods",
            "-l",
            &format!("job-name={update}"),
            "-o",
            "json",
        ]))
        .unwrap();
        if let Some(st) = pods["items"][0]["status"]["containerStatuses"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["name"] == "pulumi"))
        {
            let t = &st["state"]["terminated"];
            if let (Some(a), Some(b)) = (at(&t["startedAt"]), at(&t["finishedAt"])) {
                container.push(seconds(a, b));
            }
        }
    }
    println!("{runs} updates with the real Pulumi CLI (one Record each), medians:");
    println!(
        "  runner's first pulumi process -> `pulumi up` process: {:.3} s",
        median(to_up)
    );
    println!(
        "  pulumi container (runner + Pulumi):   {:.1} s",
        median(container)
    );
    println!(
        "  Job created -> Job complete:          {:.1} s",
        median(job_total)
    );
}
