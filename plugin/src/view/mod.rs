//! The pure half of the plugin: what the commands show, computed from objects already read
//! (no I/O here, each function unit-tested).

pub mod approval;
pub mod describe;
pub mod errors;
pub mod format;
pub mod history;
pub mod outputs;
pub mod plan;
pub mod pods;
pub mod rows;
pub mod state;
pub mod terminal;
pub mod wait;
