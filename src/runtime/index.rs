//! A watch cache's objects by namespace and one key (a label's value, a field): an Update's
//! pods (by `auto.pulumi.com/update-name`), a Stack's Updates (by `pulumi.com/stack-name`) and
//! a Workspace's Updates (by `spec.workspaceName`) are looked up on every reconcile or event,
//! and a scan of the whole cache made each of those O(N) — with 10,000 Stacks, half the
//! operator's CPU went to comparing strings.
//!
//! Fed by the same watch events as the cache, before those events trigger any reconcile. A
//! lookup reads the objects from the cache itself and keeps only those that still carry the
//! value: the index may name an object a moment after it is gone, never miss one the cache
//! had when the reconcile was triggered.

use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use std::collections::HashMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// namespace → key → object names. The names under one key are few (a Stack's Updates are
/// bounded by its history limit, an Update has one pod at a time), so a list: a set with one
/// name cost about 130 bytes more, 4 MiB across the three indexes at 10,000 Stacks.
type Names = HashMap<String, HashMap<String, Vec<String>>>;

pub struct Index<K> {
    key: fn(&K) -> Option<&str>,
    names: RwLock<Names>,
}

/// Keyed by the value of the label `L`.
pub fn label<K: ResourceExt, const L: usize>(obj: &K) -> Option<&str> {
    obj.labels().get(INDEXED_LABELS[L]).map(String::as_str)
}

/// The labels an index can be keyed by (a `const` parameter cannot be a string).
pub const INDEXED_LABELS: [&str; 2] = [
    pulumi_operator_api::names::UPDATE_NAME_LABEL,
    pulumi_operator_api::names::STACK_NAME_LABEL,
];
pub const UPDATE_NAME: usize = 0;
pub const STACK_NAME: usize = 1;

impl<K: ResourceExt> Index<K> {
    pub fn new(key: fn(&K) -> Option<&str>) -> Arc<Index<K>> {
        Arc::new(Index {
            key,
            names: RwLock::default(),
        })
    }

    // Nothing panics while holding the lock; a poisoned one still holds consistent maps.
    fn read(&self) -> RwLockReadGuard<'_, Names> {
        self.names.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Names> {
        self.names.write().unwrap_or_else(|e| e.into_inner())
    }

    fn add(&self, names: &mut Names, obj: &K) {
        let meta = obj.meta();
        let (Some(ns), Some(value), Some(name)) = (
            meta.namespace.as_deref(),
            (self.key)(obj),
            meta.name.as_deref(),
        ) else {
            return;
        };
        let listed = names
            .entry(ns.to_string())
            .or_default()
            .entry(value.to_string())
            .or_default();
        if !listed.iter().any(|n| n == name) {
            listed.push(name.to_string());
        }
    }

    /// An object was added or changed. A key that changed leaves the old entry until the next
    /// re-list (lookups check the key against the cache); none of the indexed keys changes.
    pub fn apply(&self, obj: &K) {
        self.add(&mut self.write(), obj);
    }

    /// An object was deleted.
    pub fn delete(&self, obj: &K) {
        let (Some(ns), Some(value)) = (obj.namespace(), (self.key)(obj)) else {
            return;
        };
        let mut names = self.write();
        let Some(values) = names.get_mut(&ns) else {
            return;
        };
        if let Some(listed) = values.get_mut(value) {
            let name = obj.meta().name.as_deref().unwrap_or_default();
            listed.retain(|n| n != name);
            if listed.is_empty() {
                values.remove(value);
            }
        }
        if values.is_empty() {
            names.remove(&ns);
        }
    }

    /// The cache was (re)listed: exactly its objects.
    pub fn rebuild<'a>(&self, objs: impl IntoIterator<Item = &'a Arc<K>>)
    where
        K: 'a,
    {
        let mut fresh = Names::new();
        for obj in objs {
            self.add(&mut fresh, obj.as_ref());
        }
        *self.write() = fresh;
    }

    /// The cached objects of `ns` whose key is `value`.
    pub fn lookup(&self, store: &Store<K>, ns: &str, value: &str) -> Vec<Arc<K>>
    where
        K: Resource<DynamicType = ()> + Clone + 'static,
    {
        let names: Vec<String> = self
            .read()
            .get(ns)
            .and_then(|values| values.get(value))
            .cloned()
            .unwrap_or_default();
        names
            .iter()
            .filter_map(|name| store.get(&ObjectRef::new(name).within(ns)))
            .filter(|o| (self.key)(o) == Some(value))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    fn cm(ns: &str, name: &str, owner: &str) -> ConfigMap {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns, "labels": {INDEXED_LABELS[STACK_NAME]: owner}}
        }))
        .expect("a ConfigMap")
    }

    #[test]
    fn lookups_follow_the_cache() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let index = Index::new(label::<ConfigMap, STACK_NAME>);
        let apply = |writer: &mut reflector::store::Writer<ConfigMap>, o: ConfigMap| {
            writer.apply_watcher_event(&Event::Apply(o.clone()));
            index.apply(&o);
        };
        apply(&mut writer, cm("a", "u1", "s"));
        apply(&mut writer, cm("a", "u2", "s"));
        apply(&mut writer, cm("a", "u3", "t"));
        apply(&mut writer, cm("b", "u1", "s"));
        let names = |ns, value| {
            let mut names: Vec<String> = index
                .lookup(&store, ns, value)
                .iter()
                .map(|o| o.name_any())
                .collect();
            names.sort();
            names
        };
        assert_eq!(names("a", "s"), ["u1", "u2"]);
        // A change of a listed object does not list it twice.
        apply(&mut writer, cm("a", "u1", "s"));
        assert_eq!(names("a", "s"), ["u1", "u2"]);
        assert_eq!(index.lookup(&store, "b", "s").len(), 1);
        assert!(index.lookup(&store, "c", "s").is_empty());

        // Deleted from the cache first: the lookup no longer returns it.
        let gone = cm("a", "u2", "s");
        writer.apply_watcher_event(&Event::Delete(gone.clone()));
        assert_eq!(index.lookup(&store, "a", "s").len(), 1);
        index.delete(&gone);
        assert_eq!(index.read()["a"]["s"].len(), 1);

        // A relist replaces everything.
        index.rebuild(&store.state());
        assert_eq!(names("a", "s"), ["u1"]);
        // Empty keys do not linger.
        index.delete(&cm("b", "u1", "s"));
        assert!(!index.read().contains_key("b"));
    }
}
