//! The Update controller: one operation of a Stack run as a Job. `reconcile` (talks to the API
//! server) starts the Job, follows it and hands its outputs over; the pure parts build the Job
//! (`job`, `cache`) and fold the Job and its pod into the Update's status (`status`).
pub mod annotations;
pub mod cache;
pub mod job;
pub mod plan;
pub mod reconcile;
pub mod status;
