//! Warren's durable stores (docs/architecture.md, crate map): one module per row of the runtime
//! state map (docs/requirements.md §9).
//!
//! - [`sessions`]: chat/channel sessions (STATE-6; SESS-1, SESS-2, MIG-1..7), their backends,
//!   the JSONL→SQLite migration and the per-session turn queue.
//! - [`acp`]: ACP protocol sessions (STATE-7; SESS-3).
//! - [`cron`]: cron jobs, their locks and run history (STATE-9).
//! - [`channels`]: the channels' inbox, outbox and senders (issue 38).
//! - [`control_plane`]: every background run with its owner (STATE-11).
//!
//! Live RPC/TUI sessions (STATE-8, SESS-4) are process-local and persist only through these.

pub mod acp;
pub mod channels;
pub mod control_plane;
pub mod cron;
pub mod failpoints;
pub mod sessions;
pub mod sop;
pub mod sop_defs;
pub mod sqlite_util;
pub mod timefmt;
