//! The paired-device registry, `data/devices.db` (STATE-16): name, created and last seen, keyed
//! by token hash. It is metadata only: the canonical token set is `gateway.paired_tokens`
//! (STATE-15), the registry is reconciled with it on start and reload, and a row never makes a
//! token valid. Reconciliation only ever sees a config that loaded (a file that fails to load
//! never becomes a generation), and one that would drop every row keeps them all and warns: a
//! token set emptied by a bad edit must not erase names and creation dates for good (issue 15).
//!
//! The file is opened by the one routine of every store (`warren_config::sqlite`: 0600,
//! verified WAL); SQLite calls run off the async workers (`spawn_blocking`) on its one
//! `SharedConn`.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use warren_config::sqlite::{self, SharedConn};

use crate::pairing::device_id;

/// Name given to a token that has no row (paired before the registry existed, or its row was
/// lost).
pub const UNNAMED: &str = "(unnamed)";

#[derive(Debug, Clone, thiserror::Error)]
#[error("device registry {path}: {message}")]
pub struct DeviceError {
    pub path: PathBuf,
    pub message: String,
}

/// One paired device as listed (never the token; the id is a prefix of the token's hash).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Device {
    pub id: String,
    pub name: String,
    pub created_unix: u64,
    pub last_seen_unix: Option<u64>,
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The registry on one SQLite connection.
#[derive(Clone)]
pub struct Devices {
    path: PathBuf,
    conn: SharedConn,
}

impl std::fmt::Debug for Devices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Devices").field("path", &self.path).finish()
    }
}

