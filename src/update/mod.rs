//! Pure parts of the Update controller: Update → Job, and Job/pod → Update status.
pub mod job;
pub mod status;
pub mod warnings;
