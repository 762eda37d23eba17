//! The runner's side of an operation's fencing heartbeat ("self-fencing"), when the plan has
//! one ([`RunPlan::heartbeat`]): before any Pulumi command the runner creates a
//! `coordination.k8s.io/v1` Lease held by its pod ([`Heartbeat::start`]), renews it while the
//! operation runs (an async task), and a watchdog thread stops Pulumi — SIGINT to its process
//! group, SIGKILL after `stopGraceSeconds` — once the Lease has not been renewed for
//! `expireAfterSeconds`, or at once when the operator took it over. The watchdog reads only an
//! atomic deadline on `CLOCK_BOOTTIME` and the registry of Pulumi's process groups
//! ([`Fence`]): it depends neither on the async runtime, nor on logging, nor on the network.
//!
//! # Why the operator's wait is a bound
//!
//! The operator revokes the Lease by changing its holder with a `resourceVersion` precondition;
//! call V the instant the API server applies that write. Every renewal is a `replace` with the
//! `resourceVersion` the runner last saw, so every renewal that succeeded was applied before V,
//! and therefore *started* before V. The runner's deadline is the start of its last successful
//! request (the create, a renewal, or the read that adopted the Lease) plus `expireAfterSeconds`:
//! so it is at most V + expire_after. Pulumi is signalled by then (plus the watchdog's 250 ms
//! tick) and dead by V + expire_after + stop_grace + tick. The operator waits expire_after +
//! stop_grace + a margin from its own observation of its successful revoke (which is after V),
//! measured on its own monotonic clock: only the clocks' *rates* matter (both sides measure an
//! interval, each on its own clock), never wall-clock skew between the node and the operator.
//!
//! Limits: `CLOCK_BOOTTIME` keeps counting while the machine is suspended, so a suspended node
//! that resumes is past its deadline at once — but a frozen VM (or a SIGSTOPped pod) resumes
//! with Pulumi and the watchdog both running again, and Pulumi may act during the first tick
//! after the resume, before the watchdog stops it. A process that left Pulumi's process group
//! (`setsid`) is not reached; nor does SIGKILL end a process blocked in uninterruptible I/O
//! (an unreachable NFS mount) before that I/O returns.

use crate::error::{chain, Failure};
use crate::report::log;
use crate::signals::Signals;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::Api;
use pulumi_operator_api::backoff::Backoff;
use pulumi_operator_api::plan::{FailureReason, HeartbeatPlan, RunPlan, RunResult};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

/// How often the watchdog compares the clock with the deadline.
pub const TICK: Duration = Duration::from_millis(250);
/// The longest one request to the API server may take (shorter with short renewal periods,
/// [`Settings::request_timeout`]).
pub const MAX_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the watchdog looks whether Pulumi's process groups are gone after the SIGINT.
const EXIT_POLL: Duration = Duration::from_millis(50);
/// Immediate retries of one renewal after a conflict that was not a take-over.
const CONFLICT_RETRIES: usize = 3;
/// The label of the Stack, copied from the plan's outputs labels.
const STACK_NAME_LABEL: &str = pulumi_operator_api::names::STACK_NAME_LABEL;

/// Now on `CLOCK_BOOTTIME`: like `CLOCK_MONOTONIC` (and [`std::time::Instant`]) it never jumps
/// with the wall clock, and unlike them it keeps counting while the machine is suspended.
/// Fails safe: if the clock cannot be read (not on Linux ≥ 2.6.39), "now" is the end of time,
/// and every deadline has passed.
pub fn boottime_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    match (rc, u64::try_from(ts.tv_sec), u32::try_from(ts.tv_nsec)) {
        (0, Ok(secs), Ok(nanos)) => Duration::new(secs, nanos),
        _ => Duration::MAX,
    }
}

/// The deadline a request that started at `started` (on [`boottime_now`]'s clock) and
/// succeeded gives: `started + expire_after`.
pub fn deadline_after(started: Duration, expire_after: Duration) -> Duration {
    started.saturating_add(expire_after)
}

/// Why the runner stopped Pulumi.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The Lease could not be renewed before the deadline.
    Expired,
    /// The operator took the Lease over (or deleted it).
    Revoked,
}

/// Whether the watchdog must stop Pulumi now (pure).
pub fn due(now: Duration, deadline: Duration, revoked: bool) -> Option<Cause> {
    if revoked {
        Some(Cause::Revoked)
    } else if now >= deadline {
        Some(Cause::Expired)
    } else {
        None
    }
}

/// What the API server made of one request, as far as the heartbeat cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// It succeeded.
    Ok,
    /// It failed with this HTTP status.
    Status(u16),
    /// No answer: a timeout or a transport error.
    NoAnswer,
}

