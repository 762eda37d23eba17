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
        // Bounded: a deletion's entry goes after a day (the pod is long gone).
        seen.retain(|_, at| at.elapsed() < Duration::from_secs(86_400));
        Some(seen.entry(uid).or_insert_with(Instant::now).elapsed())
    }
}
