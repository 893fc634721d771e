//! Connection setup of this crate's SQLite stores: a re-export of the one open routine every
//! store uses, [`warren_config::sqlite`] (mode 0600, verified WAL, busy timeout, `synchronous`
//! by durability), kept at this path for the stores written against it.

pub use warren_config::sqlite::{OpenError, SharedConn, Sync, migrate, open_read_only, open_wal};

/// The agent alias in column `i` of a row: a row naming no valid alias does not decode (a
/// hand-edited store is an error naming its file, never an alias carried on as a string).
pub fn alias_column(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<warren_core::AgentAlias> {
    let text: String = r.get(i)?;
    warren_core::AgentAlias::new(text).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e))
    })
}