/// What the renew loop does after an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// The renewal succeeded: this is the new deadline.
    Extend(Duration),
    /// A conflict: read the Lease to see whether it is still this pod's.
    Reread,
    /// The Lease is still this pod's (a newer `resourceVersion`): renew again at once.
    RetryNow,
    /// The Lease is no longer this pod's: stop Pulumi now.
    Fence,
    /// Log, keep the previous deadline, try again at the next period.
    Keep,
}

/// After a renewal (a `replace` with the last known `resourceVersion`) that started at
/// `started` (pure).
pub fn after_renewal(answer: Answer, started: Duration, expire_after: Duration) -> Next {
    match answer {
        Answer::Ok => Next::Extend(deadline_after(started, expire_after)),
        Answer::Status(409) => Next::Reread,
        Answer::Status(404) => Next::Fence,
        Answer::Status(_) | Answer::NoAnswer => Next::Keep,
    }
}

/// After reading the Lease following a conflict: its holder, or what the read got (pure).
pub fn after_reread(read: Result<Option<&str>, Answer>, me: &str) -> Next {
    match read {
        Ok(Some(holder)) if holder == me => Next::RetryNow,
        Ok(_) | Err(Answer::Status(404)) => Next::Fence,
        Err(_) => Next::Keep,
    }
}

/// This pod's identity in the Lease: its name, from `POD_NAME` when the Job sets it (the
/// downward API's `metadata.name`), otherwise `HOSTNAME`, which Kubernetes sets to the pod's
/// hostname. NB: an update Job sets its pod's `hostname` to the operation's lock identity
/// (`RunPlan.lockHolder.hostname`, one per Update), so without `POD_NAME` the identity names
/// the operation's pod rather than the pod object (one Job, `backoffLimit: 0`: one pod).
pub fn holder_identity(var: impl Fn(&str) -> Option<String>) -> Option<String> {
    ["POD_NAME", "HOSTNAME"]
        .into_iter()
        .filter_map(var)
        .map(|v| v.trim().to_string())
        .find(|v| !v.is_empty())
}

/// The heartbeat of one operation, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub lease: String,
    /// The pod's token file, when the heartbeat is proven by token reviews
    /// (`crate::token_proof`) rather than by the Lease.
    pub token_file: Option<String>,
    pub namespace: String,
    pub holder: String,
    pub renew_every: Duration,
    pub expire_after: Duration,
    pub stop_grace: Duration,
}

impl Settings {
    /// The plan's heartbeat; refuses periods that could not keep the Lease.
    pub fn new(
        plan: &RunPlan,
        hb: &HeartbeatPlan,
        holder: Option<String>,
    ) -> Result<Settings, Failure> {
        let invalid = |why: String| Failure::config_invalid(format!("the plan's heartbeat: {why}"));
        if hb.token_file.is_none() && (hb.lease.is_empty() || plan.namespace.is_empty()) {
            return Err(invalid("no Lease name or no namespace".into()));
        }
        if hb.renew_every_seconds == 0 || hb.renew_every_seconds >= hb.expire_after_seconds {
            return Err(invalid(format!(
                "renewEverySeconds ({}) must be at least 1 and less than expireAfterSeconds ({})",
                hb.renew_every_seconds, hb.expire_after_seconds
            )));
        }
        let holder = holder.ok_or_else(|| {
            invalid("neither POD_NAME nor HOSTNAME names this pod (the Lease's holder)".into())
        })?;
        Ok(Settings {
            lease: hb.lease.clone(),
            token_file: hb.token_file.clone(),
            namespace: plan.namespace.clone(),
            holder,
            renew_every: Duration::from_secs(hb.renew_every_seconds),
            expire_after: Duration::from_secs(hb.expire_after_seconds),
            stop_grace: Duration::from_secs(hb.stop_grace_seconds),
        })
    }

    /// The timeout of one request: well under the renewal period (half of it, at most
    /// [`MAX_REQUEST_TIMEOUT`]).
    pub fn request_timeout(&self) -> Duration {
        (self.renew_every / 2).clamp(Duration::from_millis(200), MAX_REQUEST_TIMEOUT)
    }

    /// The failure reported when the runner stopped Pulumi.
    pub fn lost(&self, cause: Cause) -> Failure {
        if self.token_file.is_some() {
            let what = match cause {
                Cause::Expired => format!(
                    "could not prove its pod alive to the API server for {}s",
                    self.expire_after.as_secs()
                ),
                Cause::Revoked => "was told by the API server that its pod was deleted".into(),
            };
            return Failure::new(
                FailureReason::HeartbeatLost,
                format!(
                    "the runner {what}, so it stopped Pulumi so that the stack's next operation \
                     can run safely; the stack runs it again"
                ),
            );
        }
        let what = match cause {
            Cause::Expired => format!("could not be renewed for {}s", self.expire_after.as_secs()),
            Cause::Revoked => "was taken over by the operator".to_string(),
        };
        Failure::new(
            FailureReason::HeartbeatLost,
            format!(
                "the operation's heartbeat Lease {} {what}, so the runner stopped Pulumi so that \
                 the stack's next operation can run safely; the stack runs it again",
                self.lease
            ),
        )
    }
}

