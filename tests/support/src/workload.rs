//! The workload of the chaos and fault suites (tests/e2e_chaos.rs, tests/e2e_faults.rs):
//! Stacks of three kinds (git with `Delete`, git with `Retain`, Program) taken through
//! revisions, and a background observer of their operations that records what the invariants
//! are checked against: operations of one Stack running at once, triggers that succeeded twice,
//! retained workspaces deleted. The upgrade test (tests/helm_upgrade.rs) runs it too.

use crate::{
    kubectl, kubectl_result, kubectl_stdin, last_update, output_value, stack_ready, StackFixture,
};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use pulumi_operator_api::{Stack, Update};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A size from the environment (`CHAOS_STACKS`, `FAULT_ROUNDS`, ...), else `default`.
pub fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The seed a run replays (`var`, e.g. `CHAOS_SEED`), else a new one from the clock.
pub fn seed_from_env(var: &str) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(7)
                | 1
        })
}

/// A small xorshift generator: reproducible from the printed seed.
pub struct Rng(pub u64);
impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    GitDelete,
    GitRetain,
    Program,
}

pub fn kind(i: usize) -> Kind {
    match i % 3 {
        0 => Kind::GitDelete,
        1 => Kind::GitRetain,
        _ => Kind::Program,
    }
}

pub fn git_program(round: usize, seconds: u32) -> String {
    format!(
        "name: e2e\nruntime: yaml\nresources:\n  nap:\n    type: standin:index:Sleep\n    properties:\n      seconds: {seconds}\n  rec:\n    type: standin:index:Record\n    properties:\n      value: round-{round}\noutputs:\n  value: ${{rec.value}}\n"
    )
}

pub fn program_object(name: &str, round: usize) -> String {
    format!(
        "apiVersion: pulumi.com/v1\nkind: Program\nmetadata: {{name: {name}}}\nprogram:\n  resources:\n    nap:\n      type: standin:index:Sleep\n      properties: {{seconds: 2}}\n    rec:\n      type: standin:index:Record\n      properties: {{value: round-{round}}}\n  outputs:\n    value: ${{rec.value}}\n"
    )
}

pub fn stack_object(f: &StackFixture, i: usize, sha: &str) -> String {
    stack_object_with(f, i, sha, "")
}

/// As [`stack_object`], with `extra` spec lines (two-space indented).
pub fn stack_object_with(f: &StackFixture, i: usize, sha: &str, extra: &str) -> String {
    let name = format!("s{i}");
    let source = match kind(i) {
        Kind::Program => format!("  programRef: {{name: prog-{i}}}\n"),
        _ => format!("  projectRepo: {}\n  commit: {sha}\n", f.url()),
    };
    let retain = if kind(i) == Kind::GitRetain {
        "  workspaceReclaimPolicy: Retain\n"
    } else {
        ""
    };
    let refresh = if i % 2 == 1 { "  refresh: true\n" } else { "" };
    format!(
        "apiVersion: pulumi.com/v1\nkind: Stack\nmetadata: {{name: {name}}}\nspec:\n  stack: chaos-{i}\n  backend: {backend}\n  serviceAccountName: pulumi\n  destroyOnFinalize: true\n  envRefs:\n    PULUMI_CONFIG_PASSPHRASE: {{type: Secret, secret: {{name: passphrase, key: passphrase}}}}\n{source}{retain}{refresh}{extra}",
        backend = f.sn.backend_url
    )
}

#[derive(Default)]
pub struct Observations {
    /// Pods of operations still running, per Stack.
    pub active: BTreeMap<String, BTreeSet<String>>,
    /// Operations of one Stack seen running at once.
    pub overlaps: Vec<String>,
    pub pods_seen: BTreeSet<String>,
    /// Succeeded Updates per (Stack, generation, request, revision, type).
    pub succeeded: BTreeMap<String, BTreeSet<String>>,
    pub updates_by_type: BTreeMap<String, BTreeSet<String>>,
    pub failed_updates: BTreeSet<String>,
    /// Retained StatefulSets and cache claims that were deleted.
    pub retained_deleted: Vec<String>,
}

