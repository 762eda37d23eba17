//! Objects an operation needs (its ServiceAccount, ConfigMaps and Secrets) that were seen a
//! moment ago, kept briefly so that a burst of Stacks sharing them reads each once.

/// Objects an operation needs that were seen a moment ago, with their key names, so that a burst
/// of Stacks sharing one ServiceAccount and one Secret reads each once rather than once per
/// Stack. Only presence and key names are kept (never values), and only for `ttl`: a missing
/// object is always read again, so a fix is seen at once.
pub struct RecentlySeen {
    ttl: std::time::Duration,
    entries: std::sync::Mutex<SeenMap>,
}

type SeenMap =
    std::collections::HashMap<(&'static str, String, String), (std::time::Instant, Vec<String>)>;

/// Beyond this many entries, expired ones are dropped (memory stays bounded in N).
const SEEN_PRUNE_AT: usize = 4096;

impl RecentlySeen {
    pub fn new(ttl: std::time::Duration) -> RecentlySeen {
        RecentlySeen {
            ttl,
            entries: Default::default(),
        }
    }

    /// The key names of `kind` `ns/name` if it was seen within the last `ttl`.
    pub fn get(
        &self,
        kind: &'static str,
        ns: &str,
        name: &str,
        now: std::time::Instant,
    ) -> Option<Vec<String>> {
        let entries = self.entries.lock().ok()?;
        let (at, keys) = entries.get(&(kind, ns.to_string(), name.to_string()))?;
        (now.saturating_duration_since(*at) < self.ttl).then(|| keys.clone())
    }

    pub fn put(
        &self,
        kind: &'static str,
        ns: &str,
        name: &str,
        keys: Vec<String>,
        now: std::time::Instant,
    ) {
        let Ok(mut entries) = self.entries.lock() else {
            return;
        };
        if entries.len() >= SEEN_PRUNE_AT {
            let ttl = self.ttl;
            entries.retain(|_, (at, _)| now.saturating_duration_since(*at) < ttl);
        }
        entries.insert((kind, ns.to_string(), name.to_string()), (now, keys));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn presence_is_remembered_briefly_and_per_object() {
        let seen = RecentlySeen::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(seen.get("Secret", "ns", "s", t0), None);
        seen.put("Secret", "ns", "s", vec!["k".into()], t0);
        assert_eq!(
            seen.get("Secret", "ns", "s", t0 + Duration::from_secs(9)),
            Some(vec!["k".to_string()])
        );
        assert_eq!(
            seen.get("Secret", "ns", "s", t0 + Duration::from_secs(10)),
            None
        );
        assert_eq!(seen.get("Secret", "other", "s", t0), None);
        assert_eq!(seen.get("ConfigMap", "ns", "s", t0), None);
    }

    #[test]
    fn expired_entries_are_dropped_when_many() {
        let seen = RecentlySeen::new(Duration::from_secs(1));
        let t0 = Instant::now();
        for i in 0..SEEN_PRUNE_AT {
            seen.put("Secret", "ns", &i.to_string(), vec![], t0);
        }
        seen.put("Secret", "ns", "new", vec![], t0 + Duration::from_secs(5));
        assert_eq!(seen.entries.lock().unwrap().len(), 1);
    }
}
