//! Names of the crash points and injected errors of this crate's durable steps
//! (docs/architecture.md, "Crash tests"). They fire through `warren_config::failpoint`, armed with
//! `FAILPOINTS=<name>=return` in a build with the `failpoints` feature; crash tests iterate
//! these constants.

/// Every crash point of one file's JSONL→SQLite import (MIG-1..4), in the order it reaches them.
pub const MIGRATE: [&str; 7] = [
    MIGRATE_AFTER_STAGE_RENAME,
    MIGRATE_AFTER_STAGED_FSYNC,
    MIGRATE_AFTER_DIR_SYNC,
    MIGRATE_BEFORE_COMMIT,
    MIGRATE_AFTER_COMMIT,
    MIGRATE_AFTER_ARCHIVE_LINK,
    MIGRATE_AFTER_STAGED_REMOVE,
];
pub const MIGRATE_AFTER_STAGE_RENAME: &str = "sessions-migrate-after-stage-rename";
pub const MIGRATE_AFTER_STAGED_FSYNC: &str = "sessions-migrate-after-staged-fsync";
pub const MIGRATE_AFTER_DIR_SYNC: &str = "sessions-migrate-after-dir-sync";
/// Inside the receipt transaction, after every insert, before `COMMIT`.
pub const MIGRATE_BEFORE_COMMIT: &str = "sessions-migrate-before-commit";
pub const MIGRATE_AFTER_COMMIT: &str = "sessions-migrate-after-commit";
pub const MIGRATE_AFTER_ARCHIVE_LINK: &str = "sessions-migrate-after-archive-link";
pub const MIGRATE_AFTER_STAGED_REMOVE: &str = "sessions-migrate-after-staged-remove";

/// Every crash point of one SQLite append (SESS-1).
pub const APPEND: [&str; 2] = [APPEND_BEFORE_COMMIT, APPEND_AFTER_COMMIT];
/// Inside a group-commit transaction, after each append's savepoint, before `COMMIT`
/// (arm with `<name>=N*off->return` to crash in the middle of a batch).
pub const APPEND_IN_BATCH: &str = "sessions-append-in-batch";
pub const APPEND_BEFORE_COMMIT: &str = "sessions-append-before-commit";
pub const APPEND_AFTER_COMMIT: &str = "sessions-append-after-commit";

/// Error injection: the active→staged rename fails with `EROFS` (a read-only sessions directory).
pub const MIGRATE_READ_ONLY_ERROR: &str = "sessions-migrate-erofs-on-rename";
/// Error injection: the receipt transaction fails with "database or disk is full" before commit.
pub const MIGRATE_DISK_FULL_ERROR: &str = "sessions-migrate-enospc-before-commit";
/// Error injection: a JSONL append writes half its line, then fails with `ENOSPC` (a full disk).
pub const JSONL_APPEND_DISK_FULL_ERROR: &str = "sessions-jsonl-append-enospc";
