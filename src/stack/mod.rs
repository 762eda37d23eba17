//! Pure parts of the Stack controller: the sync decision, the objects it creates, and status.
pub mod approval;
pub mod decide;
pub mod drift;
pub mod inflight;
pub mod objects;
pub mod prereq;
pub mod references;
pub mod status;
pub mod window;
