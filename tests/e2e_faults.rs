//! Faults below the operator (tests/faults.sh): kube-apiserver restarted hard and gracefully and
//! paused, etcd restarted and compacted (so that watches must re-list from "too old resource
//! version"), a node lost with an operation's pod on it, and a full state-backend disk, while
//! Stacks go through revisions. Faults strike at random moments and at the dangerous ones: right
//! after a Stack claims an operation (before or as its Update is created), right after an
//! operation's Job is created, when Pulumi has ended and the outputs are handed over, and during
//! destroys. It asserts the invariants of tests/e2e_chaos.rs (never two operations of one Stack
//! at once, no trigger applied twice, every Stack at its last revision, no stack lock left, no
//! retained workspace lost) and also that no Update is left without an end, that the operator
//! process was never restarted, and how long each fault took to recover from. It prints a
//! table: fault × moment × count × outcome × recovery time, and the operator's memory and
//! threads before, during and after a long apiserver pause. A longer run by hand:
//!
//!     FAULT_STACKS=9 FAULT_ROUNDS=6 FAULT_SEED=42 cargo test --test e2e_faults -- --nocapture

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use pulumi_operator_api::{Stack, StackUpdateStateMessage, Update};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use test_support::processes::ProcessObserver;
use test_support::workload::{
    apply_round, assert_invariants, assert_no_update_stranded, env_or, git_program,
    kubectl_retrying, observe, seed_from_env, stack_object, stack_object_with, wait_converged,
    Observations, Rng,
};
use test_support::{
    kubectl, kubectl_result, last_update, output_value, repo_root, sleeping_program, stack_ready,
    wait_until, StackFixture, OPERATOR_NAMESPACE,
};
use tokio::sync::broadcast;

/// The tests of this file run one at a time: each breaks the cluster the others use.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// [`inject`] from a spawned task.
async fn inject_owned(args: Vec<&'static str>) -> Duration {
    inject(&args).await
}

/// Runs tests/faults.sh with `args`; panics with its output if it fails.
async fn inject(args: &[&str]) -> Duration {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let started = Instant::now();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(repo_root().join("tests/faults.sh"))
            .args(&args)
            .output()
            .map(|o| (o.status.success(), args, o))
    })
    .await
    .expect("faults.sh task")
    .expect("faults.sh runs");
    let (ok, args, o) = out;
    assert!(
        ok,
        "tests/faults.sh {args:?} failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    started.elapsed()
}

/// The faults that strike while operations run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    ApiserverHardRestart,
    ApiserverGracefulRestart,
    ApiserverPause,
    EtcdRestart,
    EtcdCompact,
}

const FAULTS: [Fault; 5] = [
    Fault::ApiserverHardRestart,
    Fault::ApiserverGracefulRestart,
    Fault::ApiserverPause,
    Fault::EtcdRestart,
    Fault::EtcdCompact,
];

impl Fault {
    async fn strike(self, pause_seconds: u64) -> Duration {
        let pause = pause_seconds.to_string();
        match self {
            Fault::ApiserverHardRestart => inject(&["apiserver-restart", "hard"]).await,
            Fault::ApiserverGracefulRestart => inject(&["apiserver-restart", "graceful"]).await,
            Fault::ApiserverPause => inject(&["apiserver-pause", &pause]).await,
            Fault::EtcdRestart => inject(&["etcd-restart"]).await,
            Fault::EtcdCompact => inject(&["etcd-compact"]).await,
        }
    }
}

/// The dangerous moments a fault is aimed at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Moment {
    /// At a random time.
    Random,
    /// A Stack has just claimed an operation (`status.currentUpdate` names a new Update).
    Claim,
    /// An operation's Job has just been created (its pod has not started).
    JobCreated,
    /// Pulumi has ended; the operator reads the result and the outputs from the pod.
    OutputsHandOver,
    /// A destroy has just started.
    Destroy,
}

