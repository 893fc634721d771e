//! The ledger file `data/state/costs.jsonl` (STATE-14): its advisory lock (`<ledger>.lock`,
//! held by appends and by a rewrite that replaces the file), reading it whole, the crash points
//! of its rewrite, and the time format of its records.

use std::path::Path;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::CostRecord;

/// Crash points of the ledger rewrite of [`CostTracker::rename_agent`].
pub(super) const LEDGER_REWRITE_POINTS: warren_config::atomic::CrashPoints =
    warren_config::atomic::CrashPoints {
        after_temp_write: "lifecycle-ledger-after-temp-write",
        after_temp_fsync: "lifecycle-ledger-after-temp-fsync",
        after_rename: "lifecycle-ledger-after-rename",
        after_dir_sync: "lifecycle-ledger-after-dir-sync",
        dir_sync_error: "lifecycle-ledger-dir-sync-error",
    };

/// `<ledger>.lock`, the advisory lock file of the ledger at `path`.
pub(super) fn open_lock(path: &Path) -> std::io::Result<std::fs::File> {
    let mut lock = path.to_path_buf().into_os_string();
    lock.push(".lock");
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    warren_config::atomic::open_lock_file(Path::new(&lock))
}

/// Exclusive hold of the ledger at `path` against every appending [`CostTracker`], of any
/// process (`flock` of `<ledger>.lock`), for a rewrite that replaces the file: appends wait
/// until it is dropped and then go to the new file, so none is lost in the old one.
#[derive(Debug)]
pub struct LedgerLock(std::fs::File);

impl LedgerLock {
    pub fn acquire(path: &Path) -> std::io::Result<Self> {
        let file = open_lock(path)?;
        file.lock()?;
        Ok(Self(file))
    }
}

impl Drop for LedgerLock {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

/// Every readable record of the ledger at `path`, oldest first (bad lines skipped).
pub fn read_ledger(path: &Path) -> Vec<CostRecord> {
    std::fs::read_to_string(path)
        .map(|text| {
            text.lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// RFC 3339 text of a record's time (for display).
pub fn format_time(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
}
