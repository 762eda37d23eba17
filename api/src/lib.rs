//! API types; filled in by the API issue.
