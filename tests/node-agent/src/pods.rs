//! The pod lifecycle, as the kubelet runs it for pods the scheduler placed on this Node: prepare volumes, init containers in order,
//! then containers with the pod's restart policy and readiness probes; status published after
//! every change; graceful deletion (SIGTERM, grace period, SIGKILL) and final removal.

use crate::env::{self, EnvSource};
use crate::exec::ExecContext;
use crate::images::{self, ImageMap};
use crate::probe;
use crate::process::{self, ProcessSpec};
use crate::volumes::{self, Mount, Objects};
use crate::Config;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::Client;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tracing::{info, warn};

const DEFAULT_TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";
const MAX_TERMINATION_MESSAGE: usize = 4096;

pub struct Agent {
    pub client: Client,
    pub cfg: Config,
    pods: Mutex<HashMap<String, Arc<PodHandle>>>,
    next_ip: AtomicU32,
}

/// What the agent knows about one pod it runs.
pub struct PodHandle {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub dir: PathBuf,
    pub runtime: Mutex<Runtime>,
    /// `Some(grace seconds)` once the pod is being deleted.
    deletion: watch::Sender<Option<i64>>,
    publish: tokio::sync::Mutex<()>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum State {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        started_at: Time,
    },
    Terminated {
        exit_code: i32,
        reason: String,
        message: Option<String>,
        started_at: Option<Time>,
        finished_at: Time,
    },
}

#[derive(Clone, Debug)]
pub struct CState {
    pub name: String,
    pub image: String,
    pub restart_count: i32,
    pub state: State,
    pub last_state: Option<State>,
    pub ready: bool,
    pub pid: i32,
    /// What `kubectl exec` needs to enter the running container.
    pub exec: Option<Arc<ExecContext>>,
}

pub struct Runtime {
    pub pod_ip: String,
    pub start_time: Time,
    pub init_done: bool,
    pub init_failed: bool,
    pub finished: bool,
    pub init: Vec<CState>,
    pub main: Vec<CState>,
    conditions: BTreeMap<&'static str, (bool, Time)>,
}

impl Runtime {
    fn container_mut(&mut self, init: bool, i: usize) -> &mut CState {
        if init {
            &mut self.init[i]
        } else {
            &mut self.main[i]
        }
    }

    pub fn find(&self, name: &str) -> Option<&CState> {
        self.init
            .iter()
            .chain(self.main.iter())
            .find(|c| c.name == name)
    }
}

fn now() -> Time {
    Time(jiff::Timestamp::now())
}

fn waiting(reason: &str, message: Option<String>) -> State {
    State::Waiting {
        reason: reason.into(),
        message,
    }
}

impl PodHandle {
    pub fn log_path(&self, container: &str, restart: i32) -> PathBuf {
        self.dir
            .join("logs")
            .join(container)
            .join(format!("{restart}.log"))
    }

    /// Container name → (current restart count, running?) for the log server.
    pub fn container_log(&self, container: &str) -> Option<(i32, bool)> {
        let rt = self.runtime.lock().ok()?;
        let c = rt.find(container)?;
        Some((c.restart_count, matches!(c.state, State::Running { .. })))
    }

    /// How to enter a running container (for `kubectl exec`); `None` when it does not run.
    pub fn exec_context(&self, container: &str) -> Option<Arc<ExecContext>> {
        let rt = self.runtime.lock().ok()?;
        let c = rt.find(container)?;
        match c.state {
            State::Running { .. } => c.exec.clone(),
            _ => None,
        }
    }
}

impl Agent {
    pub fn new(client: Client, cfg: Config) -> Agent {
        Agent {
            client,
            cfg,
            pods: Mutex::new(HashMap::new()),
            next_ip: AtomicU32::new(0),
        }
    }

    pub fn find(&self, namespace: &str, name: &str) -> Option<Arc<PodHandle>> {
        let pods = self.pods.lock().ok()?;
        pods.values()
            .find(|h| h.namespace == namespace && h.name == name)
            .cloned()
    }

    /// On shutdown: no container process may outlive the agent.
    pub fn kill_all(&self) {
        let Ok(pods) = self.pods.lock() else { return };
        for h in pods.values() {
            if let Ok(rt) = h.runtime.lock() {
                for c in rt.init.iter().chain(rt.main.iter()).filter(|c| c.pid > 0) {
                    process::signal(c.pid, libc::SIGKILL, true);
                }
            }
        }
    }

    fn allocate_ip(&self) -> String {
        // Every pod gets its own loopback address, so that two pods can listen on one port.
        let n = self.next_ip.fetch_add(1, Ordering::Relaxed) % 64_000;
        format!("127.1.{}.{}", n / 250, n % 250 + 1)
    }