impl Devices {
    /// Opens (creating) the registry at `path`.
    pub fn open(path: &Path) -> Result<Self, DeviceError> {
        let schema = "CREATE TABLE IF NOT EXISTS devices (
                 token_hash TEXT PRIMARY KEY,
                 name TEXT NOT NULL,
                 created_at INTEGER NOT NULL,
                 last_seen INTEGER
             );";
        // The stores' one open routine: a failed migration leaves the registry read-only at its
        // old schema (issue 22 §4).
        let conn =
            sqlite::SharedConn::open_store(path, sqlite::Sync::Normal, schema).map_err(|e| {
                DeviceError {
                    path: path.to_path_buf(),
                    message: e.cause(),
                }
            })?;
        Ok(Self {
            path: path.to_path_buf(),
            conn,
        })
    }

    fn with<R>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<R>,
    ) -> Result<R, DeviceError> {
        f(&mut self.conn.lock()).map_err(|e| DeviceError {
            path: self.path.clone(),
            message: sqlite::cause_text(&e, &self.path),
        })
    }

    /// Runs `f` on a blocking thread.
    pub async fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Devices) -> Result<R, DeviceError> + Send + 'static,
    ) -> Result<R, DeviceError> {
        let this = self.clone();
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || f(&this))
            .await
            .map_err(|e| DeviceError {
                path,
                message: e.to_string(),
            })?
    }

    /// Records a newly paired device (replacing a row with the same hash).
    pub fn insert(&self, hash: &str, name: &str) -> Result<(), DeviceError> {
        self.with(|c| {
            c.execute(
                "INSERT OR REPLACE INTO devices (token_hash, name, created_at, last_seen) VALUES (?1, ?2, ?3, NULL)",
                params![hash, name, unix_now()],
            )
            .map(drop)
        })
    }

    /// Best-effort "last seen" update.
    pub fn touch(&self, hash: &str) -> Result<(), DeviceError> {
        self.with(|c| {
            c.execute(
                "UPDATE devices SET last_seen = ?2 WHERE token_hash = ?1",
                params![hash, unix_now()],
            )
            .map(drop)
        })
    }

    pub fn delete(&self, hash: &str) -> Result<(), DeviceError> {
        self.with(|c| {
            c.execute("DELETE FROM devices WHERE token_hash = ?1", params![hash])
                .map(drop)
        })
    }

    /// Makes the rows match the canonical token set: rows of unknown hashes are deleted, hashes
    /// without a row get an unnamed one. Returns (added, removed). When no row's hash is in the
    /// set (an emptied or replaced token list), the rows are kept with a warning instead: they
    /// are metadata only and are not listed, and they come back named if their tokens do.
    /// `warren tokens revoke` deletes a revoked device's row itself.
    pub fn reconcile(&self, hashes: &[String]) -> Result<(usize, usize), DeviceError> {
        self.with(|c| {
            let tx = c.transaction()?;
            let existing: Vec<String> = {
                let mut stmt = tx.prepare("SELECT token_hash FROM devices")?;
                stmt.query_map([], |r| r.get(0))?
                    .collect::<rusqlite::Result<_>>()?
            };
            let stale: Vec<&String> = existing.iter().filter(|h| !hashes.contains(h)).collect();
            let mut removed = 0;
            if !stale.is_empty() && stale.len() == existing.len() {
                tracing::warn!(
                    path = %self.path.display(),
                    rows = stale.len(),
                    "gateway.paired_tokens matches none of the paired devices; their names and \
                     creation dates are kept (not listed, no token is valid because of them). \
                     If the token list was lost, restore config.toml.bak; `warren tokens revoke` \
                     removes a device for good"
                );
            } else {
                for hash in stale {
                    removed +=
                        tx.execute("DELETE FROM devices WHERE token_hash = ?1", params![hash])?;
                }
            }
            let mut added = 0;
            for hash in hashes.iter().filter(|h| !existing.contains(h)) {
                added += tx.execute(
                    "INSERT OR IGNORE INTO devices (token_hash, name, created_at) VALUES (?1, ?2, ?3)",
                    params![hash, UNNAMED, unix_now()],
                )?;
            }
            tx.commit()?;
            Ok((added, removed))
        })
    }

    /// The devices of `hashes` (the canonical set), in that order; a hash without a row is
    /// listed as unnamed. Rows of hashes outside the set are not listed.
    pub fn list(&self, hashes: &[String]) -> Result<Vec<Device>, DeviceError> {
        self.with(|c| {
            let mut stmt =
                c.prepare("SELECT name, created_at, last_seen FROM devices WHERE token_hash = ?1")?;
            let mut out = Vec::new();
            for hash in hashes {
                let row: Option<(String, u64, Option<u64>)> = stmt
                    .query_row(params![hash], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .optional()?;
                let (name, created_unix, last_seen_unix) =
                    row.unwrap_or_else(|| (UNNAMED.to_string(), 0, None));
                out.push(Device {
                    id: device_id(hash).to_string(),
                    name,
                    created_unix,
                    last_seen_unix,
                });
            }
            Ok(out)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconcile_follows_the_token_set_and_a_row_is_only_metadata_state16() {
        let dir = tempfile::tempdir().unwrap();
        let devices = Devices::open(&dir.path().join("devices.db")).unwrap();
        let (a, b, stray) = ("a".repeat(64), "b".repeat(64), "c".repeat(64));
        devices.insert(&a, "laptop").unwrap();
        devices.insert(&stray, "gone").unwrap();
        assert_eq!(devices.reconcile(&[a.clone(), b.clone()]).unwrap(), (1, 1));
        let listed = devices.list(&[a.clone(), b.clone()]).unwrap();
        assert_eq!(
            listed
                .iter()
                .map(|d| (d.id.as_str(), d.name.as_str()))
                .collect::<Vec<_>>(),
            vec![(&a[..12], "laptop"), (&b[..12], UNNAMED)]
        );
        devices.touch(&a).unwrap();
        assert!(devices.list(&[a]).unwrap()[0].last_seen_unix.is_some());
    }

    /// Issue 15 item 6: a token set that matches no row (emptied by a bad edit) drops nothing;
    /// when the tokens come back, so do the names and creation dates.
    #[test]
    fn a_reconcile_that_would_remove_every_device_keeps_the_rows_state16() {
        let dir = tempfile::tempdir().unwrap();
        let devices = Devices::open(&dir.path().join("devices.db")).unwrap();
        let (a, b) = ("a".repeat(64), "b".repeat(64));
        devices.insert(&a, "laptop").unwrap();
        devices.insert(&b, "phone").unwrap();
        let before = devices.list(&[a.clone(), b.clone()]).unwrap();
        assert_eq!(devices.reconcile(&[]).unwrap(), (0, 0), "nothing dropped");
        assert!(
            devices.list(&[]).unwrap().is_empty(),
            "kept rows are not listed"
        );
        let other = "c".repeat(64);
        assert_eq!(
            devices.reconcile(std::slice::from_ref(&other)).unwrap(),
            (1, 0)
        );
        assert_eq!(devices.reconcile(&[a.clone(), b.clone()]).unwrap(), (0, 1));
        assert_eq!(
            devices.list(&[a, b]).unwrap(),
            before,
            "names and dates survive"
        );
    }
}
