//! Prometheus metrics: PKO's names where PKO has them (`stacks_active`, `stacks_failing`,
//! `stacks_reconciling` — exported here, unlike PKO — and `programs_active`), plus ours, prefixed
//! `pulumi_operator_`, in base units (`_seconds`, `_bytes`), counters ending in `_total`.
//! Every name and what it means: docs/monitoring.md.
//!
//! Three kinds of sources: counters and histograms the reconciles update as things happen (this
//! file); the fleet (Stacks by state, operations in flight), read from the watch caches at each
//! scrape while this replica leads ([`fleet`]); the process (`process_*`, [`process`]).

pub mod fleet;
pub mod process;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StackLabels {
    pub namespace: String,
    pub name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpdateLabels {
    pub r#type: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    pub controller: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LevelLabels {
    pub level: String,
}

pub struct Metrics {
    pub registry: Registry,
    pub stacks_failing: Family<StackLabels, Gauge>,
    pub stacks_reconciling: Family<StackLabels, Gauge>,
    pub stacks_drifted: Family<StackLabels, Gauge>,
    pub updates: Family<UpdateLabels, Counter>,
    pub update_duration: HistogramFamily<UpdateLabels>,
    pub reconciles: Family<ReconcileLabels, Counter>,
    pub reconcile_errors: Family<ControllerLabels, Counter>,
    pub reconcile_duration: HistogramFamily<ControllerLabels>,
    /// Reconciles running now, by controller.
    pub reconciles_in_progress: Family<ControllerLabels, Gauge>,
    /// Reconciles waiting for their turn at the controller's gate.
    pub reconciles_waiting: Family<ControllerLabels, Gauge>,
    pub git_ls_remote: Family<ResultLabels, Counter>,
    pub git_ls_remote_duration: HistogramFamily<ResultLabels>,
    /// Unix seconds of the last successful ls-remote (0: none yet).
    pub git_ls_remote_last_success: Gauge<f64, AtomicU64>,
    /// Policy violations reported by finished operations, by enforcement level.
    pub policy_violations: Family<LevelLabels, Counter>,
    /// 1 while this replica reconciles (holds the Lease, or runs without leader election).
    pub leader: Gauge,
    /// Watch re-lists after the first list, by kind.
    pub watch_restarts: Family<KindLabels, Counter>,
    fleet: Arc<fleet::FleetCollector>,
}

fn update_buckets() -> Histogram {
    // 1 s .. ~9 h
    Histogram::new(exponential_buckets(1.0, 2.5, 12))
}

fn reconcile_buckets() -> Histogram {
    // 1 ms .. ~16 s
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

fn git_buckets() -> Histogram {
    // 10 ms .. ~80 s (the default deadline of a call is 60 s)
    Histogram::new(exponential_buckets(0.01, 2.0, 14))
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let m = Metrics {
            stacks_failing: Family::default(),
            stacks_reconciling: Family::default(),
            stacks_drifted: Family::default(),
            updates: Family::default(),
            update_duration: Family::new_with_constructor(update_buckets as fn() -> Histogram),
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: Family::new_with_constructor(
                reconcile_buckets as fn() -> Histogram,
            ),
            reconciles_in_progress: Family::default(),
            reconciles_waiting: Family::default(),
            git_ls_remote: Family::default(),
            git_ls_remote_duration: Family::new_with_constructor(git_buckets as fn() -> Histogram),
            git_ls_remote_last_success: Gauge::default(),
            policy_violations: Family::default(),
            leader: Gauge::default(),
            watch_restarts: Family::default(),
            fleet: Arc::default(),
            registry: Registry::default(),
        };
        registry.register(
            "stacks_failing",
            "1 when the Stack's last update failed",
            m.stacks_failing.clone(),
        );
        registry.register(
            "stacks_reconciling",
            "1 while the Stack is reconciling (an update is due or running)",
            m.stacks_reconciling.clone(),
        );
        registry.register(
            "stacks_drifted",
            "Resources the Stack's last drift check found drifted (spec.driftDetection)",
            m.stacks_drifted.clone(),
        );
        // stacks_active, programs_active and pulumi_operator_{stacks,stack_state,operation*}.
        registry.register_collector(Box::new(m.fleet.clone()));
        registry.register_collector(Box::new(process::ProcessCollector));
        register_operator_metrics(registry.sub_registry_with_prefix("pulumi_operator"), &m);
        m.start_known_counters();
        Metrics { registry, ..m }
    }
}

/// The operator's own metrics, under the `pulumi_operator_` prefix.
fn register_operator_metrics(ours: &mut Registry, m: &Metrics) {
    ours.register(
        "updates",
        "Finished stack operations by type and result",
        m.updates.clone(),
    );
    ours.register(
        "update_duration_seconds",
        "Duration of finished stack operations by type and result",
        m.update_duration.clone(),
    );
    ours.register(
        "policy_violations",
        "Policy violations (StackPolicy packs) reported by finished operations, by enforcement level",
        m.policy_violations.clone(),
    );
    ours.register(
        "reconciles",
        "Reconciles by controller and result",
        m.reconciles.clone(),
    );
    ours.register(
        "reconcile_errors",
        "Reconciles that ended in an error",
        m.reconcile_errors.clone(),
    );
    ours.register(
        "reconcile_duration_seconds",
        "Time spent in one reconcile (never includes a Pulumi run)",
        m.reconcile_duration.clone(),
    );
    ours.register(
        "reconciles_in_progress",
        "Reconciles running now, by controller",
        m.reconciles_in_progress.clone(),
    );
    ours.register(
        "reconciles_waiting",
        "Reconciles waiting for their turn (at most --concurrency run at once), by controller",
        m.reconciles_waiting.clone(),
    );
    register_git_and_leader(ours, m);
}

fn register_git_and_leader(ours: &mut Registry, m: &Metrics) {
    ours.register(
        "watch_restarts",
        "Watches that had to list again after their first list (their resourceVersion was too \
         old, e.g. after an etcd compaction), by kind",
        m.watch_restarts.clone(),
    );
    ours.register(
        "git_ls_remote",
        "git ls-remote calls by result",
        m.git_ls_remote.clone(),
    );
    ours.register(
        "git_ls_remote_duration_seconds",
        "Duration of git ls-remote calls, waiting for a slot included, by result",
        m.git_ls_remote_duration.clone(),
    );
    ours.register(
        "git_ls_remote_last_success_timestamp_seconds",
        "When the last git ls-remote call succeeded (Unix seconds; 0: none yet)",
        m.git_ls_remote_last_success.clone(),
    );
    ours.register(
        "leader",
        "1 while this replica reconciles (holds the leader Lease, or runs without leader election)",
        m.leader.clone(),
    );
    ours.register(
        "build",
        "The operator's version",
        Info::new(vec![(
            "version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        )]),
    );
}

/// The controllers, as their reconciles are labelled.
const CONTROLLERS: [&str; 4] = ["stack", "update", "workspace", "program"];

impl Metrics {
    /// Counters with known labels start at 0, so that a rate or an increase over them is 0, not
    /// "no data", before the first event (and an alert on them can tell "none" from "unknown").
    fn start_known_counters(&self) {
        for kind in ["preview", "up", "destroy", "refresh"] {
            for result in ["succeeded", "failed"] {
                let _ = self.updates.get_or_create(&UpdateLabels {
                    r#type: kind.into(),
                    result: result.into(),
                });
            }
        }
        for level in ["mandatory", "advisory"] {
            let _ = self.policy_violations.get_or_create(&LevelLabels {
                level: level.into(),
            });
        }
        for result in ["success", "failure"] {
            let _ = self.git_ls_remote.get_or_create(&ResultLabels {
                result: result.into(),
            });
        }
        for controller in CONTROLLERS {
            let labels = ControllerLabels {
                controller: controller.into(),
            };
            let _ = self.reconcile_errors.get_or_create(&labels);
            let _ = self.reconciles_in_progress.get_or_create(&labels);
            let _ = self.reconciles_waiting.get_or_create(&labels);
        }
    }

    /// Removes the series of a Stack that is gone.
    pub fn forget_stack(&self, namespace: &str, name: &str) {
        let labels = StackLabels {
            namespace: namespace.into(),
            name: name.into(),
        };
        self.stacks_failing.remove(&labels);
        self.stacks_reconciling.remove(&labels);
        self.stacks_drifted.remove(&labels);
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Counts and times one reconcile of `controller`; it is in progress until the timer is
    /// dropped (finished or not: a reconcile of a replica that loses its lease is dropped).
    pub fn reconcile_started(&self, controller: &'static str) -> ReconcileTimer<'_> {
        let in_progress = self
            .reconciles_in_progress
            .get_or_create_owned(&ControllerLabels {
                controller: controller.into(),
            });
        in_progress.inc();
        ReconcileTimer {
            metrics: self,
            controller,
            start: Instant::now(),
            in_progress,
        }
    }

    /// Counts a reconcile waiting for its turn until the returned gauge guard is dropped.
    pub fn reconcile_waiting(&self, controller: &'static str) -> Waiting {
        let gauge = self
            .reconciles_waiting
            .get_or_create_owned(&ControllerLabels {
                controller: controller.into(),
            });
        gauge.inc();
        Waiting(gauge)
    }

    /// The counter of one kind's watch re-lists.
    pub fn watch_restarts_of(&self, kind: &str) -> Counter {
        self.watch_restarts
            .get_or_create(&KindLabels { kind: kind.into() })
            .clone()
    }

    /// Records one finished ls-remote call.
    pub fn git_ls_remote_done(&self, ok: bool, took: std::time::Duration) {
        let labels = ResultLabels {
            result: if ok { "success" } else { "failure" }.into(),
        };
        self.git_ls_remote.get_or_create(&labels).inc();
        self.git_ls_remote_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        if ok {
            self.git_ls_remote_last_success.set(unix_now());
        }
    }

    /// This replica reconciles from now until the guard is dropped: `leader` is 1 and the
    /// fleet's metrics are read from `source`. Dropping it (the lease is lost, or shutdown)
    /// forgets every per-Stack series, which the next leader reports.
    pub fn lead(&self, source: fleet::FleetSource) -> Leading<'_> {
        self.fleet.set(Some(source));
        self.leader.set(1);
        Leading(self)
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// See [`Metrics::lead`].
pub struct Leading<'a>(&'a Metrics);

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        let m = self.0;
        m.fleet.set(None);
        m.leader.set(0);
        m.stacks_failing.clear();
        m.stacks_reconciling.clear();
        m.stacks_drifted.clear();
    }
}

/// See [`Metrics::reconcile_waiting`].
pub struct Waiting(Gauge);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.dec();
    }
}

pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    controller: &'static str,
    start: Instant,
    in_progress: Gauge,
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        self.in_progress.dec();
    }
}

