//! The watch caches: one watch per kind feeding one store, its indexes and several named
//! consumers, and what the caches keep of each object.

use crate::runtime::cached::{CachedJob, CachedPod};
use crate::runtime::index;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::NamespaceResourceScope;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::runtime::WatchStreamExt;
use kube::{Api, Resource};
use prometheus_client::metrics::counter::Counter;
use pulumi_operator_api::{Program, Stack, Update, Workspace};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::Arc;
use tracing::{info, warn};

pub fn api<K>(client: &kube::Client, ns: Option<&str>) -> Api<K>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

pub type Running = futures::future::BoxFuture<'static, ()>;

/// What a watch hands to one of its consumers: every object it saw change or go.
pub type Feed<K> = futures::channel::mpsc::UnboundedReceiver<Arc<K>>;

/// One watch feeding one store, its indexes and several consumers. Every consumer sees an
/// object only after the store has it (the reflector writes first), so a reconcile never reads
/// an older version than its trigger; deletions are passed on too. The watch is driven by its
/// own task and never waits for a consumer (kube-runtime's shared `ReflectHandle` can stall for
/// good when an object is deleted before a consumer reads it, which froze the pod cache under
/// Job churn). Consumers [`subscribe`](SharedWatch::subscribe) by name before it is
/// [`driven`](SharedWatch::drive).
pub struct SharedWatch<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    api: Api<K>,
    cfg: watcher::Config,
    indexes: Vec<Arc<index::Index<K>>>,
    store: Store<K>,
    writer: reflector::store::Writer<K>,
    senders: Vec<futures::channel::mpsc::UnboundedSender<Arc<K>>>,
}

impl<K> SharedWatch<K>
where
    K: Resource<DynamicType = ()> + Trim + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    pub fn new(api: Api<K>, cfg: watcher::Config, indexes: Vec<Arc<index::Index<K>>>) -> Self {
        let (store, writer) = reflector::store();
        SharedWatch {
            api,
            cfg,
            indexes,
            store,
            writer,
            senders: Vec::new(),
        }
    }

    /// The cache this watch fills.
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// A new consumer's feed: every object the watch sees change or go, from now on.
    pub fn subscribe(&mut self) -> Feed<K> {
        let (sender, receiver) = futures::channel::mpsc::unbounded::<Arc<K>>();
        self.senders.push(sender);
        receiver
    }

    /// Resolves once the store holds its first complete list (a store that is never filled,
    /// because its watch keeps failing, keeps the controllers waiting: the watch's errors are
    /// logged).
    pub fn filled(&self) -> Running {
        let store = self.store();
        async move {
            let _ = store.wait_until_ready().await;
        }
        .boxed()
    }

    /// The watch itself, to be polled until shutdown; `restarts` counts its re-lists after
    /// the first list (a watch that could not resume, e.g. "410 Gone" after a compaction).
    pub fn drive(self, restarts: Counter) -> Running {
        let SharedWatch {
            api,
            cfg,
            indexes,
            store,
            writer,
            senders,
        } = self;
        let mut relist = Relist::default();
        watcher(api, cfg)
            .default_backoff()
            .modify(Trim::trim)
            .reflect(writer)
            .for_each(move |event| {
                let send = |o: Arc<K>| {
                    for s in &senders {
                        let _ = s.unbounded_send(o.clone());
                    }
                };
                // The index first: the reconciles these events trigger read it.
                match event {
                    Ok(watcher::Event::Apply(o)) => {
                        indexes.iter().for_each(|i| i.apply(&o));
                        send(Arc::new(o))
                    }
                    Ok(watcher::Event::Delete(o)) => {
                        indexes.iter().for_each(|i| i.delete(&o));
                        send(Arc::new(o))
                    }
                    // The store still holds what the last list and its watch saw.
                    Ok(watcher::Event::Init) => relist.start(store.state(), &restarts),
                    // A (re)list is in the store only once it is complete: then every object,
                    // and every object the re-list no longer has (deleted while the watch was
                    // down: no Delete event ever comes for it).
                    Ok(watcher::Event::InitDone) => {
                        let all = store.state();
                        indexes.iter().for_each(|i| i.rebuild(&all));
                        let gone = relist.gone(&all);
                        if !gone.is_empty() {
                            info!(kind = %K::kind(&()), count = gone.len(), "objects deleted while the watch re-listed");
                        }
                        all.into_iter().chain(gone).for_each(send)
                    }
                    Ok(watcher::Event::InitApply(_)) => {}
                    Err(e) => {
                        warn!(kind = %K::kind(&()), "watch failed (retrying with backoff): {e}")
                    }
                }
                futures::future::ready(())
            })
            .boxed()
    }
}

/// What a watch had before it (re)listed, to find what the new list no longer has.
struct Relist<K: Resource<DynamicType = ()>> {
    lists: u64,
    before: Vec<Arc<K>>,
}

impl<K: Resource<DynamicType = ()>> Default for Relist<K> {
    fn default() -> Self {
        Relist {
            lists: 0,
            before: Vec::new(),
        }
    }
}

