//! When the operator first saw each pod being deleted, on its own monotonic clock (see
//! `update::fence`).

use crate::runtime::cached::CachedPod;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// When the operator first saw each pod (by UID) being deleted.
#[derive(Default)]
pub struct DeletionClock {
    seen: Mutex<HashMap<String, Instant>>,
}

impl DeletionClock {
    /// How long ago the deletion of `pod` was first seen (now, the first time).
    pub fn seen_for(&self, pod: &CachedPod) -> Option<Duration> {
        pod.metadata.deletion_timestamp.as_ref()?;
        let uid = pod.metadata.uid.clone()?;
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(at) = seen.get(&uid) {
            return Some(at.elapsed());
        }
        // Bounded: a deletion's entry goes after a day (the pod is long gone). Pruned only when
        // an entry is added, not on every look.
        seen.retain(|_, at| at.elapsed() < Duration::from_secs(86_400));
        seen.insert(uid, Instant::now());
        Some(Duration::ZERO)
    }
}
