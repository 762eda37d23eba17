//! The Stack benchmark: what an operator of the Stack API costs and how fast it reacts, at N
//! Stacks, measured through the API alone (Stacks in, Updates/Jobs/pods seen by watches) so
//! that the same command measures any implementation installed in the cluster. One command:
//!
//!     tests/bench.sh 1000          # release build; BENCH_* variables below tune it
//!
//! (which builds the release binaries, points the test cluster at them, and runs
//! `cargo test --release --test bench benchmark -- --ignored --nocapture`). Phases:
//! 0. the floors (BENCH_FLOORS=1), first, in the same run on the same cluster:
//!    `tests/bench/api-cost.py floor N` (stand-in controllers that POST one Job per Stack as
//!    each appears) and `api-cost.py api-floor N` (per Stack one status write, the Update and
//!    its Job: what a first operation needs in this API), each while N Stacks are applied from
//!    one file, with the operator stopped and the nodes cordoned; then the operator is back,
//!    Ready and holding its Lease before anything of it is measured. Phase 1's "all Jobs" is
//!    reported as a multiple of each floor (result.json: `floors`, `burst.vs_job_floor`,
//!    `burst.vs_api_floor`; the last line of result.md);
//! 1. reaction and throughput with pods held Pending (nodes cordoned, so that running Pulumi
//!    does not take the CPU being measured): N commit-pinned Stacks applied at once from one
//!    file (`kubectl apply --server-side -f`) → each Stack's first Update and first Job, then
//!    BENCH_SINGLES Stacks applied one at a time while N exist; the namespace is then deleted
//!    (N Stacks with finalizers) and timed;
//! 2. with pods running (real Pulumi, one small YAML program): BENCH_READY_STACKS Stacks
//!    tracking one branch → all Ready, with the controller-manager's Job → pod pace beside it;
//! 3. steady state: those Stacks left synced for BENCH_IDLE_SECONDS: the operator's requests
//!    per minute and CPU, and ls-remote calls (reference advertisements the git server
//!    served) per resync interval; then what each synced Stack leaves behind (pods,
//!    StatefulSets, claims).
//!
//! Cost is read from the operator's process (/proc: resident memory and CPU; the test cluster
//! runs pods as local processes) and from the API server's audit log (requests by verb and
//! resource, by the operator's user). Results go to BENCH_OUT (default target/bench/<time>):
//! result.json, result.md, latency-cdf.png.
//!
//! BENCH_STACKS (100) · BENCH_FLOORS (1; 0 skips phase 0; the floors stop only the deployment
//! pulumi-operator/pulumi-operator: with BENCH_INSTALL=0, another operator must not run; they
//! apply one file: with BENCH_APPLY_PARALLEL > 1 they are no like-for-like floor) ·
//! BENCH_SINGLES (20) · BENCH_READY_STACKS (10; 0 skips phases 2–3) · BENCH_IDLE_SECONDS (60) ·
//! BENCH_RESYNC_SECONDS (60, the branch Stacks' resync interval) ·
//! BENCH_INSTALL (1: install this operator; 0: measure what is installed) ·
//! BENCH_OPERATOR_PROCESS (pulumi-operator: the operator's executable name) ·
//! BENCH_OPERATOR_USER (system:serviceaccount:pulumi-operator:pulumi-operator) ·
//! BENCH_AUDIT_LOG (.local-cluster/logs/audit.log) · BENCH_OUT · BENCH_APPLY_PARALLEL (1: one
//! `kubectl apply` of one file; k: k files applied side by side, for N = 10,000 by hand).
//!
//!     BENCH_RUNS=5 cargo test --test bench runner -- --ignored --nocapture
//!
//! Runs one small real-Pulumi update per Stack, one after the other, and prints from each
//! Job's pod status and `kubectl logs --timestamps`: the runner's first line (its first `pulumi`
//! process) → the `pulumi up` process, the `pulumi` container's duration, and the Job's whole
//! time (created → complete; whole seconds).
//!
//!     BENCH_RUNS=3 cargo test --release -p pulumi-operator-tests --test bench real_program_operation -- --ignored --nocapture
//!
//! (`BENCH_PROGRAMS=python` runs one of the two programs, `BENCH_MODES=a,b` some modes; each
//! Job run also prints where its time went, from its containers' log timestamps, and with
//! `BENCH_JOB_LOGS=1` the runner's lines at their time since the request.)
//!
//! A real program's unchanged operation, like for like, for the TypeScript and the Python test
//! programs (tests/programs), each in a namespace of its own, BENCH_RUNS times per mode after
//! untimed warm-up: (a) `pulumi up --skip-preview --yes` by hand on an existing stack, the
//! dependencies installed once (`pulumi install --no-plugins`), a file backend, the CLI and
//! provider of the cluster's Pulumi image (`.local-cluster/pulumi-image`) and the cluster's
//! kubeconfig; then as update Jobs, each timed from a new `pulumi.com/reconciliation-request`
//! on the Stack to its lastUpdate's succeeded result for that request: (b) with the dependency
//! cache claim, (c) without any dependency cache, (d) with `workspaceReclaimPolicy: Retain`,
//! (e) with the cache and the program committed without its lockfile (TypeScript only). Prints
//! medians and each mode's ratio to (a), beside the targets (b)/(a) ≤ 1.3 and (e)/(a) ≤ 1.5,
//! and writes the table to BENCH_OUT (default target/bench/<time>)/real-program.md.

#[path = "bench/plot.rs"]
mod plot;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Resource, ResourceExt};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use test_support::{kubectl, last_update, program_files, stack_ready, StackFixture};

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

// ------------------------------------------------------------------------------------------
// The operator's process: resident memory and CPU time from /proc.
// ------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, Default)]
struct ProcSample {
    rss_kib: u64,
    cpu_seconds: f64,
}

fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// The operator's processes (argv[0] ending in `/NAME` or equal to NAME), summed.
fn operator_sample(name: &str, ticks: f64) -> Option<ProcSample> {
    let mut found = None::<ProcSample>;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
        let argv0 = String::from_utf8_lossy(argv0);
        if !(argv0 == name || argv0.ends_with(&format!("/{name}"))) {
            continue;
        }
        let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
        let rss = status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        // Fields after the command name (which may hold spaces): utime is the 14th, stime the
        // 15th field of the line.
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
        let f: Vec<&str> = after.split_whitespace().collect();
        let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        let cpu = (t(11) + t(12)) / ticks;
        let s = found.get_or_insert_with(ProcSample::default);
        s.rss_kib += rss;
        s.cpu_seconds += cpu;
    }
    found
}

/// Samples the operator every 200 ms while a phase runs: peak RSS, CPU used.
/// The test cluster's processes (local processes here), sampled beside the operator during
/// the burst: what bounds the apply is the machine they share.
const CLUSTER_PROCESSES: &[&str] = &[
    "kube-apiserver",
    "etcd",
    "kube-controller-manager",
    "kube-scheduler",
    "node-agent",
    "kubectl",
];

struct Sampler {
    stop: Arc<std::sync::atomic::AtomicBool>,
    task: std::thread::JoinHandle<(Option<ProcSample>, Option<ProcSample>, u64)>,
}

impl Sampler {
    fn start(name: &str) -> Sampler {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (flag, name) = (stop.clone(), name.to_string());
        let task = std::thread::spawn(move || {
            let ticks = clock_ticks();
            let first = operator_sample(&name, ticks);
            let mut peak = first.map(|s| s.rss_kib).unwrap_or(0);
            let mut last = first;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                if let Some(s) = operator_sample(&name, ticks) {
                    peak = peak.max(s.rss_kib);
                    last = Some(s);
                }
            }
            (first, last, peak)
        });
        Sampler { stop, task }
    }

    fn finish(self) -> Value {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (first, last, peak) = self.task.join().unwrap_or((None, None, 0));
        match (first, last) {
            (Some(a), Some(b)) => json!({
                "rss_start_mib": mib(a.rss_kib),
                "rss_end_mib": mib(b.rss_kib),
                "rss_peak_mib": mib(peak),
                "cpu_seconds": round3(b.cpu_seconds - a.cpu_seconds),
            }),
            _ => json!(null),
        }
    }
}

