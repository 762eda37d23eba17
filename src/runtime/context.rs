//! What every reconcile shares: the client, the event recorder, metrics and configuration.

use crate::runtime::cached::{CachedJob, CachedPod};
use crate::runtime::config::Config;
use crate::runtime::error::Error;
use crate::runtime::metrics::Metrics;
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::Client;
use kube::{Api, Resource, ResourceExt};
use pulumi_operator_api::{Program, Stack, Update, Workspace};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The name events are reported under and the leader lease is written with.
pub const REPORTER: &str = "pulumi-operator";

/// Watch caches the reconciles read from (never a GET in the hot path).
#[derive(Clone)]
pub struct Stores {
    pub stacks: Store<Stack>,
    pub updates: Store<Update>,
    pub programs: Store<Program>,
    pub workspaces: Store<Workspace>,
    pub jobs: Store<CachedJob>,
    pub pods: Store<CachedPod>,
    /// Update pods by the Update's name label.
    pub pods_by_update: Arc<crate::runtime::index::Index<CachedPod>>,
    /// Update pods by their Stack's name label.
    pub pods_by_stack: Arc<crate::runtime::index::Index<CachedPod>>,
    /// Updates by their Stack's name label.
    pub updates_by_stack: Arc<crate::runtime::index::Index<Update>>,
    /// The administrator's StackPolicies (cluster-scoped: one watch for every namespace).
    pub policies: Store<pulumi_operator_api::policy::StackPolicy>,
    /// Namespaces, for the labels StackPolicies select them by.
    pub namespaces: Store<k8s_openapi::api::core::v1::Namespace>,
}

impl Stores {
    /// The cached pods of an Update (by its name label).
    pub fn pods_of_update(&self, ns: &str, update: &str) -> Vec<Arc<CachedPod>> {
        self.pods_by_update.lookup(&self.pods, ns, update)
    }

    /// The cached update pods of a Stack (by its name label), whichever Update they ran.
    pub fn pods_of_stack(&self, ns: &str, stack: &str) -> Vec<Arc<CachedPod>> {
        self.pods_by_stack.lookup(&self.pods, ns, stack)
    }

    /// Whether the namespace is being deleted, as the namespace cache says (a namespace not
    /// in it yet is not known to be): nothing new can be created in it, Events included.
    pub fn namespace_terminating(&self, ns: &str) -> bool {
        self.namespaces
            .get(&kube::runtime::reflector::ObjectRef::new(ns))
            .is_some_and(|n| n.metadata.deletion_timestamp.is_some())
    }

    /// The cached Updates a Stack owns (by its name label, then its UID).
    pub fn updates_of_stack(&self, ns: &str, stack: &str, uid: &str) -> Vec<Arc<Update>> {
        let mut mine = self.updates_by_stack.lookup(&self.updates, ns, stack);
        mine.retain(|u| crate::runtime::owners::owned_by(u, uid));
        mine
    }
}

pub struct Context {
    pub client: Client,
    pub stores: Stores,
    pub config: Config,
    pub metrics: Arc<Metrics>,
    pub events: crate::runtime::events::Publisher,
    /// What tenants may ask for (from the configuration).
    pub limits: crate::runtime::limits::AdminLimits,
    /// ServiceAccounts, Secrets and ConfigMaps operations need, seen a moment ago.
    pub recently_seen: crate::runtime::recently_seen::RecentlySeen,
    /// Consecutive reconcile errors per object (namespace/name), for `error_policy` backoff.
    failures: Mutex<HashMap<String, u32>>,
    /// The status this operator last wrote on each Update (namespace/name → uid, status). Only
    /// the operator writes an Update's status, so when the watch cache is behind, this is the
    /// newer truth: a reconcile triggered by a Job event a moment after a write neither
    /// rewrites it nor recomputes it from the older copy.
    update_status: Mutex<HashMap<String, (String, pulumi_operator_api::UpdateStatus)>>,
    /// The pod this operator admitted for each Update (namespace/name → Update UID, pod UID,
    /// gate opened): facts it wrote, for the moments the watch cache does not show them yet.
    admitted: Mutex<HashMap<String, Admitted>>,
    /// Where each controller's reconciles wait for their turn (first come, first served).
    pub gates: crate::runtime::gate::Gates,
    /// The newest Warning Event of each update Job and pod (one watch).
    pub warnings: crate::runtime::warnings::Warnings,
    /// When each update pod's deletion was first seen (the fence's bound counts from there).
    pub deletions: crate::runtime::deletion_clock::DeletionClock,
}

/// The key of an Update in the operator's own records: namespace/name.
fn update_key(update: &pulumi_operator_api::Update) -> String {
    use kube::ResourceExt;
    format!(
        "{}/{}",
        update.namespace().unwrap_or_default(),
        update.name_any()
    )
}

/// A pod this operator admitted to run an Update's operation (see `update::admission`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admitted {
    pub update_uid: String,
    pub pod_uid: String,
    pub opened: bool,
}

/// How long a referenced object seen to exist is not read again (a burst of Stacks sharing one
/// Secret reads it once).
const RECENTLY_SEEN: std::time::Duration = std::time::Duration::from_secs(10);

