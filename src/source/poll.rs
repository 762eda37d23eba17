//! Shared branch polling: one `ls-remote` per (repository, reference, credentials) per
//! interval, however many Stacks track that branch; the result is fanned out to all of them.
//!
//! A cache keyed by (url, reference, fingerprint of the credentials) holds the last answer (a
//! commit or an error) and when it was fetched. A Stack's reconcile uses the cached answer when
//! it is younger than the Stack's resync period, and refreshes it otherwise. Each key has its
//! own async mutex: concurrent reconciles for the same key wait for the one call in flight and
//! then use its answer (single flight). After a failure the key backs off (5 s, doubling, at
//! most 5 min) before the next call, so a broken repository is not hammered by every Stack.
//! Only real calls are counted in `pulumi_operator_git_ls_remote_total{result}`.

use crate::metrics::{Metrics, ResultLabels};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

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
    pub result: Result<String, String>,
    pub at: Instant,
}

/// The state of one key.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Slot {
    pub last: Option<Last>,
    /// Consecutive failed calls.
    pub failures: u32,
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
    Use(Result<String, String>),
    /// Call ls-remote.
    Call,
}

/// The wait after `failures` consecutive failures before the next call.
pub fn backoff(failures: u32) -> Duration {
    const FIRST: Duration = Duration::from_secs(5);
    const MAX: Duration = Duration::from_secs(300);
    if failures == 0 {
        return Duration::ZERO;
    }
    FIRST
        .checked_mul(1u32 << (failures - 1).min(16))
        .unwrap_or(MAX)
        .min(MAX)
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
pub fn record(slot: &mut Slot, result: Result<String, String>, at: Instant) {
    slot.failures = if result.is_ok() {
        0
    } else {
        slot.failures.saturating_add(1)
    };
    slot.last = Some(Last { result, at });
}

/// Keys unused for this long are forgotten.
const FORGET_AFTER: Duration = Duration::from_secs(3600);

type Entry = (Arc<tokio::sync::Mutex<Slot>>, Instant);

/// The cache of all keys.
#[derive(Default)]
pub struct Poller {
    slots: Mutex<HashMap<Key, Entry>>,
}

impl Poller {
    /// The operator's one poller.
    pub fn shared() -> &'static Poller {
        static POLLER: OnceLock<Poller> = OnceLock::new();
        POLLER.get_or_init(Poller::default)
    }

    fn slot(&self, key: Key, now: Instant) -> Arc<tokio::sync::Mutex<Slot>> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.retain(|_, (slot, used)| {
            now.saturating_duration_since(*used) < FORGET_AFTER || Arc::strong_count(slot) > 1
        });
        let entry = slots.entry(key).or_insert_with(|| (Arc::default(), now));
        entry.1 = now;
        entry.0.clone()
    }

    /// The head of `key`: cached when fresh enough for `need`, else from `call` (one call per
    /// key at a time; concurrent callers wait for it and share its answer).
    pub async fn head<F, Fut>(
        &self,
        key: Key,
        need: Need,
        metrics: Option<&Metrics>,
        call: F,
    ) -> Result<String, String>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<String, String>>,
    {
        let slot = self.slot(key, Instant::now());
        let mut slot = slot.lock().await;
        match plan(&slot, need, Instant::now()) {
            Plan::Use(result) => result,
            Plan::Call => {
                let result = call().await;
                if let Some(m) = metrics {
                    let label = if result.is_ok() { "success" } else { "failure" };
                    m.git_ls_remote
                        .get_or_create(&ResultLabels {
                            result: label.into(),
                        })
                        .inc();
                }
                record(&mut slot, result.clone(), Instant::now());
                result
            }
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.slots.lock().unwrap().len()
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_reconciles_share_one_call() {
        let poller = Arc::new(Poller::default());
        let calls = Arc::new(AtomicU32::new(0));
        let metrics = Arc::new(Metrics::default());
        let mut tasks = Vec::new();
        for _ in 0..200 {
            let (poller, calls, metrics) = (poller.clone(), calls.clone(), metrics.clone());
            tasks.push(tokio::spawn(async move {
                poller
                    .head(
                        key("main"),
                        Need::MaxAge(Duration::from_secs(60)),
                        Some(&metrics),
                        || async {
                            calls.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            Ok::<_, String>("abc".to_string())
                        },
                    )
                    .await
            }));
        }
        for t in tasks {
            assert_eq!(t.await.unwrap(), Ok("abc".to_string()));
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // Another reference, or other credentials, is another key.
        let other = poller
            .head(
                key("dev"),
                Need::MaxAge(Duration::from_secs(60)),
                Some(&metrics),
                || async { Err::<String, _>("no commits found".to_string()) },
            )
            .await;
        assert!(other.is_err());
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
        let fresh = poller
            .head(key("main"), Need::MaxAge(Duration::ZERO), None, || async {
                Ok::<_, String>("def".to_string())
            })
            .await;
        assert_eq!(fresh, Ok("def".to_string()));
        assert_eq!(poller.len(), 2);
    }
}