pub fn terminal(p: &Pod) -> bool {
    matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Watches the namespace's operation pods, Updates and retained workspaces in the background.
pub fn observe(
    client: kube::Client,
    ns: &str,
    obs: Arc<Mutex<Observations>>,
    stop: Arc<AtomicBool>,
    stop_retained: Arc<AtomicBool>,
) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let o = obs.clone();
    let s = stop.clone();
    tokio::spawn(async move {
        let cfg = watcher::Config::default().labels("auto.pulumi.com/update-name");
        let mut events = watcher(pods, cfg).boxed();
        while let Some(ev) = events.next().await {
            if s.load(Ordering::Relaxed) {
                break;
            }
            let Ok(ev) = ev else { continue };
            let (pod, deleted) = match ev {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => (p, false),
                watcher::Event::Delete(p) => (p, true),
                _ => continue,
            };
            let stack = pod
                .labels()
                .get("pulumi.com/stack-name")
                .cloned()
                .unwrap_or_default();
            let name = pod.name_any();
            let Ok(mut o) = o.lock() else { return };
            o.pods_seen.insert(name.clone());
            let active = o.active.entry(stack.clone()).or_default();
            if deleted || terminal(&pod) {
                active.remove(&name);
            } else if !active.contains(&name) {
                let others: Vec<String> = active.iter().cloned().collect();
                active.insert(name.clone());
                if !others.is_empty() {
                    o.overlaps.push(format!(
                        "{stack}: pod {name} started while {others:?} still ran"
                    ));
                }
            }
        }
    });
    let updates: Api<Update> = Api::namespaced(client.clone(), ns);
    let o = obs.clone();
    let s = stop.clone();
    tokio::spawn(async move {
        let mut events = watcher(updates, watcher::Config::default()).boxed();
        while let Some(ev) = events.next().await {
            if s.load(Ordering::Relaxed) {
                break;
            }
            let Ok(watcher::Event::Apply(u) | watcher::Event::InitApply(u)) = ev else {
                continue;
            };
            let cond = |t: &str| {
                u.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == t && c.status == "True"))
            };
            let a = u.annotations();
            let kind = u
                .spec
                .update_type
                .as_ref()
                .map(|t| t.as_str().to_string())
                .unwrap_or_default();
            let trigger = format!(
                "{}/gen={}/req={}/rev={}/{kind}",
                u.labels()
                    .get("pulumi.com/stack-name")
                    .cloned()
                    .unwrap_or_default(),
                a.get("pulumi.com/stack-generation")
                    .cloned()
                    .unwrap_or_default(),
                a.get("pulumi.com/stack-reconcile-request")
                    .cloned()
                    .unwrap_or_default(),
                a.get("pulumi.com/stack-revision")
                    .cloned()
                    .unwrap_or_default(),
            );
            let Ok(mut o) = o.lock() else { return };
            o.updates_by_type
                .entry(kind)
                .or_default()
                .insert(u.name_any());
            if cond("Complete") && cond("Failed") {
                o.failed_updates.insert(u.name_any());
            } else if cond("Complete") {
                o.succeeded.entry(trigger).or_default().insert(u.name_any());
            }
        }
    });
    for kind in ["statefulsets", "persistentvolumeclaims"] {
        let o = obs.clone();
        let s = stop_retained.clone();
        let client = client.clone();
        let ns = ns.to_string();
        tokio::spawn(async move {
            let cfg = watcher::Config::default().labels("auto.pulumi.com/component=workspace");
            let mut names = Vec::new();
            if kind == "statefulsets" {
                let mut ev = watcher(Api::<StatefulSet>::namespaced(client, &ns), cfg).boxed();
                while let Some(e) = ev.next().await {
                    if s.load(Ordering::Relaxed) {
                        break;
                    }
                    if let Ok(watcher::Event::Delete(x)) = e {
                        names.push(format!("StatefulSet {}", x.name_any()));
                    }
                    if let Ok(mut o) = o.lock() {
                        o.retained_deleted.append(&mut names);
                    }
                }
            } else {
                let mut ev =
                    watcher(Api::<PersistentVolumeClaim>::namespaced(client, &ns), cfg).boxed();
                while let Some(e) = ev.next().await {
                    if s.load(Ordering::Relaxed) {
                        break;
                    }
                    if let Ok(watcher::Event::Delete(x)) = e {
                        names.push(format!("claim {}", x.name_any()));
                    }
                    if let Ok(mut o) = o.lock() {
                        o.retained_deleted.append(&mut names);
                    }
                }
            }
        });
    }
}