/// Watches the namespace and announces each dangerous moment as it happens.
fn announce_moments(client: kube::Client, ns: &str, tx: broadcast::Sender<Moment>) {
    let stacks: Api<Stack> = Api::namespaced(client.clone(), ns);
    let sender = tx.clone();
    tokio::spawn(async move {
        let mut seen = BTreeSet::new();
        let mut events = watcher(stacks, watcher::Config::default()).boxed();
        while let Some(ev) = events.next().await {
            let Ok(watcher::Event::Apply(s)) = ev else {
                continue;
            };
            let current = s
                .status
                .as_ref()
                .and_then(|st| st.current_update.as_ref())
                .and_then(|c| c.name.clone());
            if let Some(name) = current {
                if seen.insert(name) {
                    let _ = sender.send(Moment::Claim);
                }
            }
        }
    });
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let sender = tx.clone();
    tokio::spawn(async move {
        let mut seen = BTreeSet::new();
        let cfg = watcher::Config::default().labels("auto.pulumi.com/update-name");
        let mut events = watcher(jobs, cfg).boxed();
        while let Some(ev) = events.next().await {
            if let Ok(watcher::Event::Apply(j)) = ev {
                if seen.insert(j.name_any()) {
                    let _ = sender.send(Moment::JobCreated);
                }
            }
        }
    });
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let sender = tx.clone();
    tokio::spawn(async move {
        let mut seen = BTreeSet::new();
        let cfg = watcher::Config::default().labels("auto.pulumi.com/update-name");
        let mut events = watcher(pods, cfg).boxed();
        while let Some(ev) = events.next().await {
            let Ok(watcher::Event::Apply(p)) = ev else {
                continue;
            };
            let pulumi_ended = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c.name == "pulumi"
                            && c.state.as_ref().is_some_and(|s| s.terminated.is_some())
                    })
                });
            if pulumi_ended && seen.insert(p.name_any()) {
                let _ = sender.send(Moment::OutputsHandOver);
            }
        }
    });
    let updates: Api<Update> = Api::namespaced(client, ns);
    tokio::spawn(async move {
        let mut seen = BTreeSet::new();
        let mut events = watcher(updates, watcher::Config::default()).boxed();
        while let Some(ev) = events.next().await {
            let Ok(watcher::Event::Apply(u)) = ev else {
                continue;
            };
            let destroy = u.spec.update_type.as_ref().map(|t| t.as_str()) == Some("destroy");
            if destroy && seen.insert(u.name_any()) {
                let _ = tx.send(Moment::Destroy);
            }
        }
    });
}

/// One row of the printed table.
#[derive(Default)]
struct Row {
    count: usize,
    fault_seconds: Vec<f64>,
    recovery_seconds: Vec<f64>,
    outcome: BTreeSet<String>,
}

type Table = Arc<Mutex<BTreeMap<(String, String), Row>>>;

/// A fault that struck; `outcome`: what the Stacks went on to do (asserted before the table is
/// printed).
fn record(
    table: &Table,
    (fault, moment): (&str, &str),
    took: Duration,
    recovery: Option<f64>,
    outcome: &str,
) {
    if let Ok(mut t) = table.lock() {
        let row = t
            .entry((fault.to_string(), moment.to_string()))
            .or_default();
        row.count += 1;
        row.fault_seconds.push(took.as_secs_f64());
        row.recovery_seconds.extend(recovery);
        row.outcome.insert(outcome.to_string());
    }
}

fn print_table(table: &Table) {
    let Ok(t) = table.lock() else { return };
    println!(
        "\n{:<28} {:<16} {:>5} {:>10} {:>14}  outcome",
        "fault", "moment", "count", "fault s", "recovery s"
    );
    let max = |v: &[f64]| v.iter().cloned().fold(f64::NAN, f64::max);
    for ((fault, moment), row) in t.iter() {
        let recovery = if row.recovery_seconds.is_empty() {
            "-".to_string()
        } else {
            format!("{:.1} (max)", max(&row.recovery_seconds))
        };
        println!(
            "{fault:<28} {moment:<16} {:>5} {:>10.1} {recovery:>14}  {}",
            row.count,
            max(&row.fault_seconds),
            row.outcome.iter().cloned().collect::<Vec<_>>().join(", ")
        );
    }
}

/// The operator's pods: (name, uid, restart count of the operator container).
fn operator_pods() -> BTreeSet<String> {
    kubectl(&[
        "-n",
        OPERATOR_NAMESPACE,
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/name=pulumi-operator",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.metadata.uid} {.status.containerStatuses[?(@.name==\"operator\")].restartCount}{\"\\n\"}{end}",
    ])
    .lines()
    .map(str::to_string)
    .collect()
}

