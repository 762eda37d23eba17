//! What every reconcile shares: the client, the event recorder, metrics and configuration.

use crate::config::Config;
use crate::metrics::Metrics;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::Client;
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
    pub jobs: Store<Job>,
    pub pods: Store<Pod>,
}

pub struct Context {
    pub client: Client,
    pub stores: Stores,
    pub config: Config,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    /// What tenants may ask for (from the configuration).
    pub policy: crate::policy::Policy,
    /// Consecutive reconcile errors per object (namespace/name), for `error_policy` backoff.
    failures: Mutex<HashMap<String, u32>>,
}

impl Context {
    pub fn new(client: Client, config: Config, metrics: Arc<Metrics>, stores: Stores) -> Context {
        let reporter = Reporter {
            controller: REPORTER.into(),
            instance: Some(config.identity()),
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            policy: config.policy(),
            client,
            stores,
            config,
            metrics,
            failures: Mutex::new(HashMap::new()),
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
        if controller == "stack" {
            self.metrics.forget_stack(namespace, name);
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
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(bounded_note(note)),
            action: action.into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, object).await {
            tracing::warn!("cannot record event {reason}: {e}");
        }
    }
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
