//! Whether a stack operation is due, and when to look again: PKO's sync decision
//! (pko-reference §3.3–3.4) as one pure function of the spec, the status and the observed
//! revision.

use crate::runtime::duration::human;
use pulumi_operator_api::names;
use pulumi_operator_api::{StackSpec, StackStatus, StackUpdateStateMessage, UpdateType};
use std::time::Duration;

/// What the reconcile observed, besides the spec and status.
#[derive(Clone, Debug)]
pub struct Observed<'a> {
    pub generation: i64,
    /// The `pulumi.com/reconciliation-request` annotation ("" when absent).
    pub reconcile_request: &'a str,
    pub deleting: bool,
    /// The source revision (commit SHA, Program digest, Flux revision; "" without a source).
    pub revision: &'a str,
    /// Whether the source is polled (branch tracking), so that the result is re-checked.
    pub polled: bool,
    pub now: jiff::Timestamp,
}

/// Operator-wide limits.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// The shortest resync period (PKO: 60 s); a flag may lower it for tests.
    pub min_resync: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            min_resync: Duration::from_secs(names::MIN_RESYNC_FREQUENCY_SECONDS as u64),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Run an operation now; `reason` is PKO's sync message (also the Update's `--message`).
    Run { kind: UpdateType, reason: String },
    /// Nothing to run now; look again after `requeue` (if any).
    Synced { requeue: Option<Duration> },
}

/// `resyncFrequencySeconds` with PKO's 60 s default and the operator's floor.
pub fn resync_period(spec: &StackSpec, limits: &Limits) -> Duration {
    let requested = spec
        .resync_frequency_seconds
        .filter(|s| *s > 0)
        .unwrap_or(names::MIN_RESYNC_FREQUENCY_SECONDS);
    Duration::from_secs(requested.max(0) as u64).max(limits.min_resync)
}

/// The wait before the next attempt after a failure, PKO's `cooldown`: 10 s × 3^failures
/// (`lastUpdate.failures` counts from 0 at a new generation), capped by
/// `retryMaxBackoffDurationSeconds` (default 1 hour).
pub fn backoff(spec: &StackSpec, failures: i64) -> Duration {
    let cap = Duration::from_secs(spec.retry_max_backoff_seconds().max(1) as u64);
    pulumi_operator_api::backoff::Backoff::new(Duration::from_secs(10), 3.0, cap)
        .after(failures.clamp(0, 20) as u32 + 1)
}

fn elapsed(
    since: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    now: jiff::Timestamp,
) -> Duration {
    // Status times have whole-second precision: one second is taken off so that a wait
    // never ends early.
    since
        .map(|t| now.duration_since(t.0))
        .and_then(|d| Duration::try_from(d).ok())
        .map(|d| d.saturating_sub(Duration::from_secs(1)))
        .unwrap_or(Duration::MAX)
}

/// The type of the operation a due stack runs.
pub fn operation(spec: &StackSpec, deleting: bool) -> UpdateType {
    if deleting {
        UpdateType::Destroy
    } else if spec.preview {
        UpdateType::Preview
    } else {
        UpdateType::Up
    }
}