impl ReconcileTimer<'_> {
    pub fn finish(self, ok: bool) {
        let labels = ControllerLabels {
            controller: self.controller.into(),
        };
        self.metrics
            .reconcile_duration
            .get_or_create(&labels)
            .observe(self.start.elapsed().as_secs_f64());
        let result = if ok { "success" } else { "error" };
        self.metrics
            .reconciles
            .get_or_create(&ReconcileLabels {
                controller: self.controller.into(),
                result: result.into(),
            })
            .inc();
        if !ok {
            self.metrics.reconcile_errors.get_or_create(&labels).inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::store;
    use kube::runtime::watcher::Event;
    use pulumi_operator_api::{Stack, Update};

    fn labels() -> StackLabels {
        StackLabels {
            namespace: "ns".into(),
            name: "s".into(),
        }
    }

    #[test]
    fn exports_pko_names_and_ours() {
        let m = Metrics::default();
        m.stacks_failing.get_or_create(&labels()).set(1);
        m.stacks_reconciling.get_or_create(&labels()).set(1);
        m.reconcile_started("stack").finish(false);
        m.policy_violations
            .get_or_create(&LevelLabels {
                level: "mandatory".into(),
            })
            .inc();
        let text = m.encode();
        for line in [
            "stacks_failing{namespace=\"ns\",name=\"s\"} 1",
            "stacks_reconciling{namespace=\"ns\",name=\"s\"} 1",
            "pulumi_operator_reconcile_errors_total{controller=\"stack\"} 1",
            "pulumi_operator_reconciles_total{controller=\"stack\",result=\"error\"} 1",
            "pulumi_operator_reconciles_in_progress{controller=\"stack\"} 0",
            "pulumi_operator_policy_violations_total{level=\"mandatory\"} 1",
            "pulumi_operator_leader 0",
            "pulumi_operator_build_info{version=",
            "pulumi_operator_git_ls_remote_last_success_timestamp_seconds 0",
            // Known labels start at 0.
            "pulumi_operator_updates_total{type=\"up\",result=\"failed\"} 0",
            "pulumi_operator_policy_violations_total{level=\"advisory\"} 0",
            "pulumi_operator_git_ls_remote_total{result=\"failure\"} 0",
            "pulumi_operator_reconcile_errors_total{controller=\"update\"} 0",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        m.forget_stack("ns", "s");
        let text = m.encode();
        assert!(!text.contains("name=\"s\""), "{text}");
    }

    #[test]
    fn counts_reconciles_in_progress_and_waiting_until_dropped() {
        let m = Metrics::default();
        let gauge = |f: &Family<ControllerLabels, Gauge>| {
            f.get_or_create(&ControllerLabels {
                controller: "update".into(),
            })
            .get()
        };
        let waiting = m.reconcile_waiting("update");
        let other = m.reconcile_waiting("update");
        assert_eq!(gauge(&m.reconciles_waiting), 2);
        drop(waiting);
        drop(other);
        assert_eq!(gauge(&m.reconciles_waiting), 0);
        let timer = m.reconcile_started("update");
        assert_eq!(gauge(&m.reconciles_in_progress), 1);
        drop(timer); // a reconcile dropped unfinished (the lease was lost)
        assert_eq!(gauge(&m.reconciles_in_progress), 0);
    }

    #[test]
    fn git_calls_are_counted_timed_and_the_last_success_stamped() {
        let m = Metrics::default();
        m.git_ls_remote_done(false, std::time::Duration::from_millis(30));
        assert_eq!(m.git_ls_remote_last_success.get(), 0.0);
        m.git_ls_remote_done(true, std::time::Duration::from_millis(30));
        assert!(m.git_ls_remote_last_success.get() > 1.7e9);
        let text = m.encode();
        assert!(
            text.contains(
                "pulumi_operator_git_ls_remote_duration_seconds_count{result=\"failure\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("pulumi_operator_git_ls_remote_total{result=\"success\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn the_fleet_is_reported_from_the_caches_while_leading() {
        let m = Metrics::default();
        let (stacks, mut writer) = store::<Stack>();
        let stack: Stack = serde_json::from_value(serde_json::json!({
            "apiVersion": "pulumi.com/v1", "kind": "Stack",
            "metadata": {"name": "s", "namespace": "ns"},
            "spec": {"stack": "o/p/s"},
            "status": {"conditions": [{"type": "Stalled", "status": "True", "reason": "UpdateFailed",
                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .unwrap();
        writer.apply_watcher_event(&Event::Apply(stack));
        let (updates, mut uw) = store::<Update>();
        let update: Update = serde_json::from_value(serde_json::json!({
            "apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Update",
            "metadata": {"name": "s-1", "namespace": "ns", "labels": {"pulumi.com/stack-name": "s"},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"type": "up", "operationTimeoutSeconds": 600}
        }))
        .unwrap();
        uw.apply_watcher_event(&Event::Apply(update));
        m.stacks_failing.get_or_create(&labels()).set(1);
        let leading = m.lead(fleet::FleetSource {
            stacks: vec![stacks],
            programs: vec![],
            updates: vec![updates],
        });
        let text = m.encode();
        for line in [
            "pulumi_operator_leader 1",
            "stacks_active 1",
            "programs_active 0",
            "pulumi_operator_stacks{state=\"stalled\"} 1",
            "pulumi_operator_stacks{state=\"ready\"} 0",
            "pulumi_operator_stack_state{namespace=\"ns\",name=\"s\",state=\"stalled\"} 1",
            "pulumi_operator_operations_in_flight{type=\"up\"} 1",
            "pulumi_operator_operation_deadline_timestamp_seconds{namespace=\"ns\",stack=\"s\",update=\"s-1\",type=\"up\"} 1767226200",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        drop(leading);
        let text = m.encode();
        assert!(text.contains("pulumi_operator_leader 0"), "{text}");
        assert!(!text.contains("stacks_active"), "{text}");
        assert!(!text.contains("name=\"s\""), "{text}");
    }
}
