//! Warren's administration (layer 5), above the engine: the agent lifecycle ([`lifecycle`]:
//! rename, delete, restore, resume; LIFE-1..5, BEYOND-1..3) — the step order, the journal with
//! its crash points, convergence, and the cascade over every store that keeps per-agent state
//! ([`lifecycle::registered`]) — and backup, verify, restore and doctor ([`backup`], issue 22);
//! the typed control seam of the lifecycle verbs ([`control`]).
//!
//! The shares of the stores in `warren-store` (chat and ACP sessions, cron with the control
//! plane, SOP runs) live in that crate, beside the stores (`warren_store::agent_state`); this crate
//! lends them their handles ([`lifecycle::stores::StoreContext`]) and keeps the shares of the
//! stores `warren-store` cannot depend on (memory, the cost ledger, the action window). Store
//! handles are borrowed from the running generation's host or from this process's
//! [`warren_runtime::stores::Stores`]; the daemon's lock is read with
//! [`warren_runtime::lock::probe`].
//!
//! Depends on (layers below): `warren-core`, `warren-config`, `warren-security`,
//! `warren-store`, `warren-memory`, `warren-runtime`.

pub mod backup;
pub mod control;
pub mod lifecycle;
