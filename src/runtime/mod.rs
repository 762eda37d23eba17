//! What every controller shares, below them all (it imports no controller): the context and its
//! caches and indexes, the gate and its lanes, configuration, errors and backoff, events,
//! metrics, the administrator's limits, the finalizer helper and owner lookups.

pub mod cached;
pub mod config;
pub mod context;
pub mod deletion_clock;
pub mod duration;
pub mod error;
pub mod events;
pub mod finalizer;
pub mod gate;
pub mod index;
pub mod limits;
pub mod merge;
pub mod metrics;
pub mod owners;
pub mod recently_seen;
pub mod remote_hosts;
pub mod startup;
pub mod status;
pub mod turns;
pub mod warnings;
pub mod watch;

use kube::runtime::controller::Action;
use std::time::Duration;

/// Longest requeue: a far-away resync or TTL is re-checked daily instead of overflowing the
/// timer (a user's `resyncFrequencySeconds` can be as large as i64 allows).
pub const MAX_REQUEUE: Duration = Duration::from_secs(24 * 3600);

/// `Action::requeue`, bounded by [`MAX_REQUEUE`].
pub fn requeue(after: Duration) -> Action {
    Action::requeue(after.min(MAX_REQUEUE))
}