impl Context {
    /// The Stack that controls `obj` (matched by UID): from the cache, else from the API server.
    /// Callers delete or release things when there is none, so "none" must not be a cache that has
    /// not caught up yet.
    pub async fn owning_stack<K: Resource>(&self, obj: &K) -> Result<Option<Arc<Stack>>, Error> {
        let ctx = self;
        let ns = obj.meta().namespace.clone().unwrap_or_default();
        let Some(owner) = obj
            .meta()
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.kind == "Stack" && o.controller == Some(true))
        else {
            return Ok(None);
        };
        let same = |s: &Stack| s.uid().as_deref() == Some(owner.uid.as_str());
        if let Some(s) = ctx
            .stores
            .stacks
            .get(&ObjectRef::new(&owner.name).within(&ns))
            .filter(|s| same(s))
        {
            return Ok(Some(s));
        }
        let api: Api<Stack> = Api::namespaced(ctx.client.clone(), &ns);
        Ok(api.get_opt(&owner.name).await?.filter(same).map(Arc::new))
    }

    /// Reconciles still waiting for their turn at a gate are dropped once `shutdown` is
    /// cancelled.
    pub fn new(
        client: Client,
        config: Config,
        metrics: Arc<Metrics>,
        stores: Stores,
        shutdown: &tokio_util::sync::CancellationToken,
    ) -> Context {
        let gates = crate::runtime::gate::Gates::new(usize::from(config.concurrency), shutdown);
        Context {
            events: crate::runtime::events::Publisher::new(
                client.clone(),
                REPORTER,
                &config.identity(),
            ),
            limits: config.limits(),
            client,
            stores,
            config,
            metrics,
            recently_seen: crate::runtime::recently_seen::RecentlySeen::new(RECENTLY_SEEN),
            failures: Mutex::new(HashMap::new()),
            update_status: Mutex::new(HashMap::new()),
            admitted: Mutex::new(HashMap::new()),
            gates,
            warnings: Default::default(),
            deletions: Default::default(),
        }
    }

    /// Records one more failure of `key` and returns how many in a row.
    pub fn failed(&self, key: &str) -> u32 {
        let Ok(mut f) = self.failures.lock() else {
            return 0;
        };
        let n = f.entry(key.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        *n - 1
    }

    pub fn succeeded(&self, key: &str) {
        if let Ok(mut f) = self.failures.lock() {
            f.remove(key);
        }
    }

    /// Forgets what is kept about an object that is gone: its failure count and, for a Stack,
    /// its metric series.
    pub fn forget(&self, controller: &str, namespace: &str, name: &str) {
        if let Ok(mut f) = self.failures.lock() {
            f.remove(&format!("{controller}/{namespace}/{name}"));
        }
        if controller == "update" {
            if let Ok(mut w) = self.update_status.lock() {
                w.remove(&format!("{namespace}/{name}"));
            }
            if let Ok(mut a) = self.admitted.lock() {
                a.remove(&format!("{namespace}/{name}"));
            }
        }
        if controller == "stack" {
            self.metrics.forget_stack(namespace, name);
        }
    }

    /// Records that this operator chose the pod `pod_uid` for `update` (`opened`: and opened
    /// its gate).
    pub fn admitted(&self, update: &pulumi_operator_api::Update, pod_uid: &str, opened: bool) {
        use kube::ResourceExt;
        let key = update_key(update);
        if let Ok(mut a) = self.admitted.lock() {
            a.insert(
                key,
                Admitted {
                    update_uid: update.uid().unwrap_or_default(),
                    pod_uid: pod_uid.to_string(),
                    opened,
                },
            );
        }
    }

    /// What this operator admitted for `update`, if anything (this Update, by UID).
    pub fn admitted_for(&self, update: &pulumi_operator_api::Update) -> Option<Admitted> {
        use kube::ResourceExt;
        let key = update_key(update);
        let a = self.admitted.lock().ok()?;
        a.get(&key)
            .filter(|a| Some(&a.update_uid) == update.uid().as_ref())
            .cloned()
    }

    /// Records the status just written on `update`.
    pub fn wrote_update_status(
        &self,
        update: &pulumi_operator_api::Update,
        status: &pulumi_operator_api::UpdateStatus,
    ) {
        use kube::ResourceExt;
        if let Ok(mut w) = self.update_status.lock() {
            w.insert(
                update_key(update),
                (update.uid().unwrap_or_default(), as_stored(status)),
            );
        }
    }

    /// `update` with the status this operator last wrote on it, when the cached copy is older.
    pub fn with_written_status(
        &self,
        update: Arc<pulumi_operator_api::Update>,
    ) -> Arc<pulumi_operator_api::Update> {
        use kube::ResourceExt;
        let key = update_key(&update);
        let written = self.update_status.lock().ok().and_then(|mut w| {
            let (uid, status) = w.get(&key)?;
            if Some(uid) != update.uid().as_ref() {
                return None;
            }
            if update.status.as_ref() == Some(status) {
                // The cache has caught up: it alone is kept from now on.
                w.remove(&key);
                return None;
            }
            Some(status.clone())
        });
        match written {
            Some(s) => {
                let mut newer = (*update).clone();
                newer.status = Some(s);
                Arc::new(newer)
            }
            None => update,
        }
    }

    /// Publishes an event about `object`. The note is cut to what the API server accepts (1 KiB),
    /// so a long failure message never makes the event disappear.
    pub async fn publish(
        &self,
        object: &k8s_openapi::api::core::v1::ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        if let Some(ns) = object.namespace.as_deref() {
            if self.stores.namespace_terminating(ns) {
                // The API server refuses it: a request spent on nothing.
                tracing::debug!("event {reason} not recorded: namespace {ns} is being deleted");
                return;
            }
        }
        let note = bounded_note(note);
        let event = crate::runtime::events::Note {
            type_,
            reason,
            action,
            note: &note,
        };
        if let Err(e) = self.events.publish(object, &event).await {
            tracing::warn!("cannot record event {reason}: {e}");
        }
    }
}

