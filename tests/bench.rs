//! Benchmark (run by hand, prints figures; not part of the test suite):
//!
//!     BENCH_STACKS=200 cargo test --release --test bench -- --ignored --nocapture
//!
//! Applies N commit-pinned Stacks at once and measures, on the client's clock, how long each
//! waits until its first Job exists (what the operator controls: DESIGN.md targets p99 ≤ 1 s),
//! then the operator's resident memory (its pod is a local process on the test cluster).
//! Kubernetes' own pace (Job → pod, about 6 pods/s from the controller-manager here) is not
//! part of the latency.

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use test_support::StackFixture;

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
