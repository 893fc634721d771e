//! Daemon-side access to agent-writable places (PERM-6; issue 13): identity files, Markdown
//! memory and its lock, and everything later issues add (delegate results, skills, MCP config)
//! go through a [`ConfinedDir`] opened on the agent's workspace, never through `std::fs` on a
//! joined path. Below the handle every name is resolved with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)` and `O_NOFOLLOW`; reads refuse what is not a regular file or has more
//! than one hard link; writes go through a random `O_EXCL | O_NOFOLLOW` temp name and
//! `renameat`; lock files are opened the same way and `flock`ed.
//!
//! The primitive lives in `warren_config::confined` so the memory backends (beside this crate,
//! not above it) use the same code; this module is where the rest of the daemon takes it from,
//! and `crate::confined` (the file tools) shares its atomic write. The architecture gate in
//! `tests/architecture.rs` keeps plain `std::fs` out of the daemon crates' other modules.

pub use warren_config::confined::{
    ConfinedDir, DirError, DirErrorKind, DirLock, FileKind, FileMeta,
};