fn mib(kib: u64) -> f64 {
    round3(kib as f64 / 1024.0)
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

// ------------------------------------------------------------------------------------------
// The API server's audit log: the operator's requests in a time window, by verb and resource.
// ------------------------------------------------------------------------------------------

struct Audit {
    path: std::path::PathBuf,
    user: String,
}

impl Audit {
    /// Requests of the operator's user whose receipt falls in [from, to], in namespace `ns` or
    /// outside every test namespace (`t-…`: leftovers of other tests are not this run's cost):
    /// verb → resource → count, plus the total.
    fn requests(
        &self,
        ns: &str,
        from: jiff::Timestamp,
        to: jiff::Timestamp,
    ) -> (u64, BTreeMap<String, u64>) {
        let text = std::fs::read_to_string(&self.path).unwrap_or_default();
        let mut by = BTreeMap::<String, u64>::new();
        let mut total = 0;
        for line in text.lines() {
            let Ok(e) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            if e["user"]["username"].as_str() != Some(self.user.as_str()) {
                continue;
            }
            let Some(at) = e["requestReceivedTimestamp"]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            else {
                continue;
            };
            if at < from || at > to {
                continue;
            }
            let o = &e["objectRef"];
            let in_ns = o["namespace"].as_str().unwrap_or_default();
            if in_ns != ns && in_ns.starts_with("t-") {
                continue;
            }
            let mut resource = o["resource"].as_str().unwrap_or("(discovery)").to_string();
            if let Some(sub) = o["subresource"].as_str() {
                resource = format!("{resource}/{sub}");
            }
            let verb = e["verb"].as_str().unwrap_or_default();
            *by.entry(format!("{verb} {resource}")).or_default() += 1;
            total += 1;
        }
        (total, by)
    }

    fn present(&self) -> bool {
        self.path.exists()
    }
}

// ------------------------------------------------------------------------------------------
// What the watches saw: when each Stack, Update, Job and pod first appeared, and who owns whom.
// ------------------------------------------------------------------------------------------

#[derive(Default)]
struct Timeline {
    stacks: HashMap<String, Instant>,
    /// Update → (its Stack, first seen).
    updates: HashMap<String, (String, Instant)>,
    /// Job → (its Update, first seen).
    jobs: HashMap<String, (String, Instant)>,
    /// Pod → (its Job, first seen).
    pods: HashMap<String, (String, Instant)>,
    ready: HashMap<String, Instant>,
}

impl Timeline {
    fn first_update(&self) -> HashMap<&str, Instant> {
        let mut out = HashMap::<&str, Instant>::new();
        for (stack, at) in self.updates.values() {
            let e = out.entry(stack.as_str()).or_insert(*at);
            *e = (*e).min(*at);
        }
        out
    }

    fn first_job(&self) -> HashMap<&str, Instant> {
        let mut out = HashMap::<&str, Instant>::new();
        for (update, at) in self.jobs.values() {
            if let Some((stack, _)) = self.updates.get(update) {
                let e = out.entry(stack.as_str()).or_insert(*at);
                *e = (*e).min(*at);
            }
        }
        out
    }
}

fn owner_of_kind<K: Resource>(obj: &K, kind: &str) -> Option<String> {
    obj.meta()
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == kind)
        .map(|o| o.name.clone())
}

/// Starts the four watches of `ns`; they record into the returned timeline until aborted.
fn watch_namespace(
    client: &kube::Client,
    ns: &str,
) -> (Arc<Mutex<Timeline>>, Vec<tokio::task::JoinHandle<()>>) {
    let timeline = Arc::new(Mutex::new(Timeline::default()));
    let mut tasks = Vec::new();
    {
        let (t, api) = (
            timeline.clone(),
            Api::<pulumi_operator_api::Stack>::namespaced(client.clone(), ns),
        );
        tasks.push(tokio::spawn(async move {
            let mut s = watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(Ok(stack)) = s.next().await {
                let now = Instant::now();
                let mut t = t.lock().expect("timeline");
                let name = stack.name_any();
                t.stacks.entry(name.clone()).or_insert(now);
                if stack_ready(&stack) {
                    t.ready.entry(name).or_insert(now);
                }
            }
        }));
    }
    {
        let (t, api) = (
            timeline.clone(),
            Api::<pulumi_operator_api::Update>::namespaced(client.clone(), ns),
        );
        tasks.push(tokio::spawn(async move {
            let mut s = watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(Ok(u)) = s.next().await {
                if let Some(stack) = owner_of_kind(&u, "Stack") {
                    let mut t = t.lock().expect("timeline");
                    t.updates
                        .entry(u.name_any())
                        .or_insert((stack, Instant::now()));
                }
            }
        }));
    }
    {
        let (t, api) = (timeline.clone(), Api::<Job>::namespaced(client.clone(), ns));
        tasks.push(tokio::spawn(async move {
            let mut s = watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(Ok(j)) = s.next().await {
                if let Some(update) = owner_of_kind(&j, "Update") {
                    let mut t = t.lock().expect("timeline");
                    t.jobs
                        .entry(j.name_any())
                        .or_insert((update, Instant::now()));
                }
            }
        }));
    }
    {
        let (t, api) = (timeline.clone(), Api::<Pod>::namespaced(client.clone(), ns));
        tasks.push(tokio::spawn(async move {
            let mut s = watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(Ok(p)) = s.next().await {
                if let Some(job) = owner_of_kind(&p, "Job") {
                    let mut t = t.lock().expect("timeline");
                    t.pods.entry(p.name_any()).or_insert((job, Instant::now()));
                }
            }
        }));
    }
    (timeline, tasks)
}

// ------------------------------------------------------------------------------------------
// The floors: the same burst served by stand-ins that cost nothing (tests/bench/api-cost.py),
// in the same run on the same cluster, with the operator stopped and the nodes cordoned.
// ------------------------------------------------------------------------------------------

/// `api-cost.py floor N` (one Job per Stack) and `api-cost.py api-floor N` (one Stack status
/// write, the Update and the Job per Stack), then the operator back.
fn floors(n: usize) -> Value {
    let job = floor_run("floor", n);
    let api = floor_run("api-floor", n);
    operator_back();
    json!({"job": job, "api": api})
}

