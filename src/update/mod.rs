//! The Update controller: one operation of a Stack run as a Job. `reconcile` (talks to the API
//! server) starts the Job, follows it and hands its outputs over; the pure parts build the Job
//! (`job`, `cache`, `objects`) and fold the Job and its pod into the Update's status (`status`);
//! `errors` says, typed, why an Update cannot go on.
pub mod admission;
pub mod annotations;
pub mod cache;
pub mod errors;
pub mod fence;
pub mod job;
#[cfg(test)]
mod mocked_api_tests;
pub mod objects;
pub mod plan;
pub mod policy_job;
pub mod reconcile;
pub mod status;