    /// Called for every pod event from the watch.
    pub fn observe(self: &Arc<Self>, pod: Pod) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let spec = pod.spec.as_ref();
        let node = spec.and_then(|s| s.node_name.clone()).unwrap_or_default();
        let deleting = pod.metadata.deletion_timestamp.is_some();
        // Unscheduled pods are kube-scheduler's business: it places them on this Node (or
        // leaves them Pending when they do not fit: cordon, taints, affinity, unbound claims).
        if node.is_empty() {
            return;
        }
        if node != self.cfg.node_name {
            return;
        }
        let existing = self.pods.lock().ok().and_then(|p| p.get(&uid).cloned());
        match existing {
            Some(handle) if deleting => {
                let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(30);
                handle.deletion.send_if_modified(|d| {
                    let changed = d.is_none_or(|old| grace < old);
                    if changed {
                        *d = Some(grace);
                    }
                    changed
                });
            }
            Some(handle) => {
                // As the kubelet's status manager: a status someone else changed (the node
                // lifecycle controller marks every pod of a node it lost contact with not
                // ready) is written again as this agent sees it.
                let ours = handle
                    .runtime
                    .lock()
                    .ok()
                    .map(|mut rt| build_status(&mut rt, &pod, &self.cfg.host_ip));
                let ready = |status: Option<&k8s_openapi::api::core::v1::PodStatus>| {
                    status
                        .and_then(|s| s.conditions.as_ref())
                        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                        .map(|c| c.status.clone())
                };
                let drifted =
                    ours.is_some_and(|ours| ready(Some(&ours)) != ready(pod.status.as_ref()));
                if drifted {
                    let agent = self.clone();
                    tokio::spawn(async move { agent.publish(&handle, &pod).await });
                }
            }
            None if deleting => {
                let agent = self.clone();
                tokio::spawn(async move { agent.finalize(&pod).await });
            }
            None => {
                let phase = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.phase.clone())
                    .unwrap_or_default();
                if phase == "Succeeded" || phase == "Failed" {
                    return;
                }
                let started_before = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c.state.as_ref().is_some_and(|s| s.waiting.is_none()))
                    });
                let restart_never = spec.and_then(|s| s.restart_policy.as_deref()) == Some("Never");
                if started_before && restart_never {
                    // Its processes were lost with an earlier agent; it must not run twice.
                    let agent = self.clone();
                    tokio::spawn(async move { agent.mark_lost(&pod).await });
                    return;
                }
                self.start(pod, uid);
            }
        }
    }

    /// The pod object is gone (e.g. force-deleted): stop its processes at once.
    pub fn forget(&self, pod: &Pod) {
        let Some(uid) = &pod.metadata.uid else { return };
        if let Some(h) = self.pods.lock().ok().and_then(|p| p.get(uid).cloned()) {
            h.deletion.send_replace(Some(0));
        }
    }

    fn start(self: &Arc<Self>, pod: Pod, uid: String) {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let spec = pod.spec.clone().unwrap_or_default();
        let cstate = |c: &Container, reason: &str| CState {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            restart_count: 0,
            state: waiting(reason, None),
            last_state: None,
            ready: false,
            pid: -1,
            exec: None,
        };
        let runtime = Runtime {
            pod_ip: self.allocate_ip(),
            start_time: now(),
            init_done: spec.init_containers.as_ref().is_none_or(|v| v.is_empty()),
            init_failed: false,
            finished: false,
            init: spec
                .init_containers
                .iter()
                .flatten()
                .map(|c| cstate(c, "PodInitializing"))
                .collect(),
            main: spec
                .containers
                .iter()
                .map(|c| cstate(c, "ContainerCreating"))
                .collect(),
            conditions: BTreeMap::new(),
        };
        let (deletion, _) = watch::channel(None);
        let handle = Arc::new(PodHandle {
            dir: self.cfg.state_dir.join("pods").join(&uid),
            uid: uid.clone(),
            namespace,
            name,
            runtime: Mutex::new(runtime),
            deletion,
            publish: tokio::sync::Mutex::new(()),
        });
        if let Ok(mut pods) = self.pods.lock() {
            pods.insert(uid, handle.clone());
        }
        let agent = self.clone();
        tokio::spawn(async move {
            info!(pod = %format!("{}/{}", handle.namespace, handle.name), "starting pod");
            agent.run_pod(&handle, &pod).await;
            agent.finish(&handle, &pod).await;
        });
    }

    async fn mark_lost(&self, pod: &Pod) {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let patch = serde_json::json!({"status": {"phase": "Failed", "reason": "NodeAgentRestarted",
            "message": "the test node agent restarted while this pod ran; its processes were lost"}});
        let _ = api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
    }

    /// Removes a pod object whose processes are gone, as the kubelet does at the end of a
    /// graceful deletion.
    async fn finalize(&self, pod: &Pod) {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: pod.metadata.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(name, &dp).await {
            Ok(_) => info!(pod = %format!("{ns}/{name}"), "pod removed"),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => warn!(pod = %format!("{ns}/{name}"), "final delete failed: {e}"),
        }
    }

    async fn finish(&self, handle: &Arc<PodHandle>, pod: &Pod) {
        let mut deletion = handle.deletion.subscribe();
        let _ = deletion.wait_for(|d| d.is_some()).await;
        self.finalize(pod).await;
        if let Ok(mut pods) = self.pods.lock() {
            pods.remove(&handle.uid);
        }
        // A pod's directory can hold a dependency tree of tens of thousands of files: removed
        // off the async workers, so that it cannot stall the agent.
        let dir = handle.dir.clone();
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
    }

    /// Sleeps, returning `true` early when the pod is being deleted.
    async fn sleep_or_deleted(&self, handle: &PodHandle, d: Duration) -> bool {
        let mut rx = handle.deletion.subscribe();
        if rx.borrow().is_some() {
            return true;
        }
        let slept = tokio::select! {
            _ = tokio::time::sleep(d) => true,
            _ = rx.wait_for(|d| d.is_some()) => false,
        };
        !slept || rx.borrow().is_some()
    }

    /// A Warning event on the pod, as the kubelet records one (best effort).
    async fn warn_event(&self, pod: &Pod, reason: &str, message: &str) {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let now = Time(jiff::Timestamp::now());
        let event = k8s_openapi::api::core::v1::Event {
            metadata: kube::api::ObjectMeta {
                generate_name: Some(format!("{name}.")),
                namespace: Some(ns.clone()),
                ..Default::default()
            },
            involved_object: k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(name),
                namespace: Some(ns.clone()),
                uid: pod.metadata.uid.clone(),
                ..Default::default()
            },
            reason: Some(reason.into()),
            message: Some(message.into()),
            type_: Some("Warning".into()),
            count: Some(1),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            source: Some(k8s_openapi::api::core::v1::EventSource {
                component: Some("kubelet".into()),
                host: None,
            }),
            ..Default::default()
        };
        let api: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(self.client.clone(), &ns);
        if let Err(e) = api.create(&Default::default(), &event).await {
            warn!("cannot record event {reason}: {e}");
        }
    }

    fn deleting(handle: &PodHandle) -> bool {
        handle.deletion.borrow().is_some()
    }

    async fn run_pod(self: &Arc<Self>, handle: &Arc<PodHandle>, pod: &Pod) {
        self.publish(handle, pod).await;
        let spec = pod.spec.clone().unwrap_or_default();
        let restart_policy = spec
            .restart_policy
            .clone()
            .unwrap_or_else(|| "Always".into());
        let pod_ip = handle
            .runtime
            .lock()
            .map(|r| r.pod_ip.clone())
            .unwrap_or_default();

        // Volumes: retried until they can be set up, as the kubelet does.
        let mut last_mount_error: Option<String> = None;
        let volumes = loop {
            let attempt = async {
                let objects = Objects::fetch(&self.client, pod).await?;
                volumes::prepare(
                    &self.client,
                    pod,
                    &objects,
                    &handle.dir,
                    &self.cfg.state_dir,
                    &pod_ip,
                    &self.cfg.host_ip,
                )
                .await
            };
            match attempt.await {
                Ok(v) => break v,
                Err(message) => {
                    warn!(pod = %format!("{}/{}", handle.namespace, handle.name), "volume setup: {message}");
                    // As the kubelet: the container waits in ContainerCreating without a
                    // message; the reason is a FailedMount Warning event on the pod.
                    if let Ok(mut rt) = handle.runtime.lock() {
                        for c in rt.main.iter_mut() {
                            c.state = waiting("ContainerCreating", None);
                        }
                    }
                    if last_mount_error.as_deref() != Some(message.as_str()) {
                        self.warn_event(pod, "FailedMount", &message).await;
                        last_mount_error = Some(message.clone());
                    }
                    self.publish(handle, pod).await;
                    if self.sleep_or_deleted(handle, Duration::from_secs(2)).await {
                        return;
                    }
                }
            }
        };

        for (i, c) in spec.init_containers.iter().flatten().enumerate() {
            loop {
                let code = self.run_container(handle, pod, c, true, i, &volumes).await;
                if code == Some(0) {
                    break;
                }
                if Self::deleting(handle) || restart_policy == "Never" {
                    if let Ok(mut rt) = handle.runtime.lock() {
                        rt.init_failed = true;
                        rt.finished = true;
                    }
                    self.publish(handle, pod).await;
                    return;
                }
                if !self.back_off(handle, pod, c, true, i).await {
                    return;
                }
            }
        }
        if let Ok(mut rt) = handle.runtime.lock() {
            rt.init_done = true;
        }
        self.publish(handle, pod).await;

        let mut tasks = Vec::new();
        for (i, c) in spec.containers.iter().enumerate() {
            let agent = self.clone();
            let handle = handle.clone();
            let pod = pod.clone();
            let c = c.clone();
            let volumes = volumes.clone();
            let policy = restart_policy.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    let code = agent
                        .run_container(&handle, &pod, &c, false, i, &volumes)
                        .await;
                    let again = match policy.as_str() {
                        "Never" => false,
                        "OnFailure" => code != Some(0),
                        _ => true,
                    };
                    if !again
                        || Self::deleting(&handle)
                        || !agent.back_off(&handle, &pod, &c, false, i).await
                    {
                        return;
                    }
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
        if let Ok(mut rt) = handle.runtime.lock() {
            rt.finished = true;
            for c in rt.main.iter_mut() {
                c.ready = false;
            }
        }
        self.publish(handle, pod).await;
    }

    /// CrashLoopBackOff between restarts; `false` when the pod is deleted meanwhile.
    async fn back_off(
        &self,
        handle: &PodHandle,
        pod: &Pod,
        c: &Container,
        init: bool,
        i: usize,
    ) -> bool {
        let restarts = handle.runtime.lock().map(|rt| {
            if init {
                rt.init[i].restart_count
            } else {
                rt.main[i].restart_count
            }
        });
        let delay = 10u64
            .saturating_mul(1 << restarts.unwrap_or(0).clamp(0, 5))
            .min(300);
        if let Ok(mut rt) = handle.runtime.lock() {
            let cs = rt.container_mut(init, i);
            cs.last_state = Some(cs.state.clone());
            cs.state = waiting(
                "CrashLoopBackOff",
                Some(format!(
                    "back-off {delay}s restarting failed container={} pod={}",
                    c.name, handle.name
                )),
            );
            cs.restart_count += 1;
        }
        self.publish(handle, pod).await;
        !self
            .sleep_or_deleted(handle, Duration::from_secs(delay))
            .await
    }

    /// Runs one container to its end; `None` when it could not start before the pod went away.
    async fn run_container(
        self: &Arc<Self>,
        handle: &Arc<PodHandle>,
        pod: &Pod,
        c: &Container,
        init: bool,
        i: usize,
        volumes: &HashMap<String, PathBuf>,
    ) -> Option<i32> {
        let (pod_ip, restart) = handle
            .runtime
            .lock()
            .map(|rt| {
                (
                    rt.pod_ip.clone(),
                    if init {
                        rt.init[i].restart_count
                    } else {
                        rt.main[i].restart_count
                    },
                )
            })
            .ok()?;
        let set_state = |state: State| {
            if let Ok(mut rt) = handle.runtime.lock() {
                rt.container_mut(init, i).state = state;
            }
        };
        // Everything that can fail before the process exists is retried like the kubelet does.
        let prepared = loop {
            if Self::deleting(handle) {
                return None;
            }
            match self
                .prepare_process(handle, pod, c, volumes, &pod_ip, restart)
                .await
            {
                Ok(p) => break p,
                Err((reason, message)) => {
                    set_state(waiting(reason, Some(message)));
                    self.publish(handle, pod).await;
                    if self.sleep_or_deleted(handle, Duration::from_secs(2)).await {
                        return None;
                    }
                }
            }
        };
        let (proc_spec, termination_file) = prepared;
        let log_path = proc_spec.log_path.clone();
        let exec_base = ExecContext {
            pid: -1,
            env: proc_spec.env.clone(),
            uid: proc_spec.uid,
            gid: proc_spec.gid,
            working_dir: proc_spec.working_dir.clone(),
        };
        // `resources.limits.memory`: a memory cgroup whose OOM kill the status reports.
        let memory_limit = c
            .resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .and_then(|l| l.get("memory"))
            .and_then(|q| crate::cgroup::quantity_bytes(&q.0));
        let mut proc_spec = proc_spec;
        let memory_cgroup = match memory_limit {
            Some(limit) => {
                let name = format!("{}-{}-{}", handle.uid, c.name, restart);
                match crate::cgroup::MemoryCgroup::create(&name, limit) {
                    Ok(cg) => cg,
                    Err(e) => {
                        warn!(pod = %format!("{}/{}", handle.namespace, handle.name), "memory limit not enforced: {e}");
                        None
                    }
                }
            }
            None => None,
        };
        proc_spec.cgroup_procs = memory_cgroup.as_ref().map(|cg| cg.procs_file());
        let started_at = now();
        let mut running = match process::spawn(proc_spec) {
            Ok(r) => r,
            Err(e) => {
                let message = format!("failed to start container {:?}: {e}", c.name);
                append_log(&log_path, &message);
                set_state(State::Terminated {
                    exit_code: 128,
                    reason: "StartError".into(),
                    message: Some(message),
                    started_at: Some(started_at),
                    finished_at: now(),
                });
                self.publish(handle, pod).await;
                return Some(128);
            }
        };
        let pid = running.pid;
        if let Ok(mut rt) = handle.runtime.lock() {
            let cs = rt.container_mut(init, i);
            cs.state = State::Running {
                started_at: started_at.clone(),
            };
            cs.pid = pid;
            cs.exec = Some(Arc::new(ExecContext { pid, ..exec_base }));
            cs.ready = !init && c.readiness_probe.is_none();
        }
        self.publish(handle, pod).await;

        let probe_task = match (&c.readiness_probe, init) {
            (Some(p), false) => {
                let ctx = probe::Target {
                    pid,
                    pod_ip: pod_ip.clone(),
                    container: c.clone(),
                    uid_gid: None,
                };
                let (tx, mut rx) = tokio::sync::mpsc::channel::<bool>(4);
                let probe_loop = tokio::spawn(probe::run(p.clone(), ctx, tx));
                let h = handle.clone();
                let agent_pod = pod.clone();
                let me = self.clone();
                let updater = tokio::spawn(async move {
                    while let Some(ready) = rx.recv().await {
                        if let Ok(mut rt) = h.runtime.lock() {
                            rt.main[i].ready = ready;
                        }
                        me.publish(&h, &agent_pod).await;
                    }
                });
                Some((probe_loop, updater))
            }
            _ => None,
        };

        let mut deletion = handle.deletion.subscribe();
        let exited = tokio::select! {
            s = running.child.wait() => Some(s),
            _ = deletion.wait_for(|d| d.is_some()) => None,
        };
        let status = match exited {
            Some(s) => s,
            None => {
                let grace = (*deletion.borrow()).unwrap_or(0).max(0) as u64;
                process::signal(pid, libc::SIGTERM, false);
                match tokio::time::timeout(Duration::from_secs(grace), running.child.wait()).await {
                    Ok(s) => s,
                    Err(_) => {
                        process::signal(pid, libc::SIGKILL, true);
                        running.child.wait().await
                    }
                }
            }
        };
        // Whatever the main process left behind dies with the container, as with a cgroup.
        process::signal(pid, libc::SIGKILL, true);
        if let Some((a, b)) = probe_task {
            a.abort();
            b.abort();
        }
        // The container's end is reported once its output is in the log file (as containerd
        // waits for a container's IO before its exit event); a loaded node takes seconds.
        // Bounded: a process that escaped the group may hold the pipe open.
        for t in running.log_tasks.drain(..) {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
        let exit_code = match status {
            Ok(s) => {
                use std::os::unix::process::ExitStatusExt;
                s.code()
                    .or_else(|| s.signal().map(|sig| 128 + sig))
                    .unwrap_or(255)
            }
            Err(_) => 255,
        };
        let mut message = read_capped(&termination_file, MAX_TERMINATION_MESSAGE);
        if message.is_empty()
            && exit_code != 0
            && c.termination_message_policy.as_deref() == Some("FallbackToLogsOnError")
        {
            message = tail_log(&log_path, 80, 2048);
        }
        let oom_killed = memory_cgroup.as_ref().is_some_and(|cg| cg.oom_killed());
        drop(memory_cgroup);
        set_state(State::Terminated {
            exit_code,
            reason: if oom_killed {
                "OOMKilled".into()
            } else if exit_code == 0 {
                "Completed".into()
            } else {
                "Error".into()
            },
            message: (!message.is_empty()).then_some(message),
            started_at: Some(started_at),
            finished_at: now(),
        });
        if let Ok(mut rt) = handle.runtime.lock() {
            let cs = rt.container_mut(init, i);
            cs.ready = false;
            cs.pid = -1;
            cs.exec = None;
        }
        self.publish(handle, pod).await;
        Some(exit_code)
    }

    /// Builds the process for a container; the error is (waiting reason, message).
    async fn prepare_process(
        &self,
        handle: &PodHandle,
        pod: &Pod,
        c: &Container,
        volumes: &HashMap<String, PathBuf>,
        pod_ip: &str,
        restart: i32,
    ) -> Result<(ProcessSpec, PathBuf), (&'static str, String)> {
        let image = c.image.clone().unwrap_or_default();
        let map = ImageMap::load(self.cfg.image_map.as_deref())
            .map_err(|e| ("ErrImagePull", e.to_string()))?;
        let entry = map.find(&image);
        let command = c.command.clone().unwrap_or_default();
        let args = c.args.clone().unwrap_or_default();
        if entry.is_none() && command.is_empty() {
            return Err((
                "ErrImagePull",
                format!("image {image:?} is not mapped to a local executable by the test node agent, and the container sets no command"),
            ));
        }
        let objects = Objects::fetch(&self.client, pod)
            .await
            .map_err(|e| ("CreateContainerConfigError", e))?;
        let resolved = env::resolve(
            pod,
            c,
            pod_ip,
            &self.cfg.host_ip,
            &objects as &dyn EnvSource,
        )
        .map_err(|e| ("CreateContainerConfigError", e))?;

        let pod_sc = pod
            .spec
            .as_ref()
            .and_then(|s| s.security_context.clone())
            .unwrap_or_default();
        let sc = c.security_context.clone().unwrap_or_default();
        let uid = sc
            .run_as_user
            .or(pod_sc.run_as_user)
            .or(entry.and_then(|e| e.user))
            .unwrap_or(0);
        let gid = sc
            .run_as_group
            .or(pod_sc.run_as_group)
            .unwrap_or(if uid == 0 { 0 } else { uid });
        if sc.run_as_non_root.or(pod_sc.run_as_non_root) == Some(true) && uid == 0 {
            return Err((
                "CreateContainerConfigError",
                "container has runAsNonRoot and image will run as root".into(),
            ));
        }

        // A non-root process may not be able to reach the mapped files (e.g. a checkout under
        // /root): their directories are bind-mounted at a neutral place instead, as an image's
        // files would be.
        let mut image_mounts = Vec::new();
        let mut entry = entry.cloned();
        if let (Some(e), true) = (entry.as_mut(), uid != 0) {
            let mut relocate = |p: &str, is_dir: bool| -> String {
                let host = PathBuf::from(p);
                let (dir, file) = if is_dir {
                    (host.clone(), None)
                } else {
                    (
                        host.parent().map(PathBuf::from).unwrap_or_default(),
                        host.file_name(),
                    )
                };
                if !host.is_absolute() || !dir.is_dir() {
                    return p.to_string();
                }
                let target = PathBuf::from(format!("/run/node-agent/image/{}", image_mounts.len()));
                image_mounts.push(Mount {
                    source: dir,
                    target: target.clone(),
                    read_only: true,
                });
                match file {
                    Some(f) => target.join(f).to_string_lossy().into_owned(),
                    None => target.to_string_lossy().into_owned(),
                }
            };
            if let Some(first) = e.entrypoint.first().cloned() {
                e.entrypoint[0] = relocate(&first, false);
            }
            e.path = e.path.clone().iter().map(|p| relocate(p, true)).collect();
        }
        let entry = entry.as_ref();

        let mut env: Vec<(String, String)> = Vec::new();
        // As a container runtime does: the image's PATH (not the agent's), HOME from the
        // user's passwd entry (else `/`), nothing else from the host.
        let mut path_dirs: Vec<String> = entry.map(|e| e.path.clone()).unwrap_or_default();
        path_dirs.push(IMAGE_PATH.into());
        env.push(("PATH".into(), path_dirs.join(":")));
        env.push(("HOSTNAME".into(), handle.name.clone()));
        let home = match entry.and_then(|e| e.home.clone()) {
            Some(home) => {
                // A fresh home per container start, owned by the container's user.
                let private = handle
                    .dir
                    .join("home")
                    .join(format!("{}-{restart}", c.name));
                let io = |e: std::io::Error| ("CreateContainerError", e.to_string());
                std::fs::create_dir_all(&private).map_err(io)?;
                std::os::unix::fs::chown(&private, Some(uid as u32), Some(gid as u32))
                    .map_err(io)?;
                image_mounts.push(Mount {
                    source: private,
                    target: PathBuf::from(&home),
                    read_only: false,
                });
                home
            }
            None => home_of(uid),
        };
        env.push(("HOME".into(), home));
        for (k, v) in entry.iter().flat_map(|e| e.env.iter()) {
            env.push((k.clone(), v.clone()));
        }
        let (h, p) = (&self.cfg.api_host, self.cfg.api_port);
        env.push(("KUBERNETES_SERVICE_HOST".into(), h.clone()));
        env.push(("KUBERNETES_SERVICE_PORT".into(), p.to_string()));
        env.push(("KUBERNETES_SERVICE_PORT_HTTPS".into(), p.to_string()));
        env.push(("KUBERNETES_PORT".into(), format!("tcp://{h}:{p}")));
        for (k, v) in resolved {
            env.retain(|(n, _)| *n != k);
            env.push((k, v));
        }
        let argv: Vec<String> = images::argv(entry, &command, &args)
            .iter()
            .map(|a| env::expand(a, &env))
            .collect();

        let mut mounts = image_mounts;
        mounts.extend(volumes::mounts(c, volumes).map_err(|e| ("CreateContainerConfigError", e))?);
        let termination_file = handle
            .dir
            .join("termination")
            .join(format!("{}-{restart}", c.name));
        let io = |e: std::io::Error| ("CreateContainerError", e.to_string());
        if let Some(parent) = termination_file.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        std::fs::write(&termination_file, b"").map_err(io)?;
        let _ = std::os::unix::fs::chown(&termination_file, Some(uid as u32), Some(gid as u32));
        mounts.push(Mount {
            source: termination_file.clone(),
            target: PathBuf::from(
                c.termination_message_path
                    .as_deref()
                    .unwrap_or(DEFAULT_TERMINATION_MESSAGE_PATH),
            ),
            read_only: false,
        });
        Ok((
            ProcessSpec {
                argv,
                // As the kubelet: spec.hostname when set, else the pod's name.
                hostname: pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.hostname.clone())
                    .filter(|h| !h.is_empty())
                    .unwrap_or_else(|| handle.name.clone()),
                cgroup_procs: None,
                env,
                working_dir: c.working_dir.clone(),
                uid: uid as u32,
                gid: gid as u32,
                mounts,
                log_path: handle.log_path(&c.name, restart),
            },
            termination_file,
        ))
    }

    /// Writes the pod's status as the kubelet would (one merge patch of `status`). As the
    /// kubelet's status manager, a write the API server did not take (it restarts, or does not
    /// answer) is tried again, with the status as it is then, until it is taken or the pod is
    /// gone: a container's end must not be lost to an outage.
    async fn publish(&self, handle: &PodHandle, pod: &Pod) {
        let _serial = handle.publish.lock().await;
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &handle.namespace);
        for attempt in 0u32.. {
            let status = match handle.runtime.lock() {
                Ok(mut rt) => build_status(&mut rt, pod, &self.cfg.host_ip),
                Err(_) => return,
            };
            let patch = serde_json::json!({ "status": status });
            match api
                .patch_status(&handle.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return,
                Err(kube::Error::Api(a)) if a.code == 404 => return,
                Err(e) => {
                    if attempt % 10 == 0 {
                        warn!(pod = %format!("{}/{}", handle.namespace, handle.name), "status update failed (retrying): {e}");
                    }
                    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                }
            }
        }
    }
}

