//! Retained workspaces (`workspaceReclaimPolicy: Retain`), as pure builders: the StatefulSet
//! that keeps a warm workspace pod, its plan Secret, and what an update Job adds to use the
//! workspace's cache.

pub mod cache;
pub mod statefulset;