impl<K: Resource<DynamicType = ()>> Relist<K> {
    fn start(&mut self, before: Vec<Arc<K>>, restarts: &Counter) {
        if self.lists > 0 {
            restarts.inc();
        }
        self.lists += 1;
        self.before = before;
    }

    /// The objects the store had before the list and no longer has.
    fn gone(&mut self, now: &[Arc<K>]) -> Vec<Arc<K>> {
        let key = |o: &Arc<K>| (o.meta().namespace.clone(), o.meta().name.clone());
        let present: std::collections::HashSet<_> = now.iter().map(key).collect();
        std::mem::take(&mut self.before)
            .into_iter()
            .filter(|o| !present.contains(&key(o)))
            .collect()
    }
}

/// What the watch caches keep of an object: only what the operator reads, so that memory
/// stays flat with many Stacks. Never read: managedFields, client-side apply's copy of the
/// last manifest, and a Job's or pod's containers (only claim volumes are, by the Workspace
/// controller, to know whether a cache claim is still mounted).
pub trait Trim {
    fn trim(&mut self);
}

fn trim_metadata(meta: &mut kube::core::ObjectMeta) {
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// Update Jobs and pods keep one label, the Update's name: nothing else of their labels is
/// read, and every Update reconcile looks its pods up by it.
macro_rules! trim_to_update_label {
    ($($kind:ty),*) => {
        $(impl Trim for $kind {
            fn trim(&mut self) {
                trim_metadata(&mut self.metadata);
                if let Some(labels) = self.metadata.labels.as_mut() {
                    labels.retain(|k, _| k == pulumi_operator_api::names::UPDATE_NAME_LABEL);
                }
            }
        })*
    };
}
trim_to_update_label!(CachedJob, CachedPod);

macro_rules! trim_metadata_only {
    ($($kind:ty),*) => {
        $(impl Trim for $kind {
            fn trim(&mut self) {
                trim_metadata(&mut self.metadata);
            }
        })*
    };
}
trim_metadata_only!(
    Stack,
    Update,
    Program,
    Workspace,
    StatefulSet,
    PersistentVolumeClaim,
    pulumi_operator_api::policy::StackPolicy,
    k8s_openapi::api::core::v1::Namespace
);

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt;

    fn update(name: &str) -> Arc<Update> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "auto.pulumi.com/v1alpha1", "kind": "Update",
                "metadata": {"name": name, "namespace": "ns"}, "spec": {}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn a_relist_hands_on_what_was_deleted_meanwhile_and_is_counted() {
        let restarts = Counter::default();
        let mut relist = Relist::default();
        relist.start(vec![], &restarts);
        assert!(relist.gone(&[update("a"), update("b")]).is_empty());
        assert_eq!(restarts.get(), 0, "the first list is no restart");
        relist.start(vec![update("a"), update("b")], &restarts);
        let gone = relist.gone(&[update("b"), update("c")]);
        assert_eq!(
            gone.iter().map(|u| u.name_any()).collect::<Vec<_>>(),
            vec!["a".to_string()]
        );
        assert_eq!(restarts.get(), 1);
    }

    #[test]
    fn caches_keep_what_decisions_read() {
        let mut job: CachedJob = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "u", "namespace": "n", "labels": {"a": "b", "auto.pulumi.com/update-name": "u"}, "ownerReferences": [{"apiVersion": "v1",
                "kind": "Update", "name": "u", "uid": "1"}],
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}", "keep": "1"},
                "managedFields": [{"manager": "x"}]},
            "spec": {"parallelism": 1, "activeDeadlineSeconds": 60, "template": {
                "metadata": {"labels": {"x": "y"}},
                "spec": {"containers": [{"name": "pulumi", "env": [{"name": "A", "value": "1"}]}],
                    "volumes": [{"name": "cache", "persistentVolumeClaim": {"claimName": "ws-cache"}},
                                {"name": "plan", "secret": {"secretName": "s"}}]}}},
            "status": {"active": 1}
        }))
        .unwrap();
        job.trim();
        let spec = job.spec.as_ref().unwrap();
        assert_eq!(spec.parallelism, Some(1));
        assert_eq!(spec.active_deadline_seconds, Some(60));
        let pod = spec.template.spec.as_ref().unwrap();
        assert_eq!(pod.volumes.as_ref().unwrap().len(), 1);
        assert!(crate::workspace::reconcile::jobs_mount_claim(
            &[Arc::new(job.clone())],
            "n",
            "ws-cache"
        ));
        assert_eq!(job.status.as_ref().unwrap().active, Some(1));
        assert!(job.metadata.managed_fields.is_none());
        let annotations = job.metadata.annotations.as_ref().unwrap();
        assert!(!annotations.contains_key("kubectl.kubernetes.io/last-applied-configuration"));
        assert!(annotations.contains_key("keep"));
        assert_eq!(job.owner_references().len(), 1);
        let labels = job.metadata.labels.as_ref().unwrap();
        assert_eq!(labels.len(), 1, "only the Update's name: {labels:?}");
        assert_eq!(labels[pulumi_operator_api::names::UPDATE_NAME_LABEL], "u");
    }
}
