//! Pure parts of the Stack controller: the sync decision, the objects it creates, and status.
pub mod decide;
pub mod objects;
pub mod prereq;
pub mod status;
