//! Shared branch polling: one `ls-remote` per (repository, reference, credentials) per
//! interval, however many Stacks track that branch; the result is fanned out to all of them.
//!
//! A cache keyed by (url, reference, fingerprint of the credentials) holds the last answer (a
//! commit or an error) and when it was fetched. A Stack's reconcile uses the cached answer when
//! it is younger than the Stack's resync period, and refreshes it otherwise. A reconcile never
//! waits for the network: when the answer is not fresh enough it gets `Pending` at once, the
//! call runs in the background on the bounded pool ([`super::pool`]: a few calls at once, a few
//! per host, each with a deadline), and the Stacks that asked are announced on
//! [`Poller::answers`] when it ends, to be reconciled again. One call per key is in flight at a
//! time (single flight: 200 Stacks on one branch make one call). After a failure the key backs off (5 s, doubling, at
//! most 5 min) before the next call, so a broken repository is not hammered by every Stack.
//! Only real calls are counted in `pulumi_operator_git_ls_remote_total{result}` (not one refused
//! before it contacted anything, `crate::runtime::remote_hosts`).

use super::pool::{host_of, Cancel, Limits, Pool};
use crate::runtime::metrics::Metrics;
use crate::source::RemoteError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tracing::debug;

/// What is polled: a reference of a repository, with given credentials.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub url: String,
    pub reference: String,
    /// [`pulumi_gitauth::Credentials::fingerprint`]: different credentials never share an
    /// answer (one may be allowed where the other is not).
    pub credentials: String,
}

/// The last completed call of a key.
#[derive(Clone, Debug, PartialEq)]
pub struct Last {
    pub result: Result<String, RemoteError>,
    pub at: Instant,
}

/// The state of one key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Slot {
    pub last: Option<Last>,
    /// Consecutive failed calls.
    pub failures: u32,
    /// A call is running.
    pub in_flight: bool,
    /// Who asked while the call was running, to be reconciled when it ends.
    pub waiters: Vec<Waiter>,
}

/// How fresh an answer a reconcile needs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Need {
    /// An answer at most this old (the Stack's resync period).
    MaxAge(Duration),
    /// An answer fetched at or after this instant (an explicit reconciliation request): a
    /// call that completes while the reconcile waits for the key satisfies it.
    Since(Instant),
}

/// The decision for one reconcile.
#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// Use the cached answer.
    Use(Result<String, RemoteError>),
    /// Call ls-remote.
    Call,
}

/// The wait after `failures` consecutive failures before the next call.
pub fn backoff(failures: u32) -> Duration {
    const LS_REMOTE: pulumi_operator_api::backoff::Backoff =
        pulumi_operator_api::backoff::Backoff::new(
            Duration::from_secs(5),
            2.0,
            Duration::from_secs(300),
        );
    LS_REMOTE.after(failures)
}

/// Pure: whether the cached answer may be used at `now`.
pub fn plan(slot: &Slot, need: Need, now: Instant) -> Plan {
    let Some(last) = &slot.last else {
        return Plan::Call;
    };
    let age = now.saturating_duration_since(last.at);
    // A failing key waits out its backoff, whatever the request.
    if last.result.is_err() && age < backoff(slot.failures) {
        return Plan::Use(last.result.clone());
    }
    let fresh = match need {
        Need::MaxAge(max) => age < max,
        Need::Since(t) => last.at >= t,
    };
    if fresh {
        Plan::Use(last.result.clone())
    } else {
        Plan::Call
    }
}

/// Pure: the slot after a call that ended at `at`.
pub fn record(slot: &mut Slot, result: Result<String, RemoteError>, at: Instant) {
    slot.failures = if result.is_ok() {
        0
    } else {
        slot.failures.saturating_add(1)
    };
    slot.last = Some(Last { result, at });
}

