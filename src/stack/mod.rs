//! The Stack controller. `reconcile` (talks to the API server) reads what a Stack references,
//! resolves its program source (`source`), decides (`decide`, `inflight`, `drift`, `window`,
//! `approval`, `prereq`, `references`, `suspend`), creates its Workspace and Updates
//! (`objects`) and writes its status (`status`); everything but `reconcile` and `source` is
//! pure.
pub mod approval;
#[cfg(test)]
mod blackhole_tests;
pub mod cancel;
pub mod decide;
pub mod drift;
pub mod inflight;
pub mod objects;
pub mod policy_check;
#[cfg(test)]
mod policy_wait_tests;
pub mod prereq;
pub mod reconcile;
pub mod references;
pub mod source;
pub mod status;
pub mod suspend;
pub mod window;