/// Waits until Stacks `s0`…`s{stacks-1}` are Ready at revision `expected` (commit `sha` for git
/// sources), for at most `limit` seconds.
pub async fn wait_converged(
    f: &StackFixture,
    stacks: usize,
    expected: &str,
    sha: &str,
    limit: u64,
) {
    let api: Api<Stack> = f.stacks();
    let started = Instant::now();
    loop {
        let mut pending = Vec::new();
        for i in 0..stacks {
            match api.get(&format!("s{i}")).await {
                Ok(s)
                    if stack_ready(&s)
                        && output_value(&s) == expected
                        && (kind(i) == Kind::Program
                            || last_update(&s).last_successful_commit.as_deref() == Some(sha))
                        && last_update(&s).generation == s.metadata.generation => {}
                Ok(s) => pending.push(format!(
                    "s{i}: ready={} output={:?} last={:?}",
                    stack_ready(&s),
                    output_value(&s),
                    last_update(&s)
                )),
                Err(e) => pending.push(format!("s{i}: {e}")),
            }
        }
        if pending.is_empty() {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(limit),
            "stacks did not converge to {expected} in {limit}s: {pending:#?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// `kubectl` as a person or a CD tool runs it while the control plane restarts: retried until
/// the API server takes it (up to 2 minutes).
pub fn kubectl_retrying(args: &[&str], input: Option<&str>) -> String {
    let started = Instant::now();
    loop {
        let (ok, out, err) = match input {
            Some(yaml) => kubectl_stdin(args, yaml),
            None => kubectl_result(args),
        };
        if ok {
            return out;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "kubectl {args:?} failed for 2 minutes: {err}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}

pub fn apply_retrying(f: &StackFixture, yaml: &str) {
    kubectl_retrying(&["-n", f.ns(), "apply", "-f", "-"], Some(yaml));
}

/// Applies revision `round` to every Stack of the fleet; returns the commit.
pub fn apply_round(f: &StackFixture, stacks: usize, round: usize) -> String {
    apply_round_sleeping(f, stacks, round, 2)
}

/// As [`apply_round`], with git programs that take `seconds` to deploy.
pub fn apply_round_sleeping(f: &StackFixture, stacks: usize, round: usize, seconds: u32) -> String {
    let sha = f.repo.commit(
        &[("Pulumi.yaml", &git_program(round, seconds))],
        &format!("round {round}"),
    );
    for i in 0..stacks {
        if kind(i) == Kind::Program {
            apply_retrying(f, &program_object(&format!("prog-{i}"), round));
        }
        apply_retrying(f, &stack_object(f, i, &sha));
    }
    sha
}

/// What no fault may break, checked from the observations and the cluster at the end.
pub fn assert_invariants(obs: &Arc<Mutex<Observations>>, f: &StackFixture) {
    let o = obs.lock().expect("observations");
    assert!(
        o.overlaps.is_empty(),
        "two operations of one Stack ran at once: {:#?}",
        o.overlaps
    );
    let duplicates: Vec<String> = o
        .succeeded
        .iter()
        .filter(|(_, names)| names.len() > 1)
        .map(|(t, n)| format!("{t}: {n:?}"))
        .collect();
    assert!(
        duplicates.is_empty(),
        "a trigger succeeded more than once: {duplicates:#?}"
    );
    assert!(
        o.retained_deleted.is_empty(),
        "retained workspaces or cache claims were deleted while their Stacks lived: {:?}",
        o.retained_deleted
    );
    assert_eq!(f.lock_files(), 0, "no stack is left locked");
}

/// Every Update of the namespace has ended (`Complete=True`).
pub fn assert_no_update_stranded(ns: &str) {
    let complete = kubectl(&[
        "-n",
        ns,
        "get",
        "updates",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Complete\")].status}{\"\\n\"}{end}",
    ]);
    let stranded: Vec<&str> = complete.lines().filter(|l| !l.ends_with("=True")).collect();
    assert!(
        stranded.is_empty(),
        "Updates left without an end: {stranded:?} (of {} Updates)",
        complete.lines().count()
    );
}