/// Every Stack of the fleet at `expected` (and `sha` for git Stacks), Ready, of this generation.
/// Strikes at random moments and at the dangerous ones until `stop`.
fn strike_in_background(
    seed: u64,
    moments: broadcast::Sender<Moment>,
    (table, outcome): (Table, &'static str),
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let mut rng = Rng(seed);
        let mut strikes = 0;
        let aimed = [
            Moment::Random,
            Moment::Claim,
            Moment::JobCreated,
            Moment::OutputsHandOver,
            Moment::Destroy,
        ];
        while !stop.load(Ordering::Relaxed) {
            let moment = aimed[rng.below(aimed.len() as u64) as usize];
            let fault = FAULTS[rng.below(FAULTS.len() as u64) as usize];
            if moment == Moment::Random {
                tokio::time::sleep(Duration::from_millis(2000 + rng.below(6000))).await;
            } else {
                let mut rx = moments.subscribe();
                let wait = async {
                    loop {
                        match rx.recv().await {
                            Ok(m) if m == moment => return true,
                            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                            Err(_) => return false,
                        }
                    }
                };
                match tokio::time::timeout(Duration::from_secs(20), wait).await {
                    Ok(true) => {}
                    _ => continue,
                }
            }
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let took = fault.strike(4 + rng.below(8)).await;
            let row = (format!("{fault:?}"), format!("{moment:?}"));
            record(&table, (&row.0, &row.1), took, None, outcome);
            strikes += 1;
        }
        strikes
    })
}

#[tokio::test]
async fn faults_below_the_operator_lose_nothing() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let stacks = env_or("FAULT_STACKS", 6).max(3);
    let rounds = env_or("FAULT_ROUNDS", 3).max(1);
    let seed = seed_from_env("FAULT_SEED");
    println!("faults: {stacks} stacks, {rounds} revisions under random faults, seed {seed}");
    let started = Instant::now();
    let f = StackFixture::new("faults").await;
    let ns = f.ns().to_string();
    // Observed from the host, not through the API server being faulted.
    let pulumis = ProcessObserver::start();
    let operators_before = operator_pods();
    let obs = Arc::new(Mutex::new(Observations::default()));
    let stop_watch = Arc::new(AtomicBool::new(false));
    let stop_retained = Arc::new(AtomicBool::new(false));
    observe(
        f.sn.ns.client.clone(),
        &ns,
        obs.clone(),
        stop_watch.clone(),
        stop_retained.clone(),
    );
    let (moments, _) = broadcast::channel(256);
    announce_moments(f.sn.ns.client.clone(), &ns, moments.clone());
    let table: Table = Arc::default();

    // 1. Revisions under faults at random and at the dangerous moments.
    let stop_faults = Arc::new(AtomicBool::new(false));
    let striker = strike_in_background(
        seed,
        moments.clone(),
        (table.clone(), "converged"),
        stop_faults.clone(),
    );
    let mut rng = Rng(seed.rotate_left(17) | 1);
    let mut sha = String::new();
    for round in 1..=rounds {
        sha = apply_round(&f, stacks, round);
        tokio::time::sleep(Duration::from_millis(8000 + rng.below(8000))).await;
    }
    stop_faults.store(true, Ordering::Relaxed);
    let strikes = striker.await.unwrap_or(0);
    wait_converged(&f, stacks, &format!("round-{rounds}"), &sha, 600).await;
    println!(
        "faults: {strikes} faults during {rounds} revisions; converged after {:.0}s",
        started.elapsed().as_secs_f64()
    );

    // 2. Each fault once more on a revision in flight, timed from the fault's end to every
    //    Stack Ready at that revision; the operator's memory and threads around a long pause.
    let mut round = rounds;
    for fault in FAULTS {
        round += 1;
        let mut rx = moments.subscribe();
        let sha = apply_round(&f, stacks, round);
        // Strike as soon as the revision's first operation has its Job.
        let _ = tokio::time::timeout(Duration::from_secs(30), async {
            while !matches!(rx.recv().await, Ok(Moment::JobCreated) | Err(_)) {}
        })
        .await;
        let relists_before = watch_restarts();
        let took = fault.strike(20).await;
        let ended = Instant::now();
        wait_converged(&f, stacks, &format!("round-{round}"), &sha, 600).await;
        if matches!(fault, Fault::EtcdCompact) {
            // The compaction took the history the watches would have resumed from: each got
            // "410 Gone" and listed again, and the operator counted it.
            let relists = watch_restarts() - relists_before;
            println!("faults: the compaction made the operator's watches re-list {relists} times");
            assert!(
                relists >= 1.0,
                "no watch re-listed after the compaction (pulumi_operator_watch_restarts_total)"
            );
        }
        let recovery = ended.elapsed().as_secs_f64();
        let row = format!("{fault:?}");
        record(
            &table,
            (&row, "InFlight"),
            took,
            Some(recovery),
            "converged",
        );
    }
    pressure(&table).await;

    // 3. Destroys under faults.
    let stop_faults = Arc::new(AtomicBool::new(false));
    let striker = strike_in_background(
        seed ^ 0x5eed,
        moments.clone(),
        (table.clone(), "destroyed"),
        stop_faults.clone(),
    );
    stop_retained.store(true, Ordering::Relaxed);
    assert_no_update_stranded(&ns);
    for i in 0..stacks {
        let name = format!("s{i}");
        kubectl_retrying(&["-n", &ns, "delete", "stack", &name, "--wait=false"], None);
    }
    wait_until(
        Duration::from_secs(600),
        "every Stack destroyed and gone",
        || async {
            let (ok, out, _) = kubectl_result(&["-n", &ns, "get", "stacks", "-o", "name"]);
            ok && out.trim().is_empty()
        },
    )
    .await;
    stop_faults.store(true, Ordering::Relaxed);
    striker.await.ok();
    stop_watch.store(true, Ordering::Relaxed);
    assert_invariants(&obs, &f);
    assert_eq!(
        pulumis.overlaps_in(&f.sn.backend_url),
        Vec::<String>::new(),
        "two Pulumi processes of one stack ran at once"
    );
    assert_eq!(
        operator_pods(),
        operators_before,
        "the operator was restarted or replaced (name uid restarts)"
    );
    print_table(&table);
    println!("faults: {:.0}s in all", started.elapsed().as_secs_f64());
}