/// The PATH a Debian-based image sets.
const IMAGE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The home directory of a uid as a container runtime finds it (the passwd entry), else `/`.
fn home_of(uid: i64) -> String {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    passwd
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.len() >= 6 && f[2].parse::<i64>().ok() == Some(uid)).then(|| f[5].to_string())
        })
        .next()
        .unwrap_or_else(|| "/".into())
}

fn append_log(path: &std::path::Path, message: &str) {
    use std::io::Write;
    if let Some(parent) = path.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let ts = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
        let _ = writeln!(f, "{ts} stderr F {message}");
    }
}

fn read_capped(path: &std::path::Path, max: usize) -> String {
    let bytes = std::fs::read(path).unwrap_or_default();
    String::from_utf8_lossy(&bytes[..bytes.len().min(max)]).into_owned()
}

/// The last `lines` lines (at most `max` bytes) of a container log, for FallbackToLogsOnError.
fn tail_log(path: &std::path::Path, lines: usize, max: usize) -> String {
    let data = std::fs::read(path).unwrap_or_default();
    let contents: Vec<&[u8]> = data
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|l| process::parse_record(l).map(|r| r.content))
        .collect();
    let start = contents.len().saturating_sub(lines);
    let mut out = contents[start..]
        .iter()
        .map(|l| String::from_utf8_lossy(l))
        .collect::<Vec<_>>()
        .join("\n");
    if out.len() > max {
        let mut cut = out.len() - max;
        while !out.is_char_boundary(cut) {
            cut += 1;
        }
        out = out[cut..].to_string();
    }
    out
}

