//! The crate's integration tests, linked into one binary (one module per suite).

mod acp;
mod backends;
mod common;
mod control_plane_owner;
mod cron_owner;
mod group_commit;
mod heartbeat_owner;
mod migrate;
mod policy;
mod queue;
mod search_index;
mod sop_owner;
