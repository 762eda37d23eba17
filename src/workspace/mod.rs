//! The Workspace controller: retained workspaces (`workspaceReclaimPolicy: Retain`). `reconcile`
//! applies the StatefulSet that keeps a warm workspace pod and its plan Secret; `statefulset`
//! builds them (pure) from the update Job's pod shape.

pub mod reconcile;
pub mod statefulset;
