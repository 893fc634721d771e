//! Warren's durable stores (docs/architecture.md, crate map): one module per row of the runtime
//! state map (docs/requirements.md §9).
//!
//! - [`sessions`]: chat/channel sessions (STATE-6; SESS-1, SESS-2, MIG-1..7), their backends,
//!   the JSONL→SQLite migration and the per-session turn queue.
//! - [`acp`]: ACP protocol sessions (STATE-7; SESS-3).
//! - [`cron`]: cron jobs, their locks and run history (STATE-9).
//! - [`channels`]: the channels' inbox, outbox and senders (issue 38).
//! - [`control_plane`]: every background run with its owner (STATE-11).
//! - [`sop`]: SOP runs, their steps and events; [`sop_defs`]: the SOP definition files.
//! - [`agent_state`]: each store's share of an agent rename/delete/restore
//!   (`agent_state::{sessions, acp, cron, sop}`), on handles its caller lends.
//!
//! Live RPC/TUI sessions (STATE-8, SESS-4) are process-local and persist only through these.
//!
//! Layer 2: depends on `warren-core` and `warren-config` only. The process-wide handles
//! (control plane, cron, SOP runs) are opened by their owner, `warren_runtime::stores::Stores`,
//! through the constructors here; the chat and ACP session stores per generation.

pub mod acp;
pub mod agent_state;
pub mod channels;
pub mod control_plane;
pub mod cron;
pub mod failpoints;
pub mod sessions;
pub mod sop;
pub mod sop_defs;
pub mod sqlite_util;
pub mod timefmt;
