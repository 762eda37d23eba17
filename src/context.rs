//! What every reconcile shares: the client, the event recorder, metrics and configuration.

use crate::config::Config;
use crate::metrics::Metrics;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::events::{Recorder, Reporter};
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
        *n += 1;
        *n - 1
    }

    pub fn succeeded(&self, key: &str) {
        if let Ok(mut f) = self.failures.lock() {
            f.remove(key);
        }
    }
}
