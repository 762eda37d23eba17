//! Prometheus metrics: PKO's names where PKO has them (`stacks_active`, `stacks_failing`,
//! `stacks_reconciling` — exported here, unlike PKO — and `programs_active`), plus ours, prefixed
//! `pulumi_operator_`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::time::Instant;

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
    pub stacks_active: Gauge,
    pub stacks_failing: Family<StackLabels, Gauge>,
    pub stacks_reconciling: Family<StackLabels, Gauge>,
    pub stacks_drifted: Family<StackLabels, Gauge>,
    pub programs_active: Gauge,
    pub updates: Family<UpdateLabels, Counter>,
    pub update_duration: HistogramFamily<UpdateLabels>,
    pub reconciles: Family<ReconcileLabels, Counter>,
    pub reconcile_errors: Family<ControllerLabels, Counter>,
    pub reconcile_duration: HistogramFamily<ControllerLabels>,
    pub git_ls_remote: Family<ResultLabels, Counter>,
    /// Policy violations reported by finished operations, by enforcement level.
    pub policy_violations: Family<LevelLabels, Counter>,
}

fn update_buckets() -> Histogram {
    // 1 s .. ~9 h
    Histogram::new(exponential_buckets(1.0, 2.5, 12))
}

fn reconcile_buckets() -> Histogram {
    // 1 ms .. ~16 s
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let m = Metrics {
            stacks_active: Gauge::default(),
            stacks_failing: Family::default(),
            stacks_reconciling: Family::default(),
            stacks_drifted: Family::default(),
            programs_active: Gauge::default(),
            updates: Family::default(),
            update_duration: Family::new_with_constructor(update_buckets as fn() -> Histogram),
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: Family::new_with_constructor(
                reconcile_buckets as fn() -> Histogram,
            ),
            git_ls_remote: Family::default(),
            policy_violations: Family::default(),
            registry: Registry::default(),
        };
        registry.register(
            "stacks_active",
            "Number of Stacks the operator manages",
            m.stacks_active.clone(),
        );
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
        registry.register(
            "programs_active",
            "Number of Programs the operator manages",
            m.programs_active.clone(),
        );
        register_operator_metrics(registry.sub_registry_with_prefix("pulumi_operator"), &m);
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
        "git_ls_remote",
        "git ls-remote calls by result",
        m.git_ls_remote.clone(),
    );
}

impl Metrics {
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

    /// Counts and times one reconcile of `controller`.
    pub fn reconcile_started(&self, controller: &'static str) -> ReconcileTimer<'_> {
        ReconcileTimer {
            metrics: self,
            controller,
            start: Instant::now(),
        }
    }
}

pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    controller: &'static str,
    start: Instant,
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

    #[test]
    fn exports_pko_names_and_ours() {
        let m = Metrics::default();
        m.stacks_active.set(2);
        m.stacks_failing
            .get_or_create(&StackLabels {
                namespace: "ns".into(),
                name: "s".into(),
            })
            .set(1);
        m.stacks_reconciling
            .get_or_create(&StackLabels {
                namespace: "ns".into(),
                name: "s".into(),
            })
            .set(1);
        m.reconcile_started("stack").finish(false);
        let text = m.encode();
        assert!(text.contains("stacks_active 2"), "{text}");
        assert!(
            text.contains("stacks_failing{namespace=\"ns\",name=\"s\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("stacks_reconciling{namespace=\"ns\",name=\"s\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("pulumi_operator_reconcile_errors_total{controller=\"stack\"} 1"),
            "{text}"
        );
        m.forget_stack("ns", "s");
        let text = m.encode();
        assert!(!text.contains("name=\"s\""), "{text}");
    }
}