/// One floor: its last line of output, JSON (`all_jobs_seconds`, `apply_seconds`, …).
fn floor_run(mode: &str, n: usize) -> Value {
    let script = test_support::repo_root().join("tests/bench/api-cost.py");
    let out = std::process::Command::new("python3")
        .arg(&script)
        .args([mode, &n.to_string()])
        .env("KUBECONFIG", test_support::kubeconfig())
        .output()
        .unwrap_or_else(|e| panic!("running python3: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprint!("{mode}: {stdout}");
    assert!(
        out.status.success(),
        "api-cost.py {mode} {n} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("api-cost.py {mode}: no JSON last line ({e}): {last}"))
}

/// The operator's Deployment (if installed) rolled out, and its leader Lease (if it elects one)
/// held by one of its running pods: a Ready standby does not reconcile yet.
fn operator_back() {
    let ns = test_support::OPERATOR_NAMESPACE;
    let (installed, _, _) =
        test_support::kubectl_result(&["-n", ns, "get", "deployment", "pulumi-operator"]);
    if !installed {
        return;
    }
    let deployment = "deployment/pulumi-operator";
    kubectl(&["-n", ns, "rollout", "status", deployment, "--timeout=180s"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (elects, holder, _) = test_support::kubectl_result(&[
            "-n",
            ns,
            "get",
            "lease",
            "pulumi-operator-leader",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ]);
        let pods = test_support::running_operator_pods("name");
        let holder = format!("pod/{}", holder.trim());
        if !elects || pods.lines().any(|p| p == holder) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the operator's Lease is held by {holder}, not a running pod of its Deployment"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The burst's "all Jobs" as a multiple of each floor measured in this run.
fn floor_ratios(r: &mut Value) {
    let ours = r["burst"]["all_jobs_seconds"].as_f64().unwrap_or(f64::NAN);
    for (floor, key) in [("job", "vs_job_floor"), ("api", "vs_api_floor")] {
        let at = r["floors"][floor]["all_jobs_seconds"].as_f64();
        r["burst"][key] = at.map(|f| json!(round3(ours / f))).unwrap_or(Value::Null);
    }
}

/// "burst: 61.9 s = 2.59× the Job floor (23.9 s), 2.11× the API floor (29.4 s)", when the
/// floors ran.
fn floors_line(r: &Value) -> Option<String> {
    let ours = r["burst"]["all_jobs_seconds"].as_f64()?;
    let ratio = |floor: &str, name: &str| -> Option<String> {
        let at = r["floors"][floor]["all_jobs_seconds"].as_f64()?;
        Some(format!("{:.2}× the {name} floor ({at:.1} s)", ours / at))
    };
    Some(format!(
        "burst: {ours:.1} s = {}, {}",
        ratio("job", "Job")?,
        ratio("api", "API")?
    ))
}

// ------------------------------------------------------------------------------------------
// Figures.
// ------------------------------------------------------------------------------------------

fn percentiles(mut v: Vec<f64>) -> Value {
    v.sort_by(|a, b| a.total_cmp(b));
    let p = |q: f64| {
        if v.is_empty() {
            return Value::Null;
        }
        // Nearest rank.
        let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
        json!(round3(v[i]))
    };
    json!({
        "count": v.len(),
        "p50": p(0.50), "p90": p(0.90), "p99": p(0.99),
        "max": v.last().map(|m| round3(*m)),
    })
}

fn since(later: Instant, earlier: Instant) -> f64 {
    later.saturating_duration_since(earlier).as_secs_f64()
}

/// Cordons every node for as long as it lives (pods stay Pending), uncordons on drop.
struct Cordon(Vec<String>);

impl Cordon {
    fn all() -> Cordon {
        let nodes: Vec<String> = kubectl(&["get", "nodes", "-o", "name"])
            .lines()
            .map(str::to_string)
            .collect();
        for n in &nodes {
            kubectl(&["cordon", n]);
        }
        Cordon(nodes)
    }
}

impl Drop for Cordon {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = test_support::kubectl_result(&["uncordon", n]);
        }
    }
}

async fn wait_deleted(client: &kube::Client, ns: &str, timeout: Duration) -> Option<f64> {
    let api: Api<Namespace> = Api::all(client.clone());
    let start = Instant::now();
    while start.elapsed() < timeout {
        match api.get_opt(ns).await {
            Ok(None) => return Some(start.elapsed().as_secs_f64()),
            _ => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
    None
}

/// Where a run's results go: BENCH_OUT, or target/bench/<time> (created).
fn bench_out_dir() -> std::path::PathBuf {
    let out_dir = std::env::var("BENCH_OUT")
        .map(Into::into)
        .unwrap_or_else(|_| {
            test_support::repo_root().join(format!(
                "target/bench/{}",
                jiff::Timestamp::now().strftime("%Y%m%dT%H%M%SZ")
            ))
        });
    std::fs::create_dir_all(&out_dir).expect("the output directory");
    out_dir
}

const PROGRAM: &str = "name: bench\nruntime: yaml\nresources:\n  a:\n    type: standin:index:Record\n    properties: {value: x}\noutputs:\n  v: ${a.value}\n";

#[tokio::test]
#[ignore = "benchmark: tests/bench.sh N"]
async fn benchmark() {
    let n: usize = env_or("BENCH_STACKS", 100);
    let singles: usize = env_or("BENCH_SINGLES", 20);
    let ready_n: usize = env_or("BENCH_READY_STACKS", 10);
    let idle_seconds: u64 = env_or("BENCH_IDLE_SECONDS", 60);
    let resync: u64 = env_or("BENCH_RESYNC_SECONDS", 60);
    let install = env_or("BENCH_INSTALL", 1) == 1;
    let process: String = env_or("BENCH_OPERATOR_PROCESS", "pulumi-operator".to_string());
    let audit = Audit {
        path: std::env::var("BENCH_AUDIT_LOG")
            .map(Into::into)
            .unwrap_or_else(|_| test_support::repo_root().join(".local-cluster/logs/audit.log")),
        user: env_or(
            "BENCH_OPERATOR_USER",
            "system:serviceaccount:pulumi-operator:pulumi-operator".to_string(),
        ),
    };
    let out_dir = bench_out_dir();
    if install {
        test_support::install_operator().await;
    }
    // The floors before the operator's burst: they stop and restart the operator, which is then
    // back, Ready and leading before any figure of it is taken (idle, burst, after); the three
    // bursts run back to back on the same control plane; a floor that fails ends the run early.
    let floors = (env_or("BENCH_FLOORS", 1) == 1).then(|| floors(n));
    let ticks = clock_ticks();
    let mut result = json!({
        "machine": machine(),
        "operator": {"process": process, "audit_user": audit.user},
        "n": n,
        "floors": floors,
    });
    let operator_found = operator_sample(&process, ticks).is_some();
    if !operator_found {
        eprintln!(
            "no process named {process}: memory and CPU are not measured (BENCH_OPERATOR_PROCESS)"
        );
    }
    if !audit.present() {
        eprintln!(
            "no audit log at {}: requests are not counted (BENCH_AUDIT_LOG)",
            audit.path.display()
        );
    }

    // Idle, before anything.
    let idle = Sampler::start(&process);
    tokio::time::sleep(Duration::from_secs(5)).await;
    result["idle_before"] = idle.finish();

    // ---- Phase 1: reaction and throughput, pods held Pending. ----
    let f = StackFixture::create("bench", install).await;
    let sha = f.repo.commit(&[("Pulumi.yaml", PROGRAM)], "bench");
    let client = f.sn.ns.client.clone();
    let (timeline, tasks) = watch_namespace(&client, f.ns());
    let cordon = Cordon::all();
    // One file, one `kubectl apply` (as a user would); BENCH_APPLY_PARALLEL=k splits it into k
    // files applied side by side, for N = 10,000 by hand (one kubectl applies ~10 Stacks/s).
    let parallel: usize = env_or("BENCH_APPLY_PARALLEL", 1usize).clamp(1, 64);
    let files: Vec<String> = (0..parallel)
        .map(|part| {
            let manifest: String = (part..n)
                .step_by(parallel)
                .map(|i| f.stack_yaml(&format!("s{i}"), &format!("commit: {sha}"), ""))
                .collect::<Vec<_>>()
                .join("---\n");
            let name = if parallel == 1 {
                "stacks.yaml".to_string()
            } else {
                format!("stacks-{part}.yaml")
            };
            let file = out_dir.join(name);
            std::fs::write(&file, &manifest).expect("the Stacks file");
            file.to_string_lossy().into_owned()
        })
        .collect();
    let burst = Sampler::start(&process);
    // Who else works during the burst, on the same cores (the test cluster's processes).
    let others: Vec<(&str, Sampler)> = CLUSTER_PROCESSES
        .iter()
        .map(|name| (*name, Sampler::start(name)))
        .collect();
    let wall_from = jiff::Timestamp::now();
    let start = Instant::now();
    let ns = f.ns().to_string();
    let appliers: Vec<_> = files
        .into_iter()
        .map(|file| {
            let ns = ns.clone();
            std::thread::spawn(move || {
                test_support::kubectl_result(&["-n", &ns, "apply", "--server-side", "-f", &file])
            })
        })
        .collect();
    for applier in appliers {
        let (ok, _, err) = applier.join().expect("kubectl apply thread");
        assert!(ok, "applying the Stacks: {err}");
    }
    let applied_in = start.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let done = timeline.lock().expect("timeline").first_job().len();
        if done >= n || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let wall_to = jiff::Timestamp::now();
    let all_jobs_in = start.elapsed().as_secs_f64();
    let burst_cost = burst.finish();
    let cluster_cpu: serde_json::Map<String, Value> = others
        .into_iter()
        .map(|(name, sampler)| (name.to_string(), sampler.finish()["cpu_seconds"].clone()))
        .collect();
    let (burst_requests, burst_by) = audit.requests(f.ns(), wall_from, wall_to);
    let (to_update, to_job, last_stack_to_last_job) = {
        let t = timeline.lock().expect("timeline");
        let (fu, fj) = (t.first_update(), t.first_job());
        let mut to_update = Vec::new();
        let mut to_job = Vec::new();
        for (s, at) in &t.stacks {
            if let Some(u) = fu.get(s.as_str()) {
                to_update.push(since(*u, *at));
            }
            if let Some(j) = fj.get(s.as_str()) {
                to_job.push(since(*j, *at));
            }
        }
        let last_stack = t.stacks.values().max().copied();
        let last_job = fj.values().max().copied();
        let gap = match (last_stack, last_job) {
            (Some(s), Some(j)) => Some(round3(since(j, s))),
            _ => None,
        };
        (to_update, to_job, gap)
    };
    let jobs_created = to_job.len();
    result["burst"] = json!({
        "stacks": n,
        "apply_seconds": round3(applied_in),
        "jobs_created": jobs_created,
        "all_jobs_seconds": round3(all_jobs_in),
        "last_stack_to_last_job_seconds": last_stack_to_last_job,
        "stack_to_update": percentiles(to_update),
        "stack_to_job": percentiles(to_job.clone()),
        "operator": burst_cost,
        "cluster_cpu_seconds": cluster_cpu,
        "requests": burst_requests,
        "requests_per_stack": round3(burst_requests as f64 / n.max(1) as f64),
        "requests_by_verb": burst_by,
    });

    floor_ratios(&mut result);
    eprintln!("burst: {}", result["burst"]);
    // One Stack at a time while N exist.
    let mut single_latencies = Vec::new();
    for i in 0..singles {
        let name = format!("single{i}");
        let applied = Instant::now();
        f.sn.ns
            .apply(&f.stack_yaml(&name, &format!("commit: {sha}"), ""));
        let deadline = applied + Duration::from_secs(60);
        loop {
            let seen = {
                let t = timeline.lock().expect("timeline");
                let stack_seen = t.stacks.get(&name).copied();
                t.first_job()
                    .get(name.as_str())
                    .map(|j| since(*j, stack_seen.unwrap_or(applied)))
            };
            if let Some(l) = seen {
                single_latencies.push(l);
                break;
            }
            if Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    result["single"] = json!({
        "existing_stacks": n,
        "stack_to_job": percentiles(single_latencies.clone()),
    });
    let after = Sampler::start(&process);
    tokio::time::sleep(Duration::from_secs(5)).await;
    result["after_burst"] = after.finish();
    for t in tasks {
        t.abort();
    }
    // Delete the namespace with every Stack (finalizers) before any pod may run.
    let ns_name = f.ns().to_string();
    let deleting = Sampler::start(&process);
    kubectl(&["delete", "namespace", &ns_name, "--wait=false"]);
    let deleted_in = wait_deleted(&client, &ns_name, Duration::from_secs(600)).await;
    result["delete_namespace"] = json!({
        "stacks": n + singles,
        "seconds": deleted_in.map(round3),
        "operator": deleting.finish(),
    });
    eprintln!(
        "single: {}; deletion: {}",
        result["single"], result["delete_namespace"]
    );
    drop(f);
    drop(cordon);

    // ---- Phases 2 and 3: pods running, then at rest. ----
    if ready_n > 0 {
        let root = std::env::temp_dir().join(format!("bench-git-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).expect("git root");
        let repo = test_support::GitRepo::new(&root, "app");
        repo.commit(&[("Pulumi.yaml", PROGRAM)], "bench");
        let server = test_support::LoggedGitServer::start(&root, &[]);
        let sn = test_support::StackNamespace::create("bench-ready", install).await;
        let (timeline, tasks) = watch_namespace(&client, &sn.ns.name);
        let manifest: String = (0..ready_n)
            .map(|i| {
                format!(
                    r#"apiVersion: pulumi.com/v1
kind: Stack
metadata: {{name: r{i}}}
spec:
  stack: r{i}
  projectRepo: {url}/app.git
  branch: main
  resyncFrequencySeconds: {resync}
  backend: {backend}
  serviceAccountName: pulumi
  envRefs:
    PULUMI_CONFIG_PASSPHRASE:
      type: Secret
      secret: {{name: passphrase, key: passphrase}}
"#,
                    url = server.url,
                    backend = sn.backend_url
                )
            })
            .collect::<Vec<_>>()
            .join("---\n");
        let file = out_dir.join("ready-stacks.yaml");
        std::fs::write(&file, &manifest).expect("the Stacks file");
        let file_arg = file.to_string_lossy().into_owned();
        let running = Sampler::start(&process);
        let wall_from = jiff::Timestamp::now();
        let start = Instant::now();
        let (ok, _, err) = test_support::kubectl_result(&[
            "-n",
            &sn.ns.name,
            "apply",
            "--server-side",
            "-f",
            &file_arg,
        ]);
        assert!(ok, "applying the Stacks: {err}");
        let deadline = Instant::now() + Duration::from_secs(60 + 30 * ready_n as u64);
        while timeline.lock().expect("timeline").ready.len() < ready_n && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let all_ready = start.elapsed().as_secs_f64();
        let wall_to = jiff::Timestamp::now();
        let cost = running.finish();
        let (requests, by) = audit.requests(&sn.ns.name, wall_from, wall_to);
        let (ready_count, to_ready, job_to_pod, pod_span) = {
            let t = timeline.lock().expect("timeline");
            let to_ready: Vec<f64> = t
                .ready
                .iter()
                .filter_map(|(s, r)| t.stacks.get(s).map(|a| since(*r, *a)))
                .collect();
            let job_to_pod: Vec<f64> = t
                .pods
                .values()
                .filter_map(|(job, at)| t.jobs.get(job).map(|(_, j)| since(*at, *j)))
                .collect();
            let first = t.pods.values().map(|p| p.1).min();
            let last = t.pods.values().map(|p| p.1).max();
            let span = match (first, last) {
                (Some(a), Some(b)) => since(b, a),
                _ => 0.0,
            };
            (t.ready.len(), to_ready, job_to_pod, (t.pods.len(), span))
        };
        result["ready"] = json!({
            "stacks": ready_n,
            "ready": ready_count,
            "all_ready_seconds": round3(all_ready),
            "stack_to_ready": percentiles(to_ready),
            "job_to_pod": percentiles(job_to_pod),
            "pods_created": pod_span.0,
            "pods_per_second": if pod_span.1 > 0.0 { json!(round3(pod_span.0 as f64 / pod_span.1)) } else { Value::Null },
            "operator": cost,
            "requests": requests,
            "requests_per_stack": round3(requests as f64 / ready_n as f64),
            "requests_by_verb": by,
        });

        eprintln!("ready: {}", result["ready"]);
        // At rest: synced Stacks, nothing changes.
        let before = server.advertisements("app.git", "200");
        let resting = Sampler::start(&process);
        let wall_from = jiff::Timestamp::now();
        tokio::time::sleep(Duration::from_secs(idle_seconds)).await;
        let wall_to = jiff::Timestamp::now();
        let cost = resting.finish();
        let (requests, by) = audit.requests(&sn.ns.name, wall_from, wall_to);
        let ls_remotes = server.advertisements("app.git", "200") - before;
        let minutes = idle_seconds as f64 / 60.0;
        result["steady"] = json!({
            "stacks": ready_n,
            "seconds": idle_seconds,
            "requests_per_minute": round3(requests as f64 / minutes),
            "requests_by_verb": by,
            "operator": cost,
            "ls_remote_calls": ls_remotes,
            "resync_seconds": resync,
            "ls_remote_per_interval": round3(ls_remotes as f64 / (idle_seconds as f64 / resync as f64)),
        });

        // What each synced Stack leaves behind.
        let count = |kind: &str, extra: &[&str]| -> usize {
            let mut args = vec!["-n", sn.ns.name.as_str(), "get", kind, "-o", "name"];
            args.extend_from_slice(extra);
            kubectl(&args).lines().count()
        };
        let running_pods = count("pods", &["--field-selector=status.phase=Running"]);
        let pods = count("pods", &[]);
        let statefulsets = count("statefulsets", &[]);
        let claims = count("persistentvolumeclaims", &[]);
        let per = |v: usize| round3(v as f64 / ready_n as f64);
        result["footprint_per_stack"] = json!({
            "running_pods": per(running_pods),
            "pod_objects": per(pods),
            "statefulsets": per(statefulsets),
            "persistentvolumeclaims": per(claims),
        });
        // Deleting synced Stacks (nothing in flight, no destroy): how long until they are gone.
        let stacks_api: Api<pulumi_operator_api::Stack> =
            Api::namespaced(client.clone(), &sn.ns.name);
        let start = Instant::now();
        sn.ns
            .kubectl(&["delete", "stacks", "--all", "--wait=false"]);
        let mut gone_in = None;
        while start.elapsed() < Duration::from_secs(300) {
            if stacks_api
                .list(&Default::default())
                .await
                .is_ok_and(|l| l.items.is_empty())
            {
                gone_in = Some(round3(start.elapsed().as_secs_f64()));
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        result["delete_synced"] = json!({"stacks": ready_n, "seconds": gone_in});
        for t in tasks {
            t.abort();
        }
        drop(sn);
        let _ = std::fs::remove_dir_all(&root);
    }
    result["idle_after"] = {
        let s = Sampler::start(&process);
        tokio::time::sleep(Duration::from_secs(5)).await;
        s.finish()
    };

    std::fs::write(
        out_dir.join("result.json"),
        serde_json::to_string_pretty(&result).expect("json"),
    )
    .expect("result.json");
    let md = markdown(&result);
    std::fs::write(out_dir.join("result.md"), &md).expect("result.md");
    let png = plot::cdf_png(
        &format!("STACK APPLIED -> JOB CREATED (N={n})"),
        &[
            (format!("{n} APPLIED AT ONCE"), to_job),
            (format!("ONE AT A TIME, {n} EXIST"), single_latencies),
        ],
    );
    std::fs::write(out_dir.join("latency-cdf.png"), png).expect("latency-cdf.png");
    println!("{md}");
    println!("results in {}", out_dir.display());
    assert_eq!(jobs_created, n, "some Stacks got no Job within 10 minutes");
}

fn machine() -> Value {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let mem_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .unwrap_or(0);
    let server = kubectl(&["version", "-o", "json"]);
    let server: Value = serde_json::from_str(&server).unwrap_or_default();
    json!({
        "cpus": cpus,
        "memory_gib": round3(mem_kib as f64 / 1024.0 / 1024.0),
        "kubernetes": server["serverVersion"]["gitVersion"],
    })
}

fn lat(v: &Value) -> String {
    if v["count"].as_u64().unwrap_or(0) == 0 {
        return "–".to_string();
    }
    format!(
        "p50 {} · p90 {} · p99 {} · max {} s",
        v["p50"], v["p90"], v["p99"], v["max"]
    )
}

fn cost(v: &Value) -> String {
    if v.is_null() {
        return "–".to_string();
    }
    format!(
        "RSS peak {} MiB (end {}), CPU {} s",
        v["rss_peak_mib"], v["rss_end_mib"], v["cpu_seconds"]
    )
}

/// The short table of result.md, then the burst against the floors (when they ran).
fn markdown(r: &Value) -> String {
    let n = &r["n"];
    let b = &r["burst"];
    let mut rows = vec![
        format!(
            "| machine | {} CPUs, {} GiB, Kubernetes {} |",
            r["machine"]["cpus"], r["machine"]["memory_gib"], r["machine"]["kubernetes"]
        ),
        format!("| idle (before) | {} |", cost(&r["idle_before"])),
        format!(
            "| {n} Stacks applied at once (`kubectl apply --server-side`, {} s) | all Jobs {} s after the apply began; last Job {} s after the last Stack |",
            b["apply_seconds"], b["all_jobs_seconds"], b["last_stack_to_last_job_seconds"]
        ),
    ];
    if !r["floors"].is_null() {
        let (job, api) = (&r["floors"]["job"], &r["floors"]["api"]);
        rows.push(format!(
            "| … the floors, same run, operator stopped (`tests/bench/api-cost.py floor`, `api-floor`) | Job floor: all Jobs {} s (the apply {} s); API floor: all Jobs {} s (the apply {} s) |",
            job["all_jobs_seconds"], job["apply_seconds"], api["all_jobs_seconds"], api["apply_seconds"]
        ));
    }
    rows.extend([
        format!(
            "| … Stack → Update created | {} |",
            lat(&b["stack_to_update"])
        ),
        format!("| … Stack → Job created | {} |", lat(&b["stack_to_job"])),
        format!("| … operator during the burst | {} |", cost(&b["operator"])),
        format!(
            "| … the rest of the machine during the burst (CPU s) | {} |",
            b["cluster_cpu_seconds"]
                .as_object()
                .map(|m| m
                    .iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(" · "))
                .unwrap_or_default()
        ),
        format!(
            "| … API requests by the operator | {} ({} per Stack) |",
            b["requests"], b["requests_per_stack"]
        ),
        format!(
            "| one Stack applied while {n} exist: Stack → Job | {} |",
            lat(&r["single"]["stack_to_job"])
        ),
        format!("| after the burst | {} |", cost(&r["after_burst"])),
        format!(
            "| namespace with {} Stacks (operations pending) deleted | {} s; {} |",
            r["delete_namespace"]["stacks"],
            r["delete_namespace"]["seconds"],
            cost(&r["delete_namespace"]["operator"])
        ),
    ]);
    if !r["ready"].is_null() {
        rows.extend(ready_rows(r));
    }
    rows.push(format!("| idle (after) | {} |", cost(&r["idle_after"])));
    let line = floors_line(r)
        .map(|l| format!("\n{l}\n"))
        .unwrap_or_default();
    format!(
        "| measure | result |\n|---|---|\n{}\n{line}",
        rows.join("\n")
    )
}

/// Phases 2 and 3 in result.md: pods running → Ready, then at rest.
fn ready_rows(r: &Value) -> Vec<String> {
    let (d, s, fp) = (&r["ready"], &r["steady"], &r["footprint_per_stack"]);
    vec![
        format!(
            "| {} branch Stacks, pods running → Ready | {} of them in {} s; Stack → Ready {} |",
            d["stacks"],
            d["ready"],
            d["all_ready_seconds"],
            lat(&d["stack_to_ready"])
        ),
        format!(
            "| … controller-manager: Job → pod | {}; {} pods/s |",
            lat(&d["job_to_pod"]),
            d["pods_per_second"]
        ),
        format!(
            "| … operator | {}; {} requests ({} per Stack) |",
            cost(&d["operator"]),
            d["requests"],
            d["requests_per_stack"]
        ),
        format!(
            "| at rest, {} synced Stacks, {} s | {} requests/min; {}; ls-remote {} per {} s interval |",
            s["stacks"],
            s["seconds"],
            s["requests_per_minute"],
            cost(&s["operator"]),
            s["ls_remote_per_interval"],
            s["resync_seconds"]
        ),
        format!(
            "| {} synced Stacks deleted | gone in {} s |",
            r["delete_synced"]["stacks"], r["delete_synced"]["seconds"]
        ),
        format!(
            "| left per synced Stack | {} running pods, {} pod objects, {} StatefulSets, {} PVCs |",
            fp["running_pods"], fp["pod_objects"], fp["statefulsets"], fp["persistentvolumeclaims"]
        ),
    ]
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
#[ignore = "benchmark: run by hand"]
async fn runner_overhead_and_job_time_with_real_pulumi() {
    let runs: usize = env_or("BENCH_RUNS", 5);
    let f = StackFixture::new("bench-runner").await;
    let sha = f.repo.commit(&[("Pulumi.yaml", PROGRAM)], "bench");
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
        let job: Value = serde_json::from_str(&kubectl(&[
            "-n",
            f.ns(),
            "get",
            "job",
            &update,
            "-o",
            "json",
        ]))
        .expect("job json");
        let at = |v: &Value| v.as_str().and_then(|t| t.parse::<jiff::Timestamp>().ok());
        if let (Some(c), Some(d)) = (
            at(&job["metadata"]["creationTimestamp"]),
            at(&job["status"]["completionTime"]),
        ) {
            job_total.push(seconds(c, d));
        }
        let pods: Value = serde_json::from_str(&kubectl(&[
            "-n",
            f.ns(),
            "get",
            "pods",
            "-l",
            &format!("job-name={update}"),
            "-o",
            "json",
        ]))
        .expect("pods json");
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

// ------------------------------------------------------------------------------------------
// A real program's operation, like for like (`real_program_operation`): the TypeScript and
// Python test programs (tests/programs), each unchanged operation by hand and as update Jobs.
// ------------------------------------------------------------------------------------------

/// The program's secret config value `token` (both programs require it).
const REAL_TOKEN: &str = "tok-bench-real-program-3c9d";
/// A Stack's first operation installs from the registries (npm about a minute, pip up to two;
/// e2e_programs), as does a retained workspace's preparation.
const FIRST_OPERATION: Duration = Duration::from_secs(900);
/// One later operation: an install without the cache, then the `pulumi up`.
const LATER_OPERATION: Duration = Duration::from_secs(600);
const RECONCILE_REQUEST: &str = "pulumi.com/reconciliation-request";
/// What the runner logs when it links the installed dependencies back (runner/src/run.rs).
const RESTORED: &str = "dependencies restored from the cache";
/// What it logs after `pulumi install` ran.
const INSTALLED: &str = "dependencies installed in";

/// One way of running the same unchanged `pulumi up` of a program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// (a) `pulumi up --skip-preview --yes` by hand, dependencies installed, stack existing.
    ByHand,
    /// (b) an update Job with the dependency cache claim.
    Cache,
    /// (c) an update Job without any dependency cache.
    NoCache,
    /// (d) an update Job with `workspaceReclaimPolicy: Retain` (no claim of the Stack's own: the
    /// retained workspace's cache holds the dependencies).
    Retain,
    /// (e) as (b), the program committed without its lockfile (TypeScript only).
    NoLockfile,
}

impl Mode {
    const JOBS: [Mode; 4] = [Mode::Cache, Mode::NoCache, Mode::Retain, Mode::NoLockfile];

    fn label(self) -> &'static str {
        match self {
            Mode::ByHand => "(a) `pulumi up --skip-preview --yes` by hand, dependencies installed",
            Mode::Cache => "(b) update Job, dependency cache claim",
            Mode::NoCache => "(c) update Job, no dependency cache",
            Mode::Retain => "(d) update Job, `workspaceReclaimPolicy: Retain`",
            Mode::NoLockfile => "(e) update Job, dependency cache, no lockfile committed",
        }
    }

    /// The Stack (and Pulumi stack) of the mode; (a) names its config value `message` by it.
    fn stack(self) -> &'static str {
        match self {
            Mode::ByHand => "a-by-hand",
            Mode::Cache => "b-cache",
            Mode::NoCache => "c-nocache",
            Mode::Retain => "d-retain",
            Mode::NoLockfile => "e-nolock",
        }
    }

    /// What the Stack's spec adds for the mode.
    fn spec(self) -> &'static str {
        match self {
            Mode::Cache | Mode::NoLockfile => test_support::DEPENDENCY_CACHE_TEMPLATE,
            Mode::Retain => "  workspaceReclaimPolicy: Retain\n",
            Mode::ByHand | Mode::NoCache => "",
        }
    }

    /// The most the mode may take, as a multiple of (a).
    fn target(self) -> Option<f64> {
        match self {
            Mode::Cache => Some(1.3),
            Mode::NoLockfile => Some(1.5),
            _ => None,
        }
    }

    /// What each timed operation's log should say (the cache used, or the install run).
    fn expected_log(self) -> Option<&'static str> {
        match self {
            Mode::Cache | Mode::Retain | Mode::NoLockfile => Some(RESTORED),
            Mode::NoCache => Some(INSTALLED),
            Mode::ByHand => None,
        }
    }
}

/// One line of the table: a program's mode, its timed runs (none: not run) and a note.
struct ModeRow {
    program: String,
    mode: Mode,
    runs: Vec<f64>,
    note: String,
}

/// The table of real-program.md: per program and mode the median, every run, the ratio to the
/// program's (a) and the target beside it.
fn real_program_markdown(runs: usize, rows: &[ModeRow]) -> String {
    let by_hand = |program: &str| {
        rows.iter()
            .find(|r| r.program == program && r.mode == Mode::ByHand && !r.runs.is_empty())
            .map(|r| median(r.runs.clone()))
    };
    let mut out = format!(
        "A real program's unchanged operation, like for like: {runs} timed runs per mode, \
         medians in seconds; (a) the `pulumi up` alone, (b)–(e) from the reconciliation request \
         to the Stack's succeeded result for it.\n\n\
         | program | mode | median (s) | runs (s) | ratio to (a) | target | note |\n\
         |---|---|---|---|---|---|---|\n"
    );
    for r in rows {
        if r.runs.is_empty() {
            let line = format!(
                "| {} | {} | – | – | – | – | {} |\n",
                r.program,
                r.mode.label(),
                r.note
            );
            out.push_str(&line);
            continue;
        }
        let m = median(r.runs.clone());
        let each: Vec<String> = r.runs.iter().map(|s| format!("{s:.2}")).collect();
        let ratio = by_hand(&r.program).map(|a| m / a);
        let target = match (r.mode.target(), ratio) {
            (Some(t), Some(x)) if x <= t => format!("≤ {t}: met"),
            (Some(t), Some(_)) => format!("≤ {t}: not met"),
            (Some(t), None) => format!("≤ {t}"),
            (None, _) => "–".to_string(),
        };
        out.push_str(&format!(
            "| {} | {} | {m:.2} | {} | {} | {target} | {} |\n",
            r.program,
            r.mode.label(),
            each.join(", "),
            ratio
                .map(|x| format!("{x:.2}×"))
                .unwrap_or_else(|| "–".into()),
            r.note
        ));
    }
    out
}

fn operation_failed(s: &pulumi_operator_api::Stack) -> bool {
    last_update(s).state == Some(pulumi_operator_api::StackUpdateStateMessage::Failed)
}

/// What e2e_programs gives its program Stacks: PKO's documented rights, the dependency cache
/// claim, and the Secret holding the program's `token`.
fn prepare_program_namespace(f: &StackFixture) {
    f.sn.grant_program_rights();
    f.sn.ns.apply(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: app-secrets}}\nstringData: {{token: {REAL_TOKEN}}}\n"
    ));
}

/// The mode's Stack: the program at `sha`, its own Pulumi stack, the provider's namespace and
/// the mode's `message` (its own Deployment template), the `token` secret, the mode's spec.
fn mode_stack_yaml(f: &StackFixture, mode: Mode, sha: &str) -> String {
    f.own_stack_yaml(
        mode.stack(),
        &format!("commit: {sha}"),
        &format!(
            r#"  config:
    kubernetes:namespace: {ns}
    message: bench-{stack}
  secretsRef:
    token:
      type: Secret
      secret: {{name: app-secrets, key: token}}
{spec}"#,
            ns = f.ns(),
            stack = mode.stack(),
            spec = mode.spec()
        ),
    )
}

/// The `pulumi` container's log of an update's Job ("" when it cannot be read).
fn update_log(f: &StackFixture, update: &str) -> String {
    let job = format!("job/{update}");
    test_support::kubectl_result(&["-n", f.ns(), "logs", &job, "-c", "pulumi"]).1
}

/// Where an update Job's time went, from the timestamps of its containers' log lines (the API
/// server's own timestamps are to the second): the request to the runner's first line (the
/// Update, the Job, the pod and its init containers), the runner's first line to `pulumi up`
/// (fetch, dependencies, stack and config), the `up` to the runner's last line (the operation
/// and its outputs), and that line to the Stack's result (the report through the Update).
fn job_phases(f: &StackFixture, update: &str, requested: jiff::Timestamp, took: f64) -> String {
    let job = format!("job/{update}");
    let log = test_support::kubectl_result(&[
        "-n",
        f.ns(),
        "logs",
        &job,
        "--all-containers",
        "--timestamps",
    ])
    .1;
    let stamped: Vec<(jiff::Timestamp, &str)> = log
        .lines()
        .filter_map(|l| {
            let (t, rest) = l.split_once(' ')?;
            Some((t.parse().ok()?, rest))
        })
        .collect();
    let since = |t: jiff::Timestamp| (t.as_millisecond() - requested.as_millisecond()) as f64 / 1e3;
    // BENCH_JOB_LOGS=1: the runner's own lines, at their time since the request.
    if std::env::var("BENCH_JOB_LOGS").is_ok_and(|v| v == "1") {
        for (t, line) in stamped
            .iter()
            .filter(|(_, l)| l.starts_with("pulumi-runner:"))
        {
            eprintln!("  {:>6.2} s {line}", since(*t));
        }
    }
    let first = stamped.iter().map(|(t, _)| *t).min();
    let up = stamped
        .iter()
        .find(|(_, l)| l.starts_with("pulumi-runner: running pulumi") && l.contains(" up "))
        .map(|(t, _)| *t);
    let last = stamped.iter().map(|(t, _)| *t).max();
    match (first, up, last) {
        (Some(first), Some(up), Some(last)) => format!(
            "to the runner {:.2} s, to `up` {:.2} s, `up` and outputs {:.2} s, to the result {:.2} s",
            since(first),
            since(up) - since(first),
            since(last) - since(up),
            took - since(last)
        ),
        _ => "phases unknown (no timestamped runner log)".to_string(),
    }
}

/// Writes a new reconciliation request on the Stack and watches it until its lastUpdate is the
/// succeeded result of that request: the seconds from just before the request was written, and
/// the Update's name. A failed result ends the benchmark with its message.
async fn timed_request(
    stacks: &Api<pulumi_operator_api::Stack>,
    name: &str,
    value: &str,
) -> (f64, String) {
    use kube::api::{Patch, PatchParams};
    use pulumi_operator_api::StackUpdateStateMessage as State;
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut seen = watcher(stacks.clone(), config)
        .default_backoff()
        .applied_objects()
        .boxed();
    let patch = json!({"metadata": {"annotations": {RECONCILE_REQUEST: value}}});
    let start = Instant::now();
    stacks
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("writing the reconciliation request {value} on {name}: {e}"));
    let done = async {
        while let Some(event) = seen.next().await {
            let Ok(stack) = event else { continue };
            let last = last_update(&stack);
            if last.reconcile_request.as_deref() != Some(value) {
                continue;
            }
            match last.state {
                Some(State::Succeeded) => {
                    let update = last.name.unwrap_or_default();
                    return Some((start.elapsed().as_secs_f64(), update));
                }
                Some(State::Failed) => panic!(
                    "Stack {name}: the operation for {value} failed: {:?}",
                    last.message
                ),
                _ => {}
            }
        }
        None
    };
    match tokio::time::timeout(LATER_OPERATION, done).await {
        Ok(Some(result)) => result,
        Ok(None) => panic!("the watch of Stack {name} ended before the result for {value}"),
        Err(_) => panic!("no result for {value} on Stack {name} within {LATER_OPERATION:?}"),
    }
}

/// A retained workspace's pod ready and reported by its Workspace: from then on update Jobs
/// mount its cache (e2e_workspace's check).
async fn wait_workspace_ready(f: &StackFixture, name: &str) {
    let api: Api<pulumi_operator_api::Workspace> = Api::namespaced(f.sn.ns.client.clone(), f.ns());
    let pod = format!("{name}-workspace-0");
    test_support::wait_until(
        FIRST_OPERATION,
        &format!("the retained workspace of {name} to be Ready"),
        || async {
            api.get(name).await.ok().is_some_and(|w| {
                let st = w.status.unwrap_or_default();
                st.address.as_deref() == Some(pod.as_str())
                    && st.conditions.iter().flatten().any(|c| {
                        c.type_ == "Ready" && c.status == "True" && c.reason == "Succeeded"
                    })
            })
        },
    )
    .await;
}

/// The mode's Stack created (its first operation installs) and warmed up by one untimed
/// request (a retained workspace ready first), then `runs` timed requests; the Stack is then
/// deleted (nothing destroyed: the namespace goes at the end).
async fn job_mode(f: &StackFixture, program: &str, mode: Mode, sha: &str, runs: usize) -> ModeRow {
    let name = mode.stack();
    f.sn.ns.apply(&mode_stack_yaml(f, mode, sha));
    let s = f
        .wait_stack_for(FIRST_OPERATION, name, "the first operation to end", |s| {
            stack_ready(s) || operation_failed(s)
        })
        .await;
    let first = last_update(&s).name.unwrap_or_default();
    assert!(
        stack_ready(&s),
        "{program} {name}: the first operation failed: {:?}\n{}",
        last_update(&s).message,
        update_log(f, &first)
    );
    if mode == Mode::Retain {
        wait_workspace_ready(f, name).await;
    }
    let stacks = f.stacks();
    let stamp = jiff::Timestamp::now().as_millisecond();
    timed_request(&stacks, name, &format!("warm-up-{stamp}")).await;
    let (mut seconds, mut as_expected) = (Vec::new(), 0);
    for i in 0..runs {
        let requested = jiff::Timestamp::now();
        let (took, update) = timed_request(&stacks, name, &format!("run-{i}-{stamp}")).await;
        let phases = job_phases(f, &update, requested, took);
        eprintln!(
            "{program} {}: run {i}: {took:.2} s ({update}; {phases})",
            mode.label()
        );
        seconds.push(took);
        let expected = mode.expected_log().unwrap_or_default();
        if update_log(f, &update).contains(expected) {
            as_expected += 1;
        }
    }
    let _ =
        f.sn.ns
            .kubectl_result(&["delete", "stack", name, "--wait=false"]);
    let note = format!(
        "{as_expected} of {runs} Job logs say \"{}\"",
        mode.expected_log().unwrap_or_default()
    );
    ModeRow {
        program: program.to_string(),
        mode,
        runs: seconds,
        note,
    }
}

/// The local cluster's `pulumi/pulumi` image (tests/local-cluster.sh): the CLI, its language
/// hosts and the provider plugins the update Jobs find on their PATH.
fn pulumi_image_dir() -> std::path::PathBuf {
    let state = std::env::var("LOCAL_CLUSTER_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| test_support::repo_root().join(".local-cluster"));
    let dir = state.join("pulumi-image");
    for tool in ["pulumi", "pulumi-resource-kubernetes"] {
        assert!(
            dir.join(tool).exists(),
            "{} has no {tool}: start the local cluster with its tools (tests/local-cluster.sh up)",
            dir.display()
        );
    }
    dir
}

/// A program in a local directory with a file backend, run by hand with the CLI, language
/// hosts and provider of the cluster's Pulumi image, against the test cluster's kubeconfig.
struct ByHand {
    root: tempfile::TempDir,
    path: String,
}

impl ByHand {
    fn new(files: &[(String, String)]) -> ByHand {
        let root = tempfile::Builder::new()
            .prefix("bench-real-program-")
            .tempdir()
            .expect("a temporary directory");
        for dir in ["program", "state", "home"] {
            std::fs::create_dir_all(root.path().join(dir)).expect("a directory");
        }
        for (file, content) in files {
            std::fs::write(root.path().join("program").join(file), content).expect("a file");
        }
        // The update Jobs' PATH: the image's directory, then a Debian image's (tests/node-agent).
        let path = format!(
            "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            pulumi_image_dir().display()
        );
        ByHand { root, path }
    }

    /// Runs `pulumi --non-interactive ARGS` in the program's directory; its wall time.
    fn pulumi(&self, args: &[&str]) -> Duration {
        let at = |dir: &str| self.root.path().join(dir);
        let start = Instant::now();
        let out = std::process::Command::new(pulumi_image_dir().join("pulumi"))
            .arg("--non-interactive")
            .args(args)
            .current_dir(at("program"))
            .env("PATH", &self.path)
            .env("HOME", at("home"))
            .env("PULUMI_HOME", at("home/.pulumi"))
            .env(
                "PULUMI_BACKEND_URL",
                format!("file://{}", at("state").display()),
            )
            .env("PULUMI_CONFIG_PASSPHRASE", test_support::TEST_PASSPHRASE)
            .env("PULUMI_SKIP_UPDATE_CHECK", "true")
            .env("KUBECONFIG", test_support::kubeconfig())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("running pulumi: {e}"));
        assert!(
            out.status.success(),
            "pulumi {args:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        start.elapsed()
    }
}

/// (a): the dependencies installed once (`pulumi install --no-plugins`, as the runner does:
/// npm, or pip into the virtualenv the runtime options name), the stack created with the
/// Stacks' config and a first `up` (untimed), then `runs` timed unchanged ups.
fn by_hand_mode(program: &str, ns: &str, runs: usize) -> ModeRow {
    let hand = ByHand::new(&program_files(program));
    let install = hand.pulumi(&["install", "--no-plugins"]);
    let message = format!("bench-{}", Mode::ByHand.stack());
    hand.pulumi(&["stack", "init", "dev"]);
    for (key, value) in [("kubernetes:namespace", ns), ("message", message.as_str())] {
        hand.pulumi(&["config", "set", key, value, "--stack", "dev"]);
    }
    hand.pulumi(&[
        "config", "set", "--secret", "token", REAL_TOKEN, "--stack", "dev",
    ]);
    let up = ["up", "--skip-preview", "--yes", "--stack", "dev"];
    let first = hand.pulumi(&up);
    let seconds: Vec<f64> = (0..runs)
        .map(|i| {
            let took = hand.pulumi(&up).as_secs_f64();
            eprintln!("{program} {}: run {i}: {took:.2} s", Mode::ByHand.label());
            took
        })
        .collect();
    ModeRow {
        program: program.to_string(),
        mode: Mode::ByHand,
        runs: seconds,
        note: format!(
            "untimed: `pulumi install` {:.1} s, the first `up` {:.1} s",
            install.as_secs_f64(),
            first.as_secs_f64()
        ),
    }
}

/// The program committed again without its lockfile (removed from the working copy too), if
/// it has one.
fn commit_without_lockfile(f: &StackFixture, program: &str) -> Option<String> {
    let mut files = program_files(program);
    let before = files.len();
    files.retain(|(p, _)| p != "package-lock.json");
    if files.len() == before {
        return None;
    }
    std::fs::remove_file(f.repo.work.join("package-lock.json")).expect("removing the lockfile");
    Some(f.repo.commit_files(&files, "bench, no lockfile"))
}

/// Every mode of one program, in its own namespace (its objects deployed there by each mode).
async fn program_modes(program: &str, prefix: &str, runs: usize) -> Vec<ModeRow> {
    let f = StackFixture::new(prefix).await;
    prepare_program_namespace(&f);
    let sha = f.repo.commit_files(&program_files(program), "bench");
    // BENCH_MODES=a,b runs only those modes (by their letters).
    let wanted = std::env::var("BENCH_MODES").ok();
    let chosen = |m: Mode| {
        wanted.as_deref().is_none_or(|w| {
            w.split(',')
                .any(|l| m.label().starts_with(&format!("({})", l.trim())))
        })
    };
    let mut rows = Vec::new();
    if chosen(Mode::ByHand) {
        rows.push(by_hand_mode(program, f.ns(), runs));
    }
    for mode in Mode::JOBS.into_iter().filter(|m| chosen(*m)) {
        let sha = match mode {
            Mode::NoLockfile => match commit_without_lockfile(&f, program) {
                Some(sha) => sha,
                None => {
                    rows.push(ModeRow {
                        program: program.to_string(),
                        mode,
                        runs: vec![],
                        note: "no lockfile case: a Python program is cached under its \
                               requirements.txt, which is always committed"
                            .into(),
                    });
                    continue;
                }
            },
            _ => sha.clone(),
        };
        rows.push(job_mode(&f, program, mode, &sha, runs).await);
    }
    rows
}

#[tokio::test]
#[ignore = "benchmark: run by hand"]
async fn real_program_operation() {
    let runs: usize = env_or("BENCH_RUNS", 3usize).max(1);
    let out_dir = bench_out_dir();
    let programs = std::env::var("BENCH_PROGRAMS").unwrap_or_else(|_| "typescript,python".into());
    let mut rows = Vec::new();
    for program in programs.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let prefix = match program {
            "typescript" => "bench-ts",
            "python" => "bench-py",
            other => panic!("BENCH_PROGRAMS: no test program {other:?} (typescript, python)"),
        };
        rows.extend(program_modes(program, prefix, runs).await);
    }
    let md = real_program_markdown(runs, &rows);
    let file = out_dir.join("real-program.md");
    std::fs::write(&file, &md).expect("real-program.md");
    println!("{md}");
    println!("results in {}", file.display());
}

#[test]
fn the_real_program_table_gives_each_mode_against_by_hand() {
    let row = |mode, runs: &[f64], note: &str| ModeRow {
        program: "typescript".into(),
        mode,
        runs: runs.to_vec(),
        note: note.into(),
    };
    let mut rows = vec![
        row(Mode::ByHand, &[4.1, 4.0, 4.2], "untimed"),
        row(Mode::Cache, &[5.0, 5.2, 4.9], "3 of 3"),
        row(Mode::NoLockfile, &[6.5, 6.0, 6.4], ""),
    ];
    rows.push(ModeRow {
        program: "python".into(),
        mode: Mode::NoLockfile,
        runs: vec![],
        note: "no lockfile case".into(),
    });
    let md = real_program_markdown(3, &rows);
    assert!(md.contains("| typescript | (a) `pulumi up --skip-preview --yes` by hand, dependencies installed | 4.10 | 4.10, 4.00, 4.20 | 1.00× | – |"), "{md}");
    assert!(
        md.contains("| 5.00 | 5.00, 5.20, 4.90 | 1.22× | ≤ 1.3: met | 3 of 3 |"),
        "{md}"
    );
    assert!(
        md.contains("| 6.40 | 6.50, 6.00, 6.40 | 1.56× | ≤ 1.5: not met |"),
        "{md}"
    );
    assert!(md.contains("| python | (e) update Job, dependency cache, no lockfile committed | – | – | – | – | no lockfile case |"), "{md}");
}

#[test]
fn percentiles_use_the_nearest_rank() {
    let p = percentiles((1..=100).map(f64::from).collect());
    assert_eq!(p["p50"], json!(50.0));
    assert_eq!(p["p99"], json!(99.0));
    assert_eq!(p["max"], json!(100.0));
    assert_eq!(percentiles(vec![])["count"], json!(0));
}

#[test]
fn the_report_names_every_phase() {
    let r = json!({"n": 3, "burst": {"stack_to_job": {"count": 0}}, "ready": null});
    let md = markdown(&r);
    assert!(md.contains("3 Stacks applied at once"));
    assert!(md.contains("one Stack applied while 3 exist"));
    assert!(!md.contains("floor"));
}

#[test]
fn the_burst_is_a_multiple_of_each_floor() {
    let mut r = json!({"n": 3, "burst": {"all_jobs_seconds": 61.9}, "floors": {
        "job": {"all_jobs_seconds": 23.9, "apply_seconds": 9.0},
        "api": {"all_jobs_seconds": 29.4, "apply_seconds": 9.5}}});
    floor_ratios(&mut r);
    assert_eq!(r["burst"]["vs_job_floor"], json!(2.59));
    let line = "burst: 61.9 s = 2.59× the Job floor (23.9 s), 2.11× the API floor (29.4 s)";
    assert_eq!(floors_line(&r).as_deref(), Some(line));
    assert!(markdown(&r).contains(line));
}
