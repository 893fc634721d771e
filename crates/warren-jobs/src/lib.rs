//! Warren's background work (layer 5), above the engine: the cron scheduler ([`cron`],
//! STATE-9, STATE-11), SOPs ([`sop`], STATE-10) and the unattended runs both use for an agent
//! turn or a single tool call without a person ([`unattended`], PERM-2). Every turn goes
//! through the engine's one door ([`warren_runtime::AgentHost::submit`]); every store handle is
//! borrowed from the process's [`warren_runtime::stores::Stores`]. The engine does not know
//! this crate: the daemon starts a scheduler and an SOP engine per generation and hands them to
//! whoever needs them (the gateway) through its own generation.

pub mod cron;
pub mod sop;
mod unattended;