pub fn decide(
    spec: &StackSpec,
    status: Option<&StackStatus>,
    obs: &Observed<'_>,
    limits: &Limits,
) -> Decision {
    let run = |reason: String| Decision::Run {
        kind: operation(spec, obs.deleting),
        reason,
    };
    let Some(last) = status.and_then(|s| s.last_update.as_ref()) else {
        return run("Initial stack update".into());
    };
    if last.generation != Some(obs.generation) {
        return run(if obs.deleting {
            "Stack marked for deletion".into()
        } else {
            format!("New stack generation: {}", obs.generation)
        });
    }
    if last.reconcile_request.as_deref().unwrap_or("") != obs.reconcile_request {
        return run(format!("Sync request: {:?}", obs.reconcile_request));
    }
    let resync = resync_period(spec, limits);
    let poll = obs.polled.then_some(resync);
    let since_last = elapsed(last.last_resync_time.as_ref(), obs.now);
    let failures = last.failures.unwrap_or(0);
    match last.state {
        Some(StackUpdateStateMessage::Succeeded) => {
            if obs.deleting {
                return if last.update_type == Some(UpdateType::Destroy) {
                    Decision::Synced { requeue: None }
                } else {
                    run("Stack marked for deletion".into())
                };
            }
            if last.last_successful_commit.as_deref().unwrap_or("") != obs.revision {
                return run(format!("New commit detected: {:?}", obs.revision));
            }
            if spec.continue_resync_on_commit_match {
                if since_last >= resync {
                    return run(format!("Resync time elapsed: {}", human(since_last)));
                }
                let wait = resync
                    .saturating_sub(since_last)
                    .max(Duration::from_secs(1));
                return Decision::Synced {
                    requeue: Some(poll.map_or(wait, |p| p.min(wait))),
                };
            }
            Decision::Synced { requeue: poll }
        }
        _ => {
            if last.last_attempted_commit.as_deref().unwrap_or("") != obs.revision {
                return run(format!("New commit detected: {:?}", obs.revision));
            }
            if failures >= names::MAX_UPDATE_FAILURES {
                // Stalled: only a new generation, request or revision runs it again.
                return Decision::Synced { requeue: poll };
            }
            let cooldown = backoff(spec, failures);
            if since_last >= cooldown {
                return run(format!("Backoff time elapsed: {}", human(cooldown)));
            }
            let wait = cooldown
                .saturating_sub(since_last)
                .max(Duration::from_secs(1));
            Decision::Synced {
                requeue: Some(poll.map_or(wait, |p| p.min(wait))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use pulumi_operator_api::StackUpdateState;

    fn spec() -> StackSpec {
        serde_json::from_value(serde_json::json!({"stack": "dev"})).unwrap()
    }

    fn now() -> jiff::Timestamp {
        "2026-01-01T12:00:00Z".parse().unwrap()
    }

    fn ago(secs: i64) -> Time {
        Time(now() - jiff::SignedDuration::from_secs(secs))
    }

    fn obs(revision: &str) -> Observed<'_> {
        Observed {
            generation: 2,
            reconcile_request: "",
            deleting: false,
            revision,
            polled: false,
            now: now(),
        }
    }

    fn last(
        state: StackUpdateStateMessage,
        commit: &str,
        failures: i64,
        secs_ago: i64,
    ) -> StackStatus {
        StackStatus {
            last_update: Some(StackUpdateState {
                name: Some("s-1".into()),
                update_type: Some(UpdateType::Up),
                state: Some(state.clone()),
                generation: Some(2),
                reconcile_request: Some(String::new()),
                last_attempted_commit: Some(commit.into()),
                last_successful_commit: Some(if state == StackUpdateStateMessage::Succeeded {
                    commit.into()
                } else {
                    "old".into()
                }),
                last_resync_time: Some(ago(secs_ago)),
                failures: Some(failures),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn reason(d: Decision) -> String {
        match d {
            Decision::Run { reason, .. } => reason,
            other => panic!("expected a run, got {other:?}"),
        }
    }

    #[test]
    fn table_of_triggers() {
        let l = Limits::default();
        let s = spec();
        let ok = last(StackUpdateStateMessage::Succeeded, "a", 0, 10);
        // (status, observed revision, request, deleting, expected run reason or None)
        assert_eq!(
            reason(decide(&s, None, &obs("a"), &l)),
            "Initial stack update"
        );
        let mut o = obs("a");
        o.generation = 3;
        assert_eq!(
            reason(decide(&s, Some(&ok), &o, &l)),
            "New stack generation: 3"
        );
        o.deleting = true;
        assert_eq!(
            decide(&s, Some(&ok), &o, &l),
            Decision::Run {
                kind: UpdateType::Destroy,
                reason: "Stack marked for deletion".into()
            }
        );
        let mut o = obs("a");
        o.reconcile_request = "now";
        assert_eq!(
            reason(decide(&s, Some(&ok), &o, &l)),
            "Sync request: \"now\""
        );
        assert_eq!(
            reason(decide(&s, Some(&ok), &obs("b"), &l)),
            "New commit detected: \"b\""
        );
        assert_eq!(
            decide(&s, Some(&ok), &obs("a"), &l),
            Decision::Synced { requeue: None }
        );
    }

    #[test]
    fn branch_polling_requeues_after_the_resync_period() {
        let ok = last(StackUpdateStateMessage::Succeeded, "a", 0, 10);
        let mut o = obs("a");
        o.polled = true;
        assert_eq!(
            decide(&spec(), Some(&ok), &o, &Limits::default()),
            Decision::Synced {
                requeue: Some(Duration::from_secs(60))
            }
        );
        let fast = Limits {
            min_resync: Duration::from_secs(1),
        };
        let mut s = spec();
        s.resync_frequency_seconds = Some(5);
        assert_eq!(
            decide(&s, Some(&ok), &o, &fast),
            Decision::Synced {
                requeue: Some(Duration::from_secs(5))
            }
        );
        // PKO's floor: 5 s means 60 s unless the operator lowers the floor.
        assert_eq!(
            resync_period(&s, &Limits::default()),
            Duration::from_secs(60)
        );
    }

    #[test]
    fn continuous_resync() {
        let mut s = spec();
        s.continue_resync_on_commit_match = true;
        let recent = last(StackUpdateStateMessage::Succeeded, "a", 0, 10);
        assert_eq!(
            decide(&s, Some(&recent), &obs("a"), &Limits::default()),
            Decision::Synced {
                requeue: Some(Duration::from_secs(51))
            }
        );
        let old = last(StackUpdateStateMessage::Succeeded, "a", 0, 62);
        assert_eq!(
            reason(decide(&s, Some(&old), &obs("a"), &Limits::default())),
            "Resync time elapsed: 1m1s"
        );
    }

    #[test]
    fn retries_back_off_then_stall_until_something_changes() {
        let s = spec();
        let l = Limits::default();
        assert_eq!(backoff(&s, 0), Duration::from_secs(10));
        assert_eq!(backoff(&s, 1), Duration::from_secs(30));
        assert_eq!(backoff(&s, 4), Duration::from_secs(810));
        assert_eq!(
            backoff(&s, 9),
            Duration::from_secs(3600),
            "capped at 1 h by default"
        );
        let mut capped = spec();
        capped.retry_max_backoff_duration_seconds = Some(20);
        assert_eq!(backoff(&capped, 3), Duration::from_secs(20));

        let cooling = last(StackUpdateStateMessage::Failed, "a", 1, 5);
        assert_eq!(
            decide(&s, Some(&cooling), &obs("a"), &l),
            Decision::Synced {
                requeue: Some(Duration::from_secs(26))
            }
        );
        let early = last(StackUpdateStateMessage::Failed, "a", 1, 30);
        assert!(
            matches!(
                decide(&s, Some(&early), &obs("a"), &l),
                Decision::Synced { .. }
            ),
            "a retry never comes early"
        );
        let due = last(StackUpdateStateMessage::Failed, "a", 1, 31);
        assert_eq!(
            reason(decide(&s, Some(&due), &obs("a"), &l)),
            "Backoff time elapsed: 30s"
        );
        let stalled = last(StackUpdateStateMessage::Failed, "a", 3, 10_000);
        assert_eq!(
            decide(&s, Some(&stalled), &obs("a"), &l),
            Decision::Synced { requeue: None }
        );
        // A fixing commit runs at once, even when stalled.
        assert_eq!(
            reason(decide(&s, Some(&stalled), &obs("b"), &l)),
            "New commit detected: \"b\""
        );
        let mut o = obs("a");
        o.reconcile_request = "retry";
        assert_eq!(
            reason(decide(&s, Some(&stalled), &o, &l)),
            "Sync request: \"retry\""
        );
    }

    #[test]
    fn deletion_after_destroy_is_synced_and_preview_stacks_preview() {
        let mut destroyed = last(StackUpdateStateMessage::Succeeded, "a", 0, 1);
        destroyed.last_update.as_mut().unwrap().update_type = Some(UpdateType::Destroy);
        let mut o = obs("a");
        o.deleting = true;
        assert_eq!(
            decide(&spec(), Some(&destroyed), &o, &Limits::default()),
            Decision::Synced { requeue: None }
        );
        let mut p = spec();
        p.preview = true;
        assert!(matches!(
            decide(&p, None, &obs("a"), &Limits::default()),
            Decision::Run {
                kind: UpdateType::Preview,
                ..
            }
        ));
    }
}
