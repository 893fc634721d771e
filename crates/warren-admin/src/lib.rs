//! Warren's administration (layer 5), above the engine: the agent lifecycle ([`lifecycle`]:
//! rename, delete, restore, resume; LIFE-1..5, BEYOND-1..3) with the cascade over every store
//! that keeps per-agent state, and backup, verify, restore and doctor ([`backup`], issue 22).
//! Store handles are borrowed from the running generation's host or from this process's
//! [`warren_runtime::stores::Stores`]; the daemon's lock is read with
//! [`warren_runtime::lock::probe`].

pub mod backup;
pub mod control;
pub mod lifecycle;
