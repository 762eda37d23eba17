//! An observer of Pulumi processes from outside the cluster: the host's process table, read
//! every 100 ms. The local cluster's pods are processes of this host (tests/node-agent), so
//! every Pulumi operation any pod runs shows here, whatever the API server, the node agent or
//! the operator say or fail to say. A fault test asserts on what this records: no two
//! operations of one stack at once, observed independently of what the test faults.
//!
//! A Pulumi operation is a `pulumi up|preview|refresh|destroy|import` process; its stack is the
//! pair (`PULUMI_BACKEND_URL` from its environment, its `--stack` argument), which is unique
//! per Stack object in the tests (every fixture has a backend of its own).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The operations that hold the stack (and may write its state).
const OPERATIONS: &[&str] = &["up", "update", "preview", "refresh", "destroy", "import"];

/// One Pulumi process seen running.
#[derive(Clone, Debug)]
pub struct Seen {
    pub pid: u32,
    pub operation: String,
    /// The pod it ran in (its `HOSTNAME`), for telling two pods of one Job from two operations.
    pub pod: String,
    pub first: Instant,
    pub last: Instant,
    /// Still in the process table at the last scan.
    pub alive: bool,
}

/// What the observer recorded, per stack (`backend|stack`).
#[derive(Debug)]
pub struct ProcessLog {
    pub by_stack: BTreeMap<String, Vec<Seen>>,
    /// When the observer started: the origin of the times an overlap is reported with.
    pub since: Instant,
}

impl Default for ProcessLog {
    fn default() -> Self {
        ProcessLog {
            by_stack: BTreeMap::new(),
            since: Instant::now(),
        }
    }
}

impl ProcessLog {
    /// Pairs of processes of one stack that were seen alive at the same time.
    pub fn overlaps(&self) -> Vec<String> {
        let mut found = Vec::new();
        for (stack, seen) in &self.by_stack {
            for (i, a) in seen.iter().enumerate() {
                for b in &seen[i + 1..] {
                    if a.first <= b.last && b.first <= a.last {
                        found.push(format!(
                            "{stack}: {} and {} ran at once",
                            self.describe(a),
                            self.describe(b)
                        ));
                    }
                }
            }
        }
        found
    }

    /// `pulumi up (pid 7, pod p, seen 1.2–3.4 s)`, times from the observer's start.
    fn describe(&self, seen: &Seen) -> String {
        let at = |t: Instant| t.saturating_duration_since(self.since).as_secs_f64();
        format!(
            "pulumi {} (pid {}, pod {}, seen {:.1}–{:.1} s)",
            seen.operation,
            seen.pid,
            seen.pod,
            at(seen.first),
            at(seen.last)
        )
    }

    /// The processes of the stack named `stack` (the end of its key: `backend|stack` or
    /// `backend|org/project/stack`).
    pub fn of(&self, stack: &str) -> Vec<Seen> {
        self.by_stack
            .iter()
            .filter(|(k, _)| k.ends_with(&format!("|{stack}")) || k.ends_with(&format!("/{stack}")))
            .flat_map(|(_, v)| v.clone())
            .collect()
    }
}

/// The stack key, operation and pod of a process, if it is a Pulumi operation.
fn pulumi_operation(pid: u32) -> Option<(String, String, String)> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let program = args.first()?;
    if program.rsplit('/').next() != Some("pulumi") {
        return None;
    }
    // The verb is the first argument that is not a flag (`pulumi --non-interactive up ...`).
    let operation = args[1..]
        .iter()
        .find(|a| !a.starts_with('-'))
        .filter(|a| OPERATIONS.contains(&a.as_str()))?;
    let stack = args
        .iter()
        .position(|a| a == "--stack" || a == "-s")
        .and_then(|i| args.get(i + 1))
        .cloned()
        .or_else(|| {
            args.iter()
                .find_map(|a| a.strip_prefix("--stack=").map(str::to_string))
        })
        .unwrap_or_default();
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let variable = |name: &[u8]| {
        environ
            .split(|b| *b == 0)
            .find_map(|e| e.strip_prefix(name))
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_default()
    };
    let backend = variable(b"PULUMI_BACKEND_URL=");
    Some((
        format!("{backend}|{stack}"),
        operation.clone(),
        variable(b"HOSTNAME="),
    ))
}

/// The parent of a process, from `/proc/<pid>/stat` (the field after the command's `)`).
fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

fn scan(log: &Mutex<ProcessLog>) {
    let now = Instant::now();
    let mut current: Vec<(u32, String, String, String)> = Vec::new();
    let mut parents: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            // The parent first: a child read after its command line may have exited (then
            // its parent could not be read, and the fork would count as a second operation).
            let ppid = parent(pid);
            if let Some((key, op, pod)) = pulumi_operation(pid) {
                if let Some(ppid) = ppid {
                    parents.insert(pid, ppid);
                }
                current.push((pid, key, op, pod));
            }
        }
    }
    // A child Pulumi has forked and not yet replaced by a plugin's program shows its
    // parent's command line for an instant: it is the same operation.
    let operations: std::collections::HashMap<u32, String> = current
        .iter()
        .map(|(pid, key, _, _)| (*pid, key.clone()))
        .collect();
    current
        .retain(|(pid, key, _, _)| parents.get(pid).and_then(|p| operations.get(p)) != Some(key));
    let Ok(mut log) = log.lock() else { return };
    for seen in log.by_stack.values_mut().flatten() {
        seen.alive = false;
    }
    for (pid, key, operation, pod) in current {
        let list = log.by_stack.entry(key).or_default();
        match list
            .iter_mut()
            .find(|s| s.pid == pid && s.operation == operation)
        {
            Some(s) => {
                s.last = now;
                s.alive = true;
            }
            None => list.push(Seen {
                pid,
                operation,
                pod,
                first: now,
                last: now,
                alive: true,
            }),
        }
    }
}

/// Records Pulumi processes until dropped.
pub struct ProcessObserver {
    pub log: Arc<Mutex<ProcessLog>>,
    stop: Arc<AtomicBool>,
}

impl ProcessObserver {
    pub fn start() -> Self {
        let log = Arc::new(Mutex::new(ProcessLog::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (l, s) = (log.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                scan(&l);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        ProcessObserver { log, stop }
    }

    /// The live Pulumi operations of the stack named `needle`.
    pub fn alive(&self, needle: &str) -> Vec<Seen> {
        self.log
            .lock()
            .map(|l| l.of(needle).into_iter().filter(|s| s.alive).collect())
            .unwrap_or_default()
    }

    pub fn overlaps(&self) -> Vec<String> {
        self.log.lock().map(|l| l.overlaps()).unwrap_or_default()
    }

    /// The overlaps of the stacks whose backend is `backend` (the host may run other tests'
    /// Pulumi processes meanwhile).
    pub fn overlaps_in(&self, backend: &str) -> Vec<String> {
        let prefix = format!("{backend}|");
        self.overlaps()
            .into_iter()
            .filter(|o| o.starts_with(&prefix))
            .collect()
    }

    /// Every process seen for the stack named `needle`.
    pub fn seen(&self, needle: &str) -> Vec<Seen> {
        self.log.lock().map(|l| l.of(needle)).unwrap_or_default()
    }
}

impl Drop for ProcessObserver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