fn to_k8s_state(s: &State) -> ContainerState {
    match s {
        State::Waiting { reason, message } => ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.clone()),
                message: message.clone(),
            }),
            ..Default::default()
        },
        State::Running { started_at } => ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(started_at.clone()),
            }),
            ..Default::default()
        },
        State::Terminated {
            exit_code,
            reason,
            message,
            started_at,
            finished_at,
        } => ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: *exit_code,
                reason: Some(reason.clone()),
                message: message.clone(),
                started_at: started_at.clone(),
                finished_at: Some(finished_at.clone()),
                ..Default::default()
            }),
            ..Default::default()
        },
    }
}

fn container_status(c: &CState, pod_uid: &str) -> ContainerStatus {
    ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone(),
        image_id: format!("local://{}", images::repository(&c.image)),
        container_id: (c.pid > 0 || !matches!(c.state, State::Waiting { .. }))
            .then(|| format!("local://{pod_uid}/{}/{}", c.name, c.restart_count)),
        ready: c.ready,
        restart_count: c.restart_count,
        started: Some(matches!(c.state, State::Running { .. })),
        state: Some(to_k8s_state(&c.state)),
        last_state: c.last_state.as_ref().map(to_k8s_state),
        ..Default::default()
    }
}

/// The pod phase from its containers, following the kubelet's rules.
pub fn phase(rt: &Runtime) -> &'static str {
    if rt.init_failed {
        return "Failed";
    }
    if !rt.init_done {
        return "Pending";
    }
    let terminated = |c: &CState| matches!(c.state, State::Terminated { .. });
    if rt.finished && rt.main.iter().all(terminated) {
        let ok = rt
            .main
            .iter()
            .all(|c| matches!(c.state, State::Terminated { exit_code: 0, .. }));
        return if ok { "Succeeded" } else { "Failed" };
    }
    if rt.main.iter().any(|c| !matches!(c.state, State::Waiting { reason: ref r, .. } if r == "ContainerCreating" || r == "ErrImagePull" || r == "CreateContainerConfigError")) {
        "Running"
    } else {
        "Pending"
    }
}