/// The operator's watch re-lists so far (`pulumi_operator_watch_restarts_total`, every kind).
fn watch_restarts() -> f64 {
    test_support::operator_metrics()
        .lines()
        .filter(|l| l.starts_with("pulumi_operator_watch_restarts_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The operator's resident memory and threads before, during and after a 30 s apiserver pause
/// with every Stack triggered; asserts that they stay bounded.
async fn pressure(table: &Table) {
    let sample = || test_support::operator_usage().unwrap_or((0, 0));
    let before = sample();
    let samples = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let samples = samples.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if let (Some(u), Ok(mut s)) = (test_support::operator_usage(), samples.lock()) {
                    s.push(u);
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    let took = Fault::ApiserverPause.strike(30).await;
    stop.store(true, Ordering::Relaxed);
    sampler.await.ok();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let after = sample();
    let during = samples.lock().map(|s| s.clone()).unwrap_or_default();
    let peak_rss = during.iter().map(|s| s.0).max().unwrap_or(0);
    let peak_threads = during.iter().map(|s| s.1).max().unwrap_or(0);
    println!(
        "faults: operator under a 30 s apiserver pause: RSS {} KiB before, {peak_rss} KiB peak, {} KiB 20 s after; threads {} before, {peak_threads} peak, {} after",
        before.0, after.0, before.1, after.1
    );
    record(
        table,
        ("ApiserverPause", "Pressure30s"),
        took,
        None,
        "bounded",
    );
    assert!(before.0 > 0, "the operator process was found");
    assert!(
        peak_rss <= before.0 * 3 / 2 + 32 * 1024,
        "the operator's memory grew from {} to {peak_rss} KiB while the API server was paused",
        before.0
    );
    assert!(
        peak_threads <= before.1 + 16,
        "the operator's threads grew from {} to {peak_threads} while the API server was paused",
        before.1
    );
}

/// The Stacks of the node-loss test run on a node of their own, which is lost mid-operation.
const LOST_NODE: &str = "fault-a";

fn on_lost_node() -> String {
    format!(
        "  workspaceTemplate:\n    spec:\n      podTemplate:\n        spec:\n          nodeSelector: {{pulumi-operator-rs.test/node: {LOST_NODE}}}\n          tolerations: [{{key: pulumi-operator-rs.test/faults, operator: Exists}}]\n"
    )
}

/// Removes the extra node even when the test fails.
struct ExtraNode;
impl Drop for ExtraNode {
    fn drop(&mut self) {
        let _ = std::process::Command::new(repo_root().join("tests/faults.sh"))
            .args(["node-remove", LOST_NODE])
            .output();
    }
}

/// A node is cut off, not dead: its agent stops answering while its pods' Pulumi processes run
/// on. The next operation of each Stack (a new revision, which may run on the other node) must
/// not start a second Pulumi for the stack until the first is proven stopped. The Stack names
/// the node and the way forward; a person then makes sure the node is down and marks it out of
/// service, and the Stacks converge with their state intact. What runs is observed from the
/// host's process table, not through the API server or the node agent being faulted.
#[tokio::test]
async fn an_operation_cut_off_with_its_node_waits_for_proof_and_never_runs_twice() {
    cut_off_node("node-partition", "nodeloss").await;
}

/// The same when the node agent dies and its pods' processes live on: the node stops
/// answering as a partitioned one does.
#[tokio::test]
async fn an_operation_whose_node_agent_died_waits_for_proof_and_never_runs_twice() {
    cut_off_node("agent-crash", "agentloss").await;
}

/// Cuts the node of two Stacks' long operations off with `fault` (a tests/faults.sh command).
async fn cut_off_node(fault: &str, prefix: &str) {
    let _serial = ONE_AT_A_TIME.lock().await;
    let f = StackFixture::new(prefix).await;
    let ns = f.ns().to_string();
    inject(&["node-add", LOST_NODE]).await;
    let _node = ExtraNode;
    let pulumis = ProcessObserver::start();
    // s0: a `Delete` stack; s1: a `Retain` stack (kind() of 0 and 1), both on the cut-off
    // node, each in a long operation when the node goes.
    let sha = f
        .repo
        .commit(&[("Pulumi.yaml", &git_program(1, 600))], "a long operation");
    for i in 0..2 {
        f.sn.ns
            .apply(&stack_object_with(&f, i, &sha, &on_lost_node()));
    }
    wait_until(
        Duration::from_secs(240),
        "both stacks' Pulumi running",
        || async { (0..2).all(|i| pulumis.alive(&format!("chaos-{i}")).len() == 1) },
    )
    .await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(f.sn.ns.client.clone(), &ns);
    let cache_claims = || async {
        claims
            .list(&Default::default())
            .await
            .map(|l| {
                l.items
                    .iter()
                    .map(|c| format!("{}/{}", c.name_any(), c.uid().unwrap_or_default()))
                    .collect::<BTreeSet<_>>()
            })
            .unwrap_or_default()
    };
    let claims_before = cache_claims().await;
    let cut_at = Instant::now();
    inject(&[fault, LOST_NODE]).await;
    // A new revision that may run on any node: nothing but the fencing keeps it from starting
    // on local-node while the cut-off Pulumi runs.
    let sha = f
        .repo
        .commit(&[("Pulumi.yaml", &git_program(2, 1))], "short");
    for i in 0..2 {
        f.sn.ns.apply(&stack_object_with(&f, i, &sha, ""));
    }
    // The node goes NotReady after 20 s and its pods are evicted 30 s later (the local
    // cluster's settings); the Stacks then say why they wait.
    for i in 0..2 {
        let s = f
            .wait_stack_for(
                Duration::from_secs(240),
                &format!("s{i}"),
                "the Stack to say that its operation's node stopped answering",
                |s| {
                    test_support::reconciling(s)
                        .is_some_and(|(reason, _)| reason == "NodeUnreachable")
                        || !pulumis.overlaps_in(&f.sn.backend_url).is_empty()
                },
            )
            .await;
        assert_eq!(
            pulumis.overlaps_in(&f.sn.backend_url),
            Vec::<String>::new(),
            "a second Pulumi ran beside the cut-off one"
        );
        let (_, message) = test_support::reconciling(&s).unwrap_or_default();
        assert!(
            message.contains(&format!("node {LOST_NODE}"))
                && message.contains(&format!(
                    "kubectl taint nodes {LOST_NODE} node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"
                ))
                && message.contains(&format!("s{i}-")),
            "the Stack names the node, the pod and the way forward: {message}"
        );
        println!(
            "{prefix}: s{i} waits {:.0}s after the node was cut off: {message}",
            cut_at.elapsed().as_secs_f64()
        );
    }
    // However long it takes: the cut-off Pulumi runs on, and no second one starts.
    tokio::time::sleep(Duration::from_secs(45)).await;
    for i in 0..2 {
        let seen = pulumis.seen(&format!("chaos-{i}"));
        assert!(
            seen.len() == 1 && seen[0].alive,
            "chaos-{i}: only the cut-off Pulumi runs: {seen:?}"
        );
    }
    assert_eq!(pulumis.overlaps_in(&f.sn.backend_url), Vec::<String>::new());
    // The person makes sure the node is down, then marks it out of service: Kubernetes removes
    // its pods, and the Stacks go on.
    inject(&["node-down", LOST_NODE]).await;
    wait_until(
        Duration::from_secs(30),
        "the cut-off Pulumis to end",
        || async { (0..2).all(|i| pulumis.alive(&format!("chaos-{i}")).is_empty()) },
    )
    .await;
    kubectl(&[
        "taint",
        "nodes",
        LOST_NODE,
        "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute",
    ]);
    for i in 0..2 {
        f.wait_stack_for(
            Duration::from_secs(300),
            &format!("s{i}"),
            "Ready at the new revision",
            |s| stack_ready(s) && output_value(s) == "round-2",
        )
        .await;
    }
    assert_eq!(pulumis.overlaps_in(&f.sn.backend_url), Vec::<String>::new());
    for i in 0..2 {
        assert!(
            pulumis.seen(&format!("chaos-{i}")).len() >= 2,
            "chaos-{i}: the next operation ran once the first was proven stopped"
        );
    }
    assert_eq!(f.lock_files(), 0, "no stack is left locked");
    assert_eq!(
        cache_claims().await,
        claims_before,
        "the retained workspace kept its cache claim"
    );
    assert_no_update_stranded(&ns);
    for i in 0..2 {
        kubectl(&[
            "-n",
            &ns,
            "delete",
            "stack",
            &format!("s{i}"),
            "--wait=false",
        ]);
    }
    wait_until(Duration::from_secs(300), "the Stacks destroyed", || async {
        kubectl(&["-n", &ns, "get", "stacks", "-o", "name"])
            .trim()
            .is_empty()
    })
    .await;
    assert_eq!(pulumis.overlaps_in(&f.sn.backend_url), Vec::<String>::new());
}

/// Issue 44 §1, the bounded way forward: a node is cut off (its agent stops answering) while its
/// pod runs a long operation, and nobody comes. Kubernetes evicts the pod; a minute after the
/// pod's deletion time the API server rejects the pod's token, and the runner, which proves its
/// pod alive with that token every 10 s, stops Pulumi itself (observed from the host). The
/// operator, counting from when it saw the deletion, takes the pod as stopped once the fence's
/// bound has passed, and the Stack goes on to its new revision with no person's help, never
/// beside the cut-off Pulumi.
#[tokio::test]
async fn an_operation_cut_off_with_its_node_stops_itself_and_the_stack_goes_on_alone() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let f = StackFixture::new("fenced").await;
    inject(&["node-add", LOST_NODE]).await;
    let _node = ExtraNode;
    let pulumis = ProcessObserver::start();
    let sha = f
        .repo
        .commit(&[("Pulumi.yaml", &git_program(1, 900))], "a long operation");
    let short_grace = format!(
        "{}          terminationGracePeriodSeconds: 5\n",
        on_lost_node()
    );
    f.sn.ns.apply(&stack_object_with(&f, 0, &sha, &short_grace));
    wait_until(Duration::from_secs(240), "Pulumi running", || async {
        pulumis.alive("chaos-0").len() == 1
    })
    .await;
    let cut_at = Instant::now();
    inject(&["node-partition", LOST_NODE]).await;
    let sha = f
        .repo
        .commit(&[("Pulumi.yaml", &git_program(2, 1))], "short");
    f.sn.ns.apply(&stack_object_with(&f, 0, &sha, ""));
    // NotReady after 20 s, evicted 30 s later, the token rejected 5 + 60 (+10) s after that,
    // seen by the next review within 10 s.
    wait_until(
        Duration::from_secs(300),
        "the cut-off Pulumi to stop by itself",
        || async { pulumis.alive("chaos-0").is_empty() },
    )
    .await;
    let stopped_after = cut_at.elapsed().as_secs_f64();
    let s = f
        .wait_stack_for(
            Duration::from_secs(420),
            "s0",
            "Ready at the new revision without anyone's help",
            |s| stack_ready(s) && output_value(s) == "round-2",
        )
        .await;
    println!(
        "fenced: the cut-off Pulumi stopped {stopped_after:.0}s after the cut; the Stack was Ready \
         at the new revision {:.0}s after it ({})",
        cut_at.elapsed().as_secs_f64(),
        last_update(&s).message.unwrap_or_default()
    );
    assert_eq!(
        pulumis.overlaps_in(&f.sn.backend_url),
        Vec::<String>::new(),
        "the next operation ran beside the cut-off Pulumi"
    );
    assert!(
        pulumis.seen("chaos-0").len() >= 2,
        "the next operation ran after the cut-off one stopped"
    );
    assert_eq!(f.lock_files(), 0, "no stack is left locked");
}

/// Unmounts the small disk even when the test fails.
struct SmallDisk(std::path::PathBuf);
impl Drop for SmallDisk {
    fn drop(&mut self) {
        let dir = self.0.display().to_string();
        let _ = std::process::Command::new(repo_root().join("tests/faults.sh"))
            .args(["disk-unmount", &dir])
            .output();
    }
}

#[tokio::test]
async fn a_full_state_disk_fails_the_update_readably_and_the_next_one_succeeds() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let f = StackFixture::new("diskfull").await;
    let dir = f.sn.backend_dir.display().to_string();
    inject(&["disk-mount", &dir, "16m"]).await;
    let _disk = SmallDisk(f.sn.backend_dir.clone());
    let sha = f.repo.commit(&[("Pulumi.yaml", &git_program(1, 1))], "one");
    f.sn.ns.apply(&stack_object(&f, 0, &sha));
    f.wait_stack("s0", "deployed", |s| {
        stack_ready(s) && output_value(s) == "round-1"
    })
    .await;
    inject(&["disk-fill", &dir]).await;
    let sha = f.repo.commit(&[("Pulumi.yaml", &git_program(2, 1))], "two");
    f.sn.ns.apply(&stack_object(&f, 0, &sha));
    let s = f
        .wait_stack("s0", "the update to fail on the full disk", |s| {
            last_update(s).state == Some(StackUpdateStateMessage::Failed)
                && last_update(s).last_attempted_commit.as_deref() == Some(sha.as_str())
        })
        .await;
    let message = last_update(&s).message.unwrap_or_default();
    println!("diskfull: {message}");
    assert!(
        message.contains("no space left on device"),
        "the failure says why: {message}"
    );
    inject(&["disk-free", &dir]).await;
    let freed = Instant::now();
    loop {
        let s = f.stack("s0").await;
        if stack_ready(&s) && output_value(&s) == "round-2" {
            break;
        }
        assert!(
            freed.elapsed() < Duration::from_secs(300),
            "the retry did not succeed once the disk had room: {:?}",
            s.status
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    println!(
        "diskfull: Ready {:.0}s after the disk had room",
        freed.elapsed().as_secs_f64()
    );
    assert_eq!(f.lock_files(), 0, "no stack is left locked");
    kubectl(&["-n", f.ns(), "delete", "stack", "s0"]);
}

/// The name of the Update Stack `s{i}` has in flight.
fn update_in_flight(ns: &str, i: usize) -> String {
    kubectl(&[
        "-n",
        ns,
        "get",
        "stack",
        &format!("s{i}"),
        "-o",
        "jsonpath={.status.currentUpdate.name}",
    ])
    .trim()
    .to_string()
}

/// Issue 44 §4: objects deleted while the operator's watches are away. The operator is frozen
/// while one Stack's Update is removed by force (its finalizer stripped) and another's Job is
/// deleted, then etcd is compacted past them and the API server restarted, so the watches
/// resume from a compacted revision: 410 Gone, a re-list that no longer has them. Neither
/// Stack waits forever for an object that is gone, and neither starts its next operation
/// before the pod of the deleted one has stopped (observed from the host).
#[tokio::test]
async fn objects_deleted_while_the_watches_are_away_are_seen_as_deleted() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let f = StackFixture::new("relistgap").await;
    let ns = f.ns().to_string();
    let pulumis = ProcessObserver::start();
    // Two Stacks on Jobs (kind 0), each in an operation that runs for 90 s: a deleted pod's
    // Pulumi finishes the step in flight, so it outlives its Update or Job by about a minute.
    let stacks = [0, 3];
    let sha = f.repo.commit(&[("Pulumi.yaml", &git_program(1, 90))], "v1");
    for i in stacks {
        f.sn.ns.apply(&stack_object(&f, i, &sha));
    }
    wait_until(
        Duration::from_secs(240),
        "both stacks' Pulumi running",
        || async {
            stacks
                .iter()
                .all(|i| pulumis.alive(&format!("chaos-{i}")).len() == 1)
        },
    )
    .await;
    let started = Instant::now();
    let (forced, job_gone) = (update_in_flight(&ns, 0), update_in_flight(&ns, 3));
    assert!(!forced.is_empty() && !job_gone.is_empty());
    let relists_before = watch_restarts();
    let frozen = test_support::FrozenOperator::freeze();
    kubectl(&[
        "-n",
        &ns,
        "patch",
        "update",
        &forced,
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ]);
    kubectl(&["-n", &ns, "delete", "update", &forced, "--wait=false"]);
    let job_label = format!("auto.pulumi.com/update-name={job_gone}");
    kubectl(&[
        "-n",
        &ns,
        "delete",
        "jobs",
        "-l",
        &job_label,
        "--wait=false",
    ]);
    wait_until(Duration::from_secs(60), "both objects gone", || async {
        let (update_found, _, _) = kubectl_result(&["-n", &ns, "get", "update", &forced]);
        let jobs = kubectl(&["-n", &ns, "get", "jobs", "-l", &job_label, "-o", "name"]);
        !update_found && jobs.trim().is_empty()
    })
    .await;
    // A new revision meanwhile, which the operator sees only after its re-list.
    let sha = f.repo.commit(&[("Pulumi.yaml", &git_program(2, 1))], "v2");
    for i in stacks {
        f.sn.ns.apply(&stack_object(&f, i, &sha));
    }
    inject(&["etcd-compact"]).await;
    drop(frozen);
    println!(
        "the operator thawed at {:.1}s",
        started.elapsed().as_secs_f64()
    );
    wait_until(
        Duration::from_secs(120),
        "the operator to re-list",
        || async { watch_restarts() > relists_before },
    )
    .await;
    for i in stacks {
        f.wait_stack_for(
            Duration::from_secs(300),
            &format!("s{i}"),
            "Ready after an operation that started once the deleted one's pod stopped",
            |s| stack_ready(s) && output_value(s) == "round-2",
        )
        .await;
        let seen = pulumis.seen(&format!("chaos-{i}"));
        for p in &seen {
            println!(
                "chaos-{i}: pulumi {} (pid {}, pod {}) from {:.1}s to {:.1}s",
                p.operation,
                p.pid,
                p.pod,
                p.first.saturating_duration_since(started).as_secs_f64(),
                p.last.saturating_duration_since(started).as_secs_f64()
            );
        }
        assert!(seen.len() >= 2, "chaos-{i}: the next operation ran");
    }
    assert_eq!(
        pulumis.overlaps_in(&f.sn.backend_url),
        Vec::<String>::new(),
        "an operation started beside the pod of the deleted one"
    );
    assert_eq!(f.lock_files(), 0, "no stack is left locked");
    assert_no_update_stranded(&ns);
}

/// Issue 44: a second pod of one Job. The Job controller creates another pod for a Job that
/// wants one when a pod creation it saw fail was stored after all (an API server that dies
/// mid-request; Kubernetes documents that such a Job "may sometimes be started twice"). This
/// creates that second pod as the Job controller does, from the Job's own template with the Job
/// as its controller, while the first runs Pulumi. It must never run Pulumi: it stays behind the
/// operator's scheduling gate until the Job controller removes it (which fails the operation,
/// and the Stack runs it again). The controller-manager is paused meanwhile, as its informers
/// lag after the API server restart that made the twin: otherwise the Job controller removes
/// the twin within a second and the test would show nothing. Observed from the host's process
/// table.
#[tokio::test]
async fn a_second_pod_of_one_job_never_runs_pulumi() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let f = StackFixture::new("twin").await;
    let pulumis = ProcessObserver::start();
    let sha = f
        .repo
        .commit(&[("Pulumi.yaml", &sleeping_program(25))], "slow");
    f.sn.ns.apply(&f.stack_yaml(
        "app",
        &format!("commit: {sha}"),
        "  retryMaxBackoffDurationSeconds: 5\n",
    ));
    let pod = f.running_runner_pod("app").await;
    let first = pod.metadata.name.clone().unwrap_or_default();
    wait_until(Duration::from_secs(120), "Pulumi running", || async {
        pulumis.alive("dev").iter().any(|p| p.pod == first)
    })
    .await;
    let update = pod.metadata.labels.unwrap_or_default()["auto.pulumi.com/update-name"].clone();
    let job: serde_json::Value = serde_json::from_str(&kubectl(&[
        "-n",
        f.ns(),
        "get",
        "job",
        &update,
        "-o",
        "json",
    ]))
    .expect("the Job");
    let template = &job["spec"]["template"];
    let twin = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": format!("{update}-"),
            "labels": template["metadata"]["labels"],
            "annotations": template["metadata"]["annotations"],
            "finalizers": ["batch.kubernetes.io/job-tracking"],
            "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "Job", "name": update,
                "uid": job["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": template["spec"],
    });
    let paused = tokio::spawn(inject_owned(vec!["controller-manager-pause", "25"]));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let path = std::env::temp_dir().join(format!("{}-twin.json", f.ns()));
    std::fs::write(&path, twin.to_string()).expect("twin manifest");
    let created = kubectl(&[
        "-n",
        f.ns(),
        "create",
        "-f",
        &path.to_string_lossy(),
        "-o",
        "jsonpath={.metadata.name}",
    ]);
    let second = created.trim().to_string();
    println!("the Job's pod {first} runs; its twin {second} was created");
    paused
        .await
        .expect("the controller-manager paused and continued");
    f.wait_stack_for(
        Duration::from_secs(300),
        "app",
        "Ready after the operation with two pods",
        |s| stack_ready(s) && output_value(s) == "rested",
    )
    .await;
    let ran_in: Vec<String> = pulumis.seen("dev").into_iter().map(|s| s.pod).collect();
    println!("Pulumi ran in the pods {ran_in:?}");
    assert!(
        !ran_in.contains(&second),
        "the Job's second pod {second} ran Pulumi: {ran_in:?}"
    );
    assert_eq!(
        pulumis.overlaps_in(&f.sn.backend_url),
        Vec::<String>::new(),
        "two pods of one operation ran Pulumi at once"
    );
    assert_eq!(f.lock_files(), 0, "no lock left");
}