/// Pure: the reconcile's step, given the key's state: the cached answer, wait for the call in
/// flight, or start one.
pub fn step(slot: &Slot, need: Need, now: Instant) -> Step {
    match plan(slot, need, now) {
        Plan::Use(result) => Step::Use(result),
        Plan::Call if slot.in_flight => Step::Wait,
        Plan::Call => Step::Start,
    }
}

/// What [`step`] decided.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    Use(Result<String, RemoteError>),
    Wait,
    Start,
}

/// What a reconcile gets at once.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    Ready(Result<String, RemoteError>),
    /// A call is in flight; the waiter is announced on [`Poller::answers`] when it ends.
    Pending,
}

/// Who waits for a key: a Stack's (namespace, name).
pub type Waiter = (String, String);

/// Keys unused for this long are forgotten.
const FORGET_AFTER: Duration = Duration::from_secs(3600);

/// How many announcements a slow subscriber may miss (it then relies on its requeue).
const ANSWERS_BUFFER: usize = 1024;

struct Entry {
    slot: Slot,
    used: Instant,
}

struct Inner {
    slots: Mutex<HashMap<Key, Entry>>,
    pool: Pool,
    answers: tokio::sync::broadcast::Sender<Arc<Vec<Waiter>>>,
}

/// The cache of all keys, and the pool its calls run on.
#[derive(Clone)]
pub struct Poller {
    inner: Arc<Inner>,
}

impl Default for Poller {
    fn default() -> Poller {
        Poller::new(Limits::default())
    }
}

static SHARED: OnceLock<Poller> = OnceLock::new();

impl Poller {
    pub fn new(limits: Limits) -> Poller {
        Poller {
            inner: Arc::new(Inner {
                slots: Mutex::default(),
                pool: Pool::new(limits),
                answers: tokio::sync::broadcast::channel(ANSWERS_BUFFER).0,
            }),
        }
    }

    /// Sets the limits of the operator's one poller; only before its first use (at start-up).
    pub fn configure(limits: Limits) -> Result<(), Limits> {
        SHARED.set(Poller::new(limits)).map_err(|p| p.limits())
    }