fn build_status(rt: &mut Runtime, pod: &Pod, host_ip: &str) -> PodStatus {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let phase = phase(rt);
    let terminal = phase == "Succeeded" || phase == "Failed";
    let unready: Vec<String> = rt
        .main
        .iter()
        .filter(|c| !c.ready)
        .map(|c| c.name.clone())
        .collect();
    let uninit: Vec<String> = rt
        .init
        .iter()
        .filter(|c| !matches!(c.state, State::Terminated { exit_code: 0, .. }))
        .map(|c| c.name.clone())
        .collect();
    let mut conditions = Vec::new();
    let mut cond = |rt: &mut Runtime,
                    kind: &'static str,
                    ok: bool,
                    reason: Option<String>,
                    message: Option<String>| {
        let entry = rt.conditions.entry(kind).or_insert((ok, now()));
        if entry.0 != ok {
            *entry = (ok, now());
        }
        conditions.push(PodCondition {
            type_: kind.into(),
            status: if ok { "True".into() } else { "False".into() },
            last_transition_time: Some(entry.1.clone()),
            reason: if ok { None } else { reason },
            message: if ok { None } else { message },
            ..Default::default()
        });
    };
    let init_ok = rt.init_done && !rt.init_failed;
    let ready_reason = if terminal {
        "PodCompleted"
    } else {
        "ContainersNotReady"
    };
    let ready_msg =
        (!terminal).then(|| format!("containers with unready status: [{}]", unready.join(" ")));
    cond(
        rt,
        "Initialized",
        init_ok || (terminal && uninit.is_empty()),
        Some("ContainersNotInitialized".into()),
        Some(format!(
            "containers with incomplete status: [{}]",
            uninit.join(" ")
        )),
    );
    let all_ready = unready.is_empty() && !terminal;
    cond(
        rt,
        "Ready",
        all_ready,
        Some(ready_reason.into()),
        ready_msg.clone(),
    );
    cond(
        rt,
        "ContainersReady",
        all_ready,
        Some(ready_reason.into()),
        ready_msg,
    );
    cond(rt, "PodScheduled", true, None, None);
    PodStatus {
        phase: Some(phase.into()),
        conditions: Some(conditions),
        host_ip: Some(host_ip.into()),
        pod_ip: Some(rt.pod_ip.clone()),
        pod_ips: Some(vec![PodIP {
            ip: rt.pod_ip.clone(),
        }]),
        start_time: Some(rt.start_time.clone()),
        qos_class: pod.status.as_ref().and_then(|s| s.qos_class.clone()),
        init_container_statuses: (!rt.init.is_empty())
            .then(|| rt.init.iter().map(|c| container_status(c, &uid)).collect()),
        container_statuses: Some(rt.main.iter().map(|c| container_status(c, &uid)).collect()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cs(state: State) -> CState {
        CState {
            name: "c".into(),
            image: "i".into(),
            restart_count: 0,
            state,
            last_state: None,
            ready: false,
            pid: -1,
            exec: None,
        }
    }

    fn rt(main: Vec<CState>, init_done: bool, finished: bool) -> Runtime {
        Runtime {
            pod_ip: "127.1.0.1".into(),
            start_time: now(),
            init_done,
            init_failed: false,
            finished,
            init: vec![],
            main,
            conditions: BTreeMap::new(),
        }
    }

    fn term(code: i32) -> State {
        State::Terminated {
            exit_code: code,
            reason: "x".into(),
            message: None,
            started_at: None,
            finished_at: now(),
        }
    }

    #[test]
    fn phase_follows_containers() {
        assert_eq!(
            phase(&rt(
                vec![cs(waiting("ContainerCreating", None))],
                true,
                false
            )),
            "Pending"
        );
        assert_eq!(
            phase(&rt(
                vec![cs(waiting("PodInitializing", None))],
                false,
                false
            )),
            "Pending"
        );
        assert_eq!(
            phase(&rt(
                vec![cs(State::Running { started_at: now() })],
                true,
                false
            )),
            "Running"
        );
        assert_eq!(phase(&rt(vec![cs(term(0))], true, true)), "Succeeded");
        assert_eq!(
            phase(&rt(vec![cs(term(0)), cs(term(3))], true, true)),
            "Failed"
        );
        // Restarting (CrashLoopBackOff) counts as Running.
        assert_eq!(
            phase(&rt(
                vec![cs(waiting("CrashLoopBackOff", None))],
                true,
                false
            )),
            "Running"
        );
        let mut failed_init = rt(vec![cs(waiting("PodInitializing", None))], false, true);
        failed_init.init_failed = true;
        assert_eq!(phase(&failed_init), "Failed");
    }

    #[test]
    fn tail_log_keeps_the_last_lines() {
        let dir = std::env::temp_dir().join(format!("node-agent-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("0.log");
        std::fs::write(&f, "t stdout F a\nt stderr F b\nt stdout F c\n").unwrap();
        assert_eq!(tail_log(&f, 2, 100), "b\nc");
        assert_eq!(tail_log(&f, 10, 3), "b\nc");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
