//! Warren's permission model (SPEC §2 PERM, §4 SBX).
//!
//! - [`SecurityPolicy`]: built only by [`SecurityPolicy::for_agent`] (PERM-2), immutable, cheap
//!   to clone; narrowed for subagents by [`SecurityPolicy::narrow`] (PERM-7).
//! - [`paths`]: every path decision (`can_read`, `can_write`, PERM-3..6) in one module.
//! - [`confined`]: file access through directory handles opened on the allowed roots
//!   (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`), so a symlink swapped in between the
//!   check and the use cannot escape.
//! - [`confined_dir`]: the daemon's own handles on agent-writable directories (identity files,
//!   Markdown memory, later delegate results, skills, MCP config): no link is followed below them.
//! - [`command`]: the shell command policy (allowlist, risk tiers, path-touching arguments).
//! - [`quota`]: workspace byte limits and the daemon's disk reserve (issue 35 §8).
//! - [`sandbox`]: the one spawn module; every child process an agent starts is built here.
//! - [`control_socket`]: the guard of the daemon's `data/daemon.sock` (its key and the check
//!   that a peer is no sandboxed child, issue 35 §1).

pub mod command;
pub mod confined;
pub mod confined_dir;
pub mod control_socket;
pub mod narrow;
pub mod paths;
mod policy;
pub mod quota;
pub mod sandbox;

pub use narrow::{NarrowRequest, NarrowViolation};
pub use paths::{Denied, Resolved, Tier};
pub use policy::{EgressPolicy, Grant, PolicyError, SecurityPolicy};
pub use quota::QuotaError;
