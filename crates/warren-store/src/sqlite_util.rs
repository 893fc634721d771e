//! Connection setup of this crate's SQLite stores: a re-export of the one open routine every
//! store uses, [`warren_config::sqlite`] (mode 0600, verified WAL, busy timeout, `synchronous`
//! by durability), kept at this path for the stores written against it.

pub use warren_config::sqlite::{SharedConn, Sync, open_read_only, open_wal};