    /// The operator's one poller.
    pub fn shared() -> &'static Poller {
        SHARED.get_or_init(Poller::default)
    }

    pub fn limits(&self) -> Limits {
        self.inner.pool.limits()
    }

    #[cfg(test)]
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// Every completed call's waiters, to reconcile them at once.
    pub fn answers(&self) -> tokio::sync::broadcast::Receiver<Arc<Vec<Waiter>>> {
        self.inner.answers.subscribe()
    }

    /// The head of `key` without waiting: the cached answer when fresh enough for `need`,
    /// else `Pending`, with `call` started on the pool unless a call for the key is already in
    /// flight (single flight: one call however many Stacks ask). `waiter` is announced on
    /// [`Poller::answers`] when the call ends. Must be called within a tokio runtime.
    pub fn lookup<F>(
        &self,
        key: Key,
        need: Need,
        waiter: Option<Waiter>,
        metrics: Option<Arc<Metrics>>,
        call: F,
    ) -> Answer
    where
        F: FnOnce(&Cancel) -> Result<String, RemoteError> + Send + 'static,
    {
        let now = Instant::now();
        let mut slots = self.inner.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.retain(|_, e| {
            e.slot.in_flight || now.saturating_duration_since(e.used) < FORGET_AFTER
        });
        let entry = slots.entry(key.clone()).or_insert_with(|| Entry {
            slot: Slot::default(),
            used: now,
        });
        entry.used = now;
        let step = step(&entry.slot, need, now);
        if step == Step::Wait || step == Step::Start {
            if let Some(w) = waiter {
                if !entry.slot.waiters.contains(&w) {
                    entry.slot.waiters.push(w);
                }
            }
        }
        match step {
            Step::Use(result) => Answer::Ready(result),
            Step::Wait => Answer::Pending,
            Step::Start => {
                entry.slot.in_flight = true;
                drop(slots);
                let inner = self.inner.clone();
                tokio::spawn(async move {
                    let shown = pulumi_gitauth::redact::urls(&key.url);
                    let started = Instant::now();
                    let result = match inner.pool.run(&host_of(&key.url), call).await {
                        Ok(r) => r,
                        Err(e) => Err(format!("ls-remote {shown}: {e}").into()),
                    };
                    // A refused host was never contacted: not an ls-remote.
                    let contacted = !matches!(&result, Err(e) if e.not_allowed);
                    if let Some(m) = metrics.filter(|_| contacted) {
                        m.git_ls_remote_done(result.is_ok(), started.elapsed());
                    }
                    if let Err(e) = &result {
                        debug!(repository = %shown, reference = %key.reference, "ls-remote failed: {e}");
                    }
                    let waiters = {
                        let mut slots = inner.slots.lock().unwrap_or_else(|p| p.into_inner());
                        let entry = slots.entry(key).or_insert_with(|| Entry {
                            slot: Slot::default(),
                            used: Instant::now(),
                        });
                        record(&mut entry.slot, result, Instant::now());
                        entry.slot.in_flight = false;
                        std::mem::take(&mut entry.slot.waiters)
                    };
                    if !waiters.is_empty() {
                        // No subscriber (tests, shutdown) is not an error.
                        let _ = inner.answers.send(Arc::new(waiters));
                    }
                });
                Answer::Pending
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.slots.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn key(r: &str) -> Key {
        Key {
            url: "https://example.com/r.git".into(),
            reference: r.into(),
            credentials: String::new(),
        }
    }

    #[test]
    fn freshness_and_backoff_table() {
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        let min = Duration::from_secs(60);
        // Nothing cached: call.
        assert_eq!(plan(&Slot::default(), Need::MaxAge(min), t0), Plan::Call);
        let mut ok = Slot::default();
        record(&mut ok, Ok("abc".into()), t0);
        assert_eq!(ok.failures, 0);
        // Younger than the period: use; as old or older: call.
        assert_eq!(
            plan(&ok, Need::MaxAge(min), s(59)),
            Plan::Use(Ok("abc".into()))
        );
        assert_eq!(plan(&ok, Need::MaxAge(min), s(60)), Plan::Call);
        // A shorter period (another Stack) refreshes sooner.
        assert_eq!(
            plan(&ok, Need::MaxAge(Duration::from_secs(5)), s(5)),
            Plan::Call
        );
        // A reconciliation request wants an answer fetched after it arrived.
        assert_eq!(plan(&ok, Need::Since(s(1)), s(2)), Plan::Call);
        assert_eq!(
            plan(&ok, Need::Since(t0), s(2)),
            Plan::Use(Ok("abc".into()))
        );
        // Failures back off: 5 s, 10 s, 20 s, … at most 5 min, even for short periods.
        let mut bad = Slot::default();
        record(&mut bad, Err("down".into()), t0);
        assert_eq!(bad.failures, 1);
        let short = Need::MaxAge(Duration::from_secs(1));
        assert_eq!(plan(&bad, short, s(4)), Plan::Use(Err("down".into())));
        assert_eq!(plan(&bad, short, s(5)), Plan::Call);
        assert_eq!(
            plan(&bad, Need::Since(s(3)), s(4)),
            Plan::Use(Err("down".into()))
        );
        record(&mut bad, Err("down".into()), t0);
        assert_eq!(bad.failures, 2);
        assert_eq!(plan(&bad, short, s(9)), Plan::Use(Err("down".into())));
        assert_eq!(plan(&bad, short, s(10)), Plan::Call);
        // After the backoff, a failure is as stale as the period says.
        assert_eq!(
            plan(&bad, Need::MaxAge(min), s(30)),
            Plan::Use(Err("down".into()))
        );
        record(&mut bad, Ok("def".into()), s(40));
        assert_eq!(bad.failures, 0);
        assert_eq!(backoff(0), Duration::ZERO);
        assert_eq!(backoff(1), Duration::from_secs(5));
        assert_eq!(backoff(3), Duration::from_secs(20));
        assert_eq!(backoff(7), Duration::from_secs(300));
        assert_eq!(backoff(u32::MAX), Duration::from_secs(300));
    }

    /// Polls `lookup` until it is ready (as the re-triggered reconciles would).
    async fn settle(poller: &Poller, key: Key, need: Need) -> Result<String, RemoteError> {
        for _ in 0..500 {
            if let Answer::Ready(r) = poller.lookup(key.clone(), need, None, None, |_| {
                Err("unexpected call".into())
            }) {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no answer");
    }

    #[test]
    fn steps_wait_for_the_call_in_flight() {
        let t0 = Instant::now();
        let need = Need::MaxAge(Duration::from_secs(60));
        assert_eq!(step(&Slot::default(), need, t0), Step::Start);
        let running = Slot {
            in_flight: true,
            ..Default::default()
        };
        assert_eq!(step(&running, need, t0), Step::Wait);
        // A fresh answer is used even while a refresh for a shorter period runs.
        let mut fresh = running.clone();
        record(&mut fresh, Ok("abc".into()), t0);
        assert_eq!(step(&fresh, need, t0), Step::Use(Ok("abc".into())));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refused_host_is_not_counted_as_a_call() {
        let poller = Poller::default();
        let metrics = Arc::new(Metrics::default());
        let need = Need::MaxAge(Duration::from_secs(60));
        let refused = crate::runtime::remote_hosts::Refused("host \"x\" is refused".into());
        let answer = poller.lookup(key("main"), need, None, Some(metrics.clone()), |_| {
            Err(RemoteError::not_allowed(refused))
        });
        assert_eq!(answer, Answer::Pending);
        let e = settle(&poller, key("main"), need).await.unwrap_err();
        assert!(e.not_allowed, "{e}");
        let text = metrics.encode();
        assert!(
            text.contains("pulumi_operator_git_ls_remote_total{result=\"failure\"} 0"),
            "{text}"
        );
        // And the Stack's condition says NotAllowed.
        let reason = crate::source::ResolveError::from(e).reason;
        assert_eq!(reason, pulumi_operator_api::names::REASON_NOT_ALLOWED);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_reconciles_share_one_call() {
        let poller = Poller::default();
        let calls = Arc::new(AtomicU32::new(0));
        let metrics = Arc::new(Metrics::default());
        let mut answers = poller.answers();
        let need = Need::MaxAge(Duration::from_secs(60));
        for i in 0..200 {
            let calls = calls.clone();
            let answer = poller.lookup(
                key("main"),
                need,
                Some(("ns".into(), format!("s{}", i % 100))),
                Some(metrics.clone()),
                move |_| {
                    calls.fetch_add(1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(100));
                    Ok("abc".to_string())
                },
            );
            assert_eq!(answer, Answer::Pending);
        }
        // The waiters (each once) are announced when the one call ends.
        let waiters = tokio::time::timeout(Duration::from_secs(5), answers.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(waiters.len(), 100);
        assert_eq!(settle(&poller, key("main"), need).await, Ok("abc".into()));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // Another reference, or other credentials, is another key.
        let other = poller.lookup(key("dev"), need, None, Some(metrics.clone()), |_| {
            Err("no commits found".into())
        });
        assert_eq!(other, Answer::Pending);
        assert!(settle(&poller, key("dev"), need).await.is_err());
        let text = metrics.encode();
        assert!(
            text.contains("pulumi_operator_git_ls_remote_total{result=\"success\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("pulumi_operator_git_ls_remote_total{result=\"failure\"} 1"),
            "{text}"
        );
        // A stale answer is refreshed by one call.
        let stale = Need::MaxAge(Duration::ZERO);
        let since = Instant::now();
        assert_eq!(
            poller.lookup(key("main"), stale, None, None, |_| Ok("def".to_string())),
            Answer::Pending
        );
        assert_eq!(
            settle(&poller, key("main"), Need::Since(since)).await,
            Ok("def".to_string())
        );
        assert_eq!(poller.len(), 2);
    }
}
