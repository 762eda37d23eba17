//! What every reconcile shares: the client, the event recorder, metrics and configuration.

use crate::config::Config;
use crate::metrics::Metrics;
use kube::runtime::events::{Recorder, Reporter};
use kube::Client;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub const FIELD_MANAGER: &str = "pulumi-operator";

pub struct Context {
    pub client: Client,
    pub config: Config,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    /// Consecutive reconcile errors per object (namespace/name), for `error_policy` backoff.
    failures: Mutex<HashMap<String, u32>>,
}

impl Context {
    pub fn new(client: Client, config: Config, metrics: Arc<Metrics>) -> Context {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: Some(config.identity()),
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
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
        *n += 1;
        *n - 1
    }

    pub fn succeeded(&self, key: &str) {
        if let Ok(mut f) = self.failures.lock() {
            f.remove(key);
        }
    }
}