/// The Lease this pod creates (pure): held by it, owned by the Update (not as controller),
/// labelled with the Stack.
pub fn build_lease(plan: &RunPlan, s: &Settings, now: Timestamp) -> Lease {
    let labels = plan
        .outputs_labels
        .get(STACK_NAME_LABEL)
        .map(|stack| BTreeMap::from([(STACK_NAME_LABEL.to_string(), stack.clone())]));
    let owner = (!plan.update_name.is_empty() && !plan.update_uid.is_empty())
        .then(|| vec![crate::outputs::update_owner(plan)]);
    Lease {
        metadata: ObjectMeta {
            name: Some(s.lease.clone()),
            namespace: Some(s.namespace.clone()),
            labels,
            owner_references: owner,
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(s.holder.clone()),
            lease_duration_seconds: Some(
                i32::try_from(s.expire_after.as_secs()).unwrap_or(i32::MAX),
            ),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            ..Default::default()
        }),
    }
}

/// The Lease's holder.
pub fn holder_of(lease: &Lease) -> Option<&str> {
    lease.spec.as_ref()?.holder_identity.as_deref()
}

const NOT_FENCED: u8 = 0;
const FENCED_EXPIRED: u8 = 1;
const FENCED_REVOKED: u8 = 2;

/// What the renew loop, the watchdog and the command runner share: the deadline, the
/// take-over flag, whether Pulumi was stopped, and the process groups of the running Pulumi
/// commands. A command starts only while not fenced, under the same lock the watchdog takes to
/// fence: either the watchdog sees its group, or the command never starts.
#[derive(Debug)]
pub struct Fence {
    settings: Settings,
    /// The deadline on [`boottime_now`]'s clock, in nanoseconds.
    deadline: AtomicU64,
    revoked: AtomicBool,
    fenced: AtomicU8,
    stop: AtomicBool,
    groups: Mutex<Vec<u32>>,
    watchdog: OnceLock<std::thread::Thread>,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Fence {
    pub fn new(settings: Settings, deadline: Duration) -> Fence {
        Fence {
            settings,
            deadline: AtomicU64::new(nanos(deadline)),
            revoked: AtomicBool::new(false),
            fenced: AtomicU8::new(NOT_FENCED),
            stop: AtomicBool::new(false),
            groups: Mutex::new(Vec::new()),
            watchdog: OnceLock::new(),
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The current deadline, on [`boottime_now`]'s clock.
    pub fn deadline(&self) -> Duration {
        Duration::from_nanos(self.deadline.load(Ordering::SeqCst))
    }

    /// Moves the deadline to `deadline` if that is later.
    pub fn extend(&self, deadline: Duration) {
        self.deadline.fetch_max(nanos(deadline), Ordering::SeqCst);
    }

    /// The operator took the Lease over: the watchdog stops Pulumi at once.
    pub fn revoke(&self) {
        self.revoked.store(true, Ordering::SeqCst);
        self.wake_watchdog();
    }

    /// Why Pulumi was stopped, once it was.
    pub fn fenced(&self) -> Option<Cause> {
        match self.fenced.load(Ordering::SeqCst) {
            FENCED_EXPIRED => Some(Cause::Expired),
            FENCED_REVOKED => Some(Cause::Revoked),
            _ => None,
        }
    }

    fn wake_watchdog(&self) {
        if let Some(thread) = self.watchdog.get() {
            thread.unpark();
        }
    }

    fn groups(&self) -> std::sync::MutexGuard<'_, Vec<u32>> {
        self.groups.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a command (in its own process group, whose id is its `pid`) unless Pulumi was
    /// stopped, and registers its group for the watchdog.
    pub fn spawn<T>(
        &self,
        start: impl FnOnce() -> Result<T, Failure>,
        pid: impl FnOnce(&T) -> Option<u32>,
    ) -> Result<T, Failure> {
        let mut groups = self.groups();
        if let Some(cause) = self.fenced() {
            return Err(self.settings.lost(cause));
        }
        let child = start()?;
        if let Some(pid) = pid(&child).filter(|p| *p > 0) {
            groups.push(pid);
        }
        Ok(child)
    }

    /// The command whose group is `pid` was waited for.
    pub fn exited(&self, pid: u32) {
        self.groups().retain(|p| *p != pid);
    }

    /// The watchdog's act: marks the fence (no command starts from here on), SIGINT to every
    /// registered group, up to the stop grace for them to be gone, SIGKILL to those left.
    /// Writes nothing. Returns how many groups were signalled, and how many had to be killed.
    fn enforce(&self, cause: Cause) -> (usize, usize) {
        let groups: Vec<u32> = {
            let groups = self.groups();
            let code = match cause {
                Cause::Expired => FENCED_EXPIRED,
                Cause::Revoked => FENCED_REVOKED,
            };
            self.fenced.store(code, Ordering::SeqCst);
            for &group in groups.iter() {
                signal_group(group, libc::SIGINT);
            }
            groups.clone()
        };
        let until = boottime_now().saturating_add(self.settings.stop_grace);
        while groups.iter().any(|&g| group_alive(g)) && boottime_now() < until {
            std::thread::sleep(EXIT_POLL);
        }
        let left: Vec<u32> = groups.iter().copied().filter(|&g| group_alive(g)).collect();
        for &group in &left {
            signal_group(group, libc::SIGKILL);
        }
        (groups.len(), left.len())
    }
}

/// Sends `signal` to the process group `group` (never to group 0: our own).
fn signal_group(group: u32, signal: libc::c_int) {
    let Ok(pgid) = libc::pid_t::try_from(group) else {
        return;
    };
    if pgid > 0 {
        // SAFETY: kill(2) on a process group we started; no memory is involved.
        unsafe {
            libc::kill(-pgid, signal);
        }
    }
}

/// Whether a process of the group is left (an exited leader not yet waited for counts).
fn group_alive(group: u32) -> bool {
    let Ok(pgid) = libc::pid_t::try_from(group) else {
        return false;
    };
    if pgid <= 0 {
        return false;
    }
    // SAFETY: kill(2) with signal 0 only checks whether the group exists.
    let rc = unsafe { libc::kill(-pgid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The thread that enforces the deadline ([`Fence`]).
pub struct Watchdog {
    fence: Arc<Fence>,
    thread: std::thread::JoinHandle<()>,
}

impl Watchdog {
    pub fn start(fence: Arc<Fence>) -> std::io::Result<Watchdog> {
        let watched = Arc::clone(&fence);
        let thread = std::thread::Builder::new()
            .name("heartbeat-watchdog".into())
            .spawn(move || watch(&watched))?;
        let _ = fence.watchdog.set(thread.thread().clone());
        // A take-over flagged before the handle was recorded is seen at the first tick.
        Ok(Watchdog { fence, thread })
    }

    /// Stops the watchdog (after it finished stopping Pulumi, if it was).
    pub fn stop(self) {
        self.fence.stop.store(true, Ordering::SeqCst);
        self.thread.thread().unpark();
        let _ = self.thread.join();
    }
}

fn watch(fence: &Fence) {
    while !fence.stop.load(Ordering::SeqCst) {
        let revoked = fence.revoked.load(Ordering::SeqCst);
        if let Some(cause) = due(boottime_now(), fence.deadline(), revoked) {
            let (signalled, killed) = fence.enforce(cause);
            // Only now may it write: Pulumi is stopped.
            let how = match (signalled, killed) {
                (0, _) => "no pulumi command was running".to_string(),
                (_, 0) => "it stopped on SIGINT".to_string(),
                (_, n) => format!(
                    "SIGKILL to {n} process group(s) still running {}s after the SIGINT",
                    fence.settings.stop_grace.as_secs()
                ),
            };
            log(format!(
                "stopped pulumi ({how}): {}",
                fence.settings.lost(cause).message
            ));
            return;
        }
        std::thread::park_timeout(TICK);
    }
}

/// One request with the heartbeat's timeout; a failure as an [`Answer`] and a description.
async fn call<T>(
    timeout: Duration,
    request: impl Future<Output = kube::Result<T>>,
) -> Result<T, (Answer, String)> {
    match tokio::time::timeout(timeout, request).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(kube::Error::Api(s))) => Err((Answer::Status(s.code), s.message.clone())),
        Ok(Err(e)) => Err((Answer::NoAnswer, chain(&e))),
        Err(_) => Err((
            Answer::NoAnswer,
            format!("no answer within {}ms", timeout.as_millis()),
        )),
    }
}

/// Renews the Lease every period until aborted or the Lease is lost.
async fn renew_loop(api: Api<Lease>, mut lease: Lease, fence: Arc<Fence>) {
    let mut ticks = tokio::time::interval(fence.settings.renew_every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is immediate: the Lease was just created.
    ticks.tick().await;
    loop {
        ticks.tick().await;
        if fence.fenced().is_some() || fence.revoked.load(Ordering::SeqCst) {
            return;
        }
        renew(&api, &mut lease, &fence).await;
    }
}

/// One renewal: a `replace` with the last known `resourceVersion` (never a blind write).
async fn renew(api: &Api<Lease>, lease: &mut Lease, fence: &Fence) {
    let s = &fence.settings;
    for _ in 0..=CONFLICT_RETRIES {
        let started = boottime_now();
        let mut next = lease.clone();
        if let Some(spec) = next.spec.as_mut() {
            spec.renew_time = Some(MicroTime(Timestamp::now()));
        }
        let pp = PostParams::default();
        let result = call(s.request_timeout(), api.replace(&s.lease, &pp, &next)).await;
        let answer = result.as_ref().map_or_else(|(a, _)| *a, |_| Answer::Ok);
        match (after_renewal(answer, started, s.expire_after), result) {
            (Next::Extend(deadline), Ok(renewed)) => {
                *lease = renewed;
                fence.extend(deadline);
                return;
            }
            (Next::Reread, _) => match reread(api, fence).await {
                Some(current) => *lease = current,
                None => return,
            },
            (Next::Fence, _) => {
                fence.revoke();
                log(format!("the heartbeat Lease {} is gone", s.lease));
                return;
            }
            (_, result) => {
                let why = result.err().map(|(_, why)| why).unwrap_or_default();
                log_not_renewed(fence, &why);
                return;
            }
        }
    }
    log_not_renewed(fence, "the Lease kept changing");
}

fn log_not_renewed(fence: &Fence, why: &str) {
    let left = fence.deadline().saturating_sub(boottime_now());
    log(format!(
        "cannot renew the heartbeat Lease {} ({why}); pulumi is stopped in {}s unless a renewal \
         succeeds",
        fence.settings.lease,
        left.as_secs()
    ));
}

/// After a conflict: the Lease when it is still this pod's (renew again at once); `None` when
/// it was taken over (the fence is revoked) or cannot be read (logged).
async fn reread(api: &Api<Lease>, fence: &Fence) -> Option<Lease> {
    let s = &fence.settings;
    let read = call(s.request_timeout(), api.get(&s.lease)).await;
    let holder = match &read {
        Ok(lease) => Ok(holder_of(lease)),
        Err((answer, _)) => Err(*answer),
    };
    match (after_reread(holder, &s.holder), read) {
        (Next::RetryNow, Ok(lease)) => Some(lease),
        (Next::Fence, read) => {
            fence.revoke();
            let holder = read.ok().and_then(|l| holder_of(&l).map(str::to_string));
            log(format!(
                "the heartbeat Lease {} was taken over (holder now {}): stopping pulumi",
                s.lease,
                holder.as_deref().unwrap_or("none")
            ));
            None
        }
        (_, read) => {
            let why = read.err().map(|(_, why)| why).unwrap_or_default();
            log_not_renewed(fence, &format!("a conflict, then cannot read it: {why}"));
            None
        }
    }
}

/// Why one attempt to arm the heartbeat failed.
pub enum Attempt {
    /// Pulumi must not run.
    Fatal(Failure),
    /// Worth another try (why).
    Retry(String),
}

/// The failure of a 403: the permission the pod's serviceaccount lacks.
fn forbidden(s: &Settings, message: &str) -> Failure {
    let who = crate::outputs::service_account(message)
        .or_else(|| {
            // The Job sets these from the pod's own fields.
            let ns = std::env::var("POD_NAMESPACE").ok()?;
            let sa = std::env::var("POD_SA_NAME").ok()?;
            Some(format!("{ns}/{sa}"))
        })
        .unwrap_or_else(|| "the pod's serviceaccount".to_string());
    Failure::new(
        FailureReason::PermissionDenied,
        format!(
            "cannot hold the heartbeat Lease {}: missing permission to create, get and update on \
             leases.coordination.k8s.io in namespace {} for serviceaccount {who} ({message}); \
             Pulumi did not run",
            s.lease, s.namespace
        ),
    )
}

/// Creates the Lease; a Lease that exists already is adopted when this pod holds it.
/// Returns the Lease and the first deadline.
async fn acquire_once(
    api: &Api<Lease>,
    plan: &RunPlan,
    s: &Settings,
) -> Result<(Lease, Duration), Attempt> {
    let started = boottime_now();
    let lease = build_lease(plan, s, Timestamp::now());
    match call(
        s.request_timeout(),
        api.create(&PostParams::default(), &lease),
    )
    .await
    {
        Ok(created) => Ok((created, deadline_after(started, s.expire_after))),
        Err((Answer::Status(409), _)) => adopt(api, s).await,
        Err((Answer::Status(403), message)) => Err(Attempt::Fatal(forbidden(s, &message))),
        Err((_, why)) => Err(Attempt::Retry(why)),
    }
}

/// The Lease exists: this pod's (an earlier create whose answer was lost), or not.
async fn adopt(api: &Api<Lease>, s: &Settings) -> Result<(Lease, Duration), Attempt> {
    let started = boottime_now();
    match call(s.request_timeout(), api.get(&s.lease)).await {
        Ok(existing) => match holder_of(&existing) {
            Some(holder) if holder == s.holder => {
                log(format!(
                    "the heartbeat Lease {} exists and is this pod's; keeping it",
                    s.lease
                ));
                Ok((existing, deadline_after(started, s.expire_after)))
            }
            other => Err(Attempt::Fatal(Failure::new(
                FailureReason::HeartbeatLost,
                format!(
                    "the heartbeat Lease {} is held by {} (the operator revoked it, or another pod \
                     of this operation holds it), so Pulumi did not run: the stack is never \
                     written by two pods at once",
                    s.lease,
                    other.unwrap_or("no one")
                ),
            ))),
        },
        Err((Answer::Status(403), message)) => Err(Attempt::Fatal(forbidden(s, &message))),
        Err((Answer::Status(404), _)) => Err(Attempt::Retry("it was deleted meanwhile".into())),
        Err((_, why)) => Err(Attempt::Retry(why)),
    }
}

/// Acquires the Lease, retrying with backoff for up to `expire_after`.
async fn acquire(
    api: &Api<Lease>,
    plan: &RunPlan,
    s: &Settings,
) -> Result<(Lease, Duration), Failure> {
    let what = format!("create the heartbeat Lease {}", s.lease);
    with_retries(s.expire_after, &what, || acquire_once(api, plan, s)).await
}

/// Tries `attempt` with backoff until it succeeds or fails for good; fails once the next try
/// would come after `expire_after` ("cannot `what` ... Pulumi did not run").
pub async fn with_retries<T, Fut>(
    expire_after: Duration,
    what: &str,
    mut attempt: impl FnMut() -> Fut,
) -> Result<T, Failure>
where
    Fut: Future<Output = Result<T, Attempt>>,
{
    let give_up = deadline_after(boottime_now(), expire_after);
    let backoff = Backoff::new(Duration::from_millis(500), 2.0, Duration::from_secs(8));
    let mut failures = 0;
    loop {
        let why = match attempt().await {
            Ok(done) => return Ok(done),
            Err(Attempt::Fatal(f)) => return Err(f),
            Err(Attempt::Retry(why)) => why,
        };
        failures += 1;
        let wait = backoff.after(failures);
        if boottime_now().saturating_add(wait) >= give_up {
            return Err(Failure::new(
                FailureReason::HeartbeatLost,
                format!(
                    "cannot {what} within {}s ({why}); Pulumi did not run",
                    expire_after.as_secs()
                ),
            ));
        }
        log(format!(
            "cannot {what} ({why}); retrying in {}ms",
            wait.as_millis()
        ));
        tokio::time::sleep(wait).await;
    }
}

/// The running heartbeat of an operation: the Lease held, renewed by a task, enforced by the
/// watchdog.
pub struct Heartbeat {
    fence: Arc<Fence>,
    watchdog: Watchdog,
    renewer: tokio::task::JoinHandle<()>,
}

impl Heartbeat {
    /// Acquires the plan's Lease and starts the renewals and the watchdog; `None` when the
    /// plan has no heartbeat. Fails (before any Pulumi command) when the Lease cannot be held,
    /// or when the runner is told to stop meanwhile.
    pub async fn start(plan: &RunPlan, signals: &Signals) -> Result<Option<Heartbeat>, Failure> {
        if plan.heartbeat.is_none() {
            return Ok(None);
        }
        tokio::select! {
            started = Heartbeat::acquire(plan) => started.map(Some),
            _ = signals.after(0) => Err(Failure::new(
                FailureReason::Interrupted,
                "interrupted while acquiring the heartbeat Lease; Pulumi did not run",
            )),
        }
    }

    async fn acquire(plan: &RunPlan) -> Result<Heartbeat, Failure> {
        let Some(hb) = plan.heartbeat.as_ref() else {
            return Err(Failure::config_invalid("the plan has no heartbeat"));
        };
        let s = Settings::new(plan, hb, holder_identity(|v| std::env::var(v).ok()))?;
        let client = kube::Client::try_default().await.map_err(|e| {
            Failure::new(
                FailureReason::HeartbeatLost,
                format!(
                    "no Kubernetes client for the heartbeat Lease {}: {}",
                    s.lease,
                    chain(&e)
                ),
            )
        })?;
        let api: Api<Lease> = Api::namespaced(client, &s.namespace);
        let (lease, deadline) = acquire(&api, plan, &s).await?;
        Heartbeat::run(api, lease, s, deadline)
    }

    /// Starts the watchdog and the renewals of an acquired Lease.
    pub fn run(
        api: Api<Lease>,
        lease: Lease,
        s: Settings,
        deadline: Duration,
    ) -> Result<Heartbeat, Failure> {
        log(format!(
            "holding the heartbeat Lease {}/{} as {}: renewed every {}s; pulumi is stopped if it \
             cannot be renewed for {}s",
            s.namespace,
            s.lease,
            s.holder,
            s.renew_every.as_secs(),
            s.expire_after.as_secs()
        ));
        Heartbeat::with_renewer(s, deadline, |fence| {
            tokio::spawn(renew_loop(api, lease, fence))
        })
    }

    /// Starts the watchdog and the task `renewer` starts.
    pub fn with_renewer(
        s: Settings,
        deadline: Duration,
        renewer: impl FnOnce(Arc<Fence>) -> tokio::task::JoinHandle<()>,
    ) -> Result<Heartbeat, Failure> {
        let fence = Arc::new(Fence::new(s, deadline));
        let watchdog = Watchdog::start(Arc::clone(&fence)).map_err(|e| {
            Failure::new(
                FailureReason::HeartbeatLost,
                format!("cannot start the heartbeat watchdog: {e}; Pulumi did not run"),
            )
        })?;
        let renewer = renewer(Arc::clone(&fence));
        Ok(Heartbeat {
            fence,
            watchdog,
            renewer,
        })
    }

    /// What the command runner starts Pulumi through.
    pub fn fence(&self) -> Arc<Fence> {
        Arc::clone(&self.fence)
    }

    /// Stops the renewals and the watchdog (once it finished stopping Pulumi, if it was); the
    /// operation's result, or the heartbeat's failure when the runner stopped Pulumi.
    pub async fn finish(self, result: RunResult) -> RunResult {
        self.renewer.abort();
        let watchdog = self.watchdog;
        if tokio::task::spawn_blocking(move || watchdog.stop())
            .await
            .is_err()
        {
            log("the heartbeat watchdog panicked");
        }
        match self.fence.fenced() {
            Some(cause) => self.fence.settings.lost(cause).into_result(),
            None => result,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pulumi_operator_api::plan::Operation;

    const S: fn(u64) -> Duration = Duration::from_secs;

    fn plan(hb: HeartbeatPlan) -> RunPlan {
        let mut plan: RunPlan = serde_json::from_value(serde_json::json!({
            "updateName": "s-up-1",
            "updateUid": "uid-1",
            "namespace": "ns",
            "operation": Operation::Up.as_str(),
            "stack": {"name": "dev", "create": true},
            "outputsLabels": {"pulumi.com/stack-name": "s", "other": "x"},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        plan.heartbeat = Some(hb);
        plan
    }

    fn settings() -> Settings {
        let hb = HeartbeatPlan {
            renew_every_seconds: 10,
            expire_after_seconds: 60,
            stop_grace_seconds: 20,
            ..HeartbeatPlan::new("s-up-1-heartbeat")
        };
        Settings::new(&plan(hb.clone()), &hb, Some("pod-a".into())).unwrap()
    }

    #[test]
    fn the_deadline_is_the_start_of_the_last_successful_request_plus_expire() {
        // A renewal that started at 100 s and took 4 s: the deadline counts from its start.
        assert_eq!(
            after_renewal(Answer::Ok, S(100), S(60)),
            Next::Extend(S(160))
        );
        assert_eq!(deadline_after(Duration::MAX, S(60)), Duration::MAX);
        let fence = Fence::new(settings(), S(160));
        // A deadline never moves back (a slow success answered after a later one).
        fence.extend(S(150));
        assert_eq!(fence.deadline(), S(160));
        fence.extend(S(170));
        assert_eq!(fence.deadline(), S(170));
        assert_eq!(due(S(169), S(170), false), None);
        assert_eq!(due(S(170), S(170), false), Some(Cause::Expired));
        assert_eq!(due(S(1), S(170), true), Some(Cause::Revoked));
        // The boot-time clock runs (and is at least the monotonic clock's reading of uptime).
        let (a, b) = (boottime_now(), boottime_now());
        assert!(a > Duration::ZERO && b >= a && a < Duration::MAX);
    }

    #[test]
    fn renewal_answers_extend_fence_reread_or_keep() {
        assert_eq!(
            after_renewal(Answer::Status(409), S(1), S(60)),
            Next::Reread
        );
        assert_eq!(after_renewal(Answer::Status(404), S(1), S(60)), Next::Fence);
        for kept in [
            Answer::Status(500),
            Answer::Status(403),
            Answer::Status(429),
            Answer::NoAnswer,
        ] {
            assert_eq!(after_renewal(kept, S(1), S(60)), Next::Keep, "{kept:?}");
        }
        // After a conflict: still ours → renew again at once; someone else's, no holder or gone
        // → fence; unreadable → keep the deadline.
        assert_eq!(after_reread(Ok(Some("pod-a")), "pod-a"), Next::RetryNow);
        assert_eq!(after_reread(Ok(Some("operator")), "pod-a"), Next::Fence);
        assert_eq!(after_reread(Ok(None), "pod-a"), Next::Fence);
        assert_eq!(after_reread(Err(Answer::Status(404)), "pod-a"), Next::Fence);
        assert_eq!(after_reread(Err(Answer::NoAnswer), "pod-a"), Next::Keep);
        assert_eq!(after_reread(Err(Answer::Status(503)), "pod-a"), Next::Keep);
    }

    #[test]
    fn settings_are_checked_and_requests_time_out_well_within_a_period() {
        let s = settings();
        assert_eq!(s.request_timeout(), MAX_REQUEST_TIMEOUT);
        let short = Settings {
            renew_every: S(1),
            ..s.clone()
        };
        assert_eq!(short.request_timeout(), Duration::from_millis(500));
        let mut hb = HeartbeatPlan::new("l");
        hb.renew_every_seconds = 60;
        let e = Settings::new(&plan(hb.clone()), &hb, Some("p".into())).unwrap_err();
        assert_eq!(e.reason, FailureReason::ConfigInvalid);
        hb.renew_every_seconds = 0;
        assert!(Settings::new(&plan(hb.clone()), &hb, Some("p".into())).is_err());
        let hb = HeartbeatPlan::new("l");
        assert!(Settings::new(&plan(hb.clone()), &hb, None).is_err());
        let hb = HeartbeatPlan::new("");
        assert!(Settings::new(&plan(hb.clone()), &hb, Some("p".into())).is_err());
    }

    #[test]
    fn the_holder_is_the_pod_name_then_the_hostname() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            holder_identity(env(&[("POD_NAME", "p-1"), ("HOSTNAME", "h")])).as_deref(),
            Some("p-1")
        );
        assert_eq!(
            holder_identity(env(&[("POD_NAME", " "), ("HOSTNAME", "h")])).as_deref(),
            Some("h")
        );
        assert_eq!(holder_identity(env(&[])), None);
    }

    #[test]
    fn lease_shape() {
        let s = settings();
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let lease = build_lease(&plan(HeartbeatPlan::new("x")), &s, now);
        assert_eq!(lease.metadata.name.as_deref(), Some("s-up-1-heartbeat"));
        assert_eq!(lease.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(
            lease.metadata.labels,
            Some(BTreeMap::from([(
                STACK_NAME_LABEL.to_string(),
                "s".to_string()
            )]))
        );
        let owner = &lease.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (
                owner.api_version.as_str(),
                owner.kind.as_str(),
                owner.name.as_str(),
                owner.uid.as_str(),
                owner.controller,
                owner.block_owner_deletion
            ),
            (
                "auto.pulumi.com/v1alpha1",
                "Update",
                "s-up-1",
                "uid-1",
                Some(false),
                Some(false)
            )
        );
        let spec = lease.spec.as_ref().unwrap();
        assert_eq!(holder_of(&lease), Some("pod-a"));
        assert_eq!(spec.lease_duration_seconds, Some(60));
        assert_eq!(spec.acquire_time, Some(MicroTime(now)));
        assert_eq!(spec.renew_time, Some(MicroTime(now)));
        let json = serde_json::to_value(&lease).unwrap();
        assert_eq!(json["spec"]["holderIdentity"], "pod-a");
        // Without an Update (no UID) no owner reference: the API server would refuse it.
        let mut bare = plan(HeartbeatPlan::new("x"));
        bare.update_uid.clear();
        assert!(build_lease(&bare, &s, now)
            .metadata
            .owner_references
            .is_none());
    }

    #[test]
    fn nothing_starts_once_fenced_and_messages_say_why() {
        let fence = Fence::new(settings(), Duration::MAX);
        let started = fence.spawn(|| Ok(7u32), |pid| Some(*pid)).unwrap();
        assert_eq!((started, fence.groups().clone()), (7, vec![7]));
        fence.exited(7);
        assert!(fence.groups().is_empty());
        // Marked (no group is registered: nothing is signalled, nothing waited for).
        assert_eq!(fence.enforce(Cause::Expired), (0, 0));
        assert_eq!(fence.fenced(), Some(Cause::Expired));
        let refused = fence
            .spawn(|| -> Result<u32, Failure> { panic!("started") }, |_| None)
            .unwrap_err();
        assert_eq!(refused.reason, FailureReason::HeartbeatLost);
        assert_eq!(
            refused.message,
            "the operation's heartbeat Lease s-up-1-heartbeat could not be renewed for 60s, so \
             the runner stopped Pulumi so that the stack's next operation can run safely; the \
             stack runs it again"
        );
        assert!(settings()
            .lost(Cause::Revoked)
            .message
            .contains("s-up-1-heartbeat was taken over by the operator"));
        // Never a signal to group 0 (the runner's own) or a negative one.
        signal_group(0, 0);
        assert!(!group_alive(0));
        assert!(!group_alive(u32::MAX));
    }
}
