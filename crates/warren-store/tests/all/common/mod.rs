//! Helpers shared by the store's test files: a real child process to own rows (issue 17's
//! owner start time and PID namespace), and the files an older warren wrote (schema 1) for the
//! migration tests.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use rusqlite::Connection;
use warren_store::control_plane::{Owner, StoredOwner, boot_id};

/// A child process (`program 30`, a `sleep`) that is killed and waited for when dropped (also
/// when a test fails).
pub struct Proc(Child);

impl Proc {
    /// `program` (a copy of `sleep`, perhaps under another command name) sleeping 30 s.
    pub fn spawn(program: &Path) -> Self {
        Self(Command::new(program).arg("30").spawn().unwrap())
    }

    /// The `sleep` program sleeping 30 s.
    pub fn sleep() -> Self {
        Self::spawn(&sleep_program())
    }

    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    /// The process as an owner of rows (this boot).
    pub fn owner(&self) -> Owner {
        Owner {
            pid: self.pid(),
            boot_id: boot_id(),
        }
    }

    /// The process as a row of schema 1 recorded it: PID and boot only.
    pub fn pid_and_boot(&self) -> StoredOwner {
        StoredOwner {
            start: None,
            pid_ns: None,
            ..self.owner().stored()
        }
    }
}

/// A PID namespace that is not this process's (as a daemon in a container records it, seen
/// from the host, or the other way round).
pub const OTHER_NS: &str = "pid:[4026530000]";

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `sleep` program: found on PATH, like a shell would.
pub fn sleep_program() -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("sleep"))
                .find(|f| f.is_file())
        })
        .unwrap()
}

/// A database at `db` (its directory created) as an older warren wrote it: WAL, `schema`
/// applied (which sets its `user_version`); the connection fills in its rows.
pub fn old_file(db: &Path, schema: &str) -> Connection {
    std::fs::create_dir_all(db.parent().unwrap()).unwrap();
    let old = Connection::open(db).unwrap();
    let _: String = old
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .unwrap();
    old.execute_batch(schema).unwrap();
    old
}

/// The file's `PRAGMA user_version` (its schema version), read by another connection.
pub fn version(db: &Path) -> i64 {
    Connection::open(db)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap()
}