/// `status` as the API server stores and returns it (times to the second), so that a cached
/// copy can be seen to have caught up with it.
fn as_stored(status: &pulumi_operator_api::UpdateStatus) -> pulumi_operator_api::UpdateStatus {
    serde_json::to_value(status)
        .and_then(serde_json::from_value)
        .unwrap_or_else(|_| status.clone())
}

/// The longest event note the API server accepts, in bytes.
pub const MAX_EVENT_NOTE: usize = 1024;

/// `note` cut at a character boundary to [`MAX_EVENT_NOTE`] bytes, marked when cut.
pub fn bounded_note(note: String) -> String {
    if note.len() <= MAX_EVENT_NOTE {
        return note;
    }
    const MARK: &str = " …";
    let mut end = MAX_EVENT_NOTE - MARK.len();
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{MARK}", &note[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::index;
    use kube::runtime::reflector;
    use std::sync::Arc;
    use tokio_util::sync::CancellationToken;

    #[tokio::test]
    async fn the_last_written_update_status_wins_over_an_older_cache() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let cfg = <crate::runtime::config::Config as clap::Parser>::try_parse_from(["op"]).unwrap();
        let ctx = Context::new(
            client,
            cfg,
            Arc::new(crate::runtime::metrics::Metrics::default()),
            Stores {
                stacks: reflector::store().0,
                updates: reflector::store().0,
                programs: reflector::store().0,
                workspaces: reflector::store().0,
                jobs: reflector::store().0,
                pods: reflector::store().0,
                pods_by_update: index::Index::new(|_| None),
                pods_by_stack: index::Index::new(|_| None),
                updates_by_stack: index::Index::new(|_| None),
                policies: reflector::store().0,
                namespaces: reflector::store().0,
            },
            &CancellationToken::new(),
        );
        let update: Update = serde_json::from_value(serde_json::json!({
            "apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Update",
            "metadata": {"name": "u", "namespace": "ns", "uid": "1"}, "spec": {}
        }))
        .unwrap();
        let cached = Arc::new(update.clone());
        assert!(ctx.with_written_status(cached.clone()).status.is_none());
        let written = pulumi_operator_api::UpdateStatus {
            message: Some("running".into()),
            ..Default::default()
        };
        ctx.wrote_update_status(&update, &written);
        assert_eq!(
            ctx.with_written_status(cached.clone()).status.as_ref(),
            Some(&written)
        );
        // Another Update of the same name (a new uid) starts afresh.
        let mut other = update.clone();
        other.metadata.uid = Some("2".into());
        assert!(ctx.with_written_status(Arc::new(other)).status.is_none());
        ctx.forget("update", "ns", "u");
        assert!(ctx.with_written_status(cached.clone()).status.is_none());
        // Once the cache shows what was written (times to the second, as the API server
        // returns them), only the cache is kept.
        let written = pulumi_operator_api::UpdateStatus {
            start_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-11-25T10:00:00.123456789Z".parse().unwrap(),
            )),
            ..written
        };
        ctx.wrote_update_status(&update, &written);
        let stored: pulumi_operator_api::UpdateStatus =
            serde_json::from_value(serde_json::to_value(&written).unwrap()).unwrap();
        assert_ne!(stored, written);
        let mut caught_up = update.clone();
        caught_up.status = Some(stored.clone());
        let seen = ctx.with_written_status(Arc::new(caught_up));
        assert_eq!(seen.status.as_ref(), Some(&stored));
        assert!(ctx.with_written_status(cached).status.is_none());
    }

    #[test]
    fn event_notes_fit_what_the_api_server_accepts() {
        assert_eq!(bounded_note("short".into()), "short");
        for long in ["x".repeat(5000), "é".repeat(3000), "a€".repeat(700)] {
            let cut = bounded_note(long.clone());
            assert!(cut.len() <= MAX_EVENT_NOTE, "{}", cut.len());
            assert!(cut.ends_with(" …"));
            assert!(long.starts_with(cut.trim_end_matches(" …")));
        }
        let exact = "y".repeat(MAX_EVENT_NOTE);
        assert_eq!(bounded_note(exact.clone()), exact);
    }
}
