//! Every SQLite store opens its file through the one routine (`warren_config::sqlite`, issue 14
//! §7): after open the file is mode 0600 and in WAL mode, and a file that cannot be put in WAL
//! mode is refused with an error naming it. Here because this crate sees every store (sessions,
//! ACP, cron and control plane in warren-store, memory in warren-memory, devices here).

#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use warren_config::InstallRoot;
use warren_config::schema::SessionDurability;
use warren_gateway::devices::Devices;
use warren_memory::SqliteStore;
use warren_store::acp::AcpSessionStore;
use warren_store::control_plane::ControlPlane;
use warren_store::cron::CronStore;
use warren_store::sessions::sqlite::SqliteBackend;

/// One store: its name, its file under the root, and an open that keeps the store alive while
/// the file is inspected (`Ok(Box<dyn Any>)`) or returns the store's error as text.
type Open = fn(&InstallRoot) -> Result<Box<dyn std::any::Any>, String>;

/// A store's name, its file, and its open.
type Store = (&'static str, fn(&InstallRoot) -> PathBuf, Open);

fn stores() -> Vec<Store> {
    fn boxed<T: 'static, E: std::fmt::Display>(
        r: Result<T, E>,
    ) -> Result<Box<dyn std::any::Any>, String> {
        r.map(|s| Box::new(s) as Box<dyn std::any::Any>)
            .map_err(|e| e.to_string())
    }
    vec![
        ("sessions", InstallRoot::sessions_db, |r| {
            boxed(SqliteBackend::open(r, SessionDurability::Turn))
        }),
        ("acp sessions", InstallRoot::acp_sessions_db, |r| {
            boxed(AcpSessionStore::open(r))
        }),
        ("memory", InstallRoot::memory_db, |r| {
            boxed(SqliteStore::open(&r.memory_db()))
        }),
        ("devices", InstallRoot::devices_db, |r| {
            boxed(Devices::open(&r.devices_db()))
        }),
        ("cron", InstallRoot::cron_db, |r| {
            boxed(CronStore::open(&r.cron_db()))
        }),
        ("control plane", InstallRoot::control_plane_db, |r| {
            boxed(ControlPlane::open(&r.control_plane_db()))
        }),
    ]
}

/// The journal mode as another process sees it (a fresh connection, not the store's).
fn journal_mode(path: &Path) -> String {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn every_store_file_is_private_and_in_wal_mode_after_open() {
    let mut seen = Vec::new();
    for (name, file, open) in stores() {
        let dir = tempfile::tempdir().unwrap();
        let root = InstallRoot::at(dir.path());
        let path = file(&root);
        let store = open(&root).unwrap_or_else(|e| panic!("{name}: {e}"));
        seen.push((name, mode(&path), journal_mode(&path)));
        drop(store);
    }
    let want: Vec<_> = stores()
        .into_iter()
        .map(|(name, _, _)| (name, 0o600, "wal".to_string()))
        .collect();
    pretty_assertions::assert_eq!(seen, want);
}

/// A database file left world-readable (copied in from a backup, created by an older version)
/// is made private by the next open.
#[test]
fn every_store_makes_an_existing_readable_file_private() {
    for (name, file, open) in stores() {
        let dir = tempfile::tempdir().unwrap();
        let root = InstallRoot::at(dir.path());
        let path = file(&root);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let store = open(&root).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(mode(&path), 0o600, "{name}");
        drop(store);
    }
}

/// A database whose WAL file cannot exist (here a directory sits where SQLite puts it, as a
/// botched restore leaves it) cannot be in WAL mode: every store refuses to open it, with an
/// error naming the file and WAL, instead of running in another journal mode. The same file
/// without the obstacle opens.
#[test]
fn every_store_refuses_a_database_that_cannot_be_in_wal_mode() {
    for (name, file, open) in stores() {
        let dir = tempfile::tempdir().unwrap();
        let root = InstallRoot::at(dir.path());
        let path = file(&root);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        {
            // An existing rollback-journal database.
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute_batch("CREATE TABLE old (x); PRAGMA journal_mode = DELETE;")
                .unwrap();
        }
        let wal = PathBuf::from(format!("{}-wal", path.display()));
        std::fs::create_dir(&wal).unwrap();
        let err = match open(&root) {
            Ok(_) => panic!("{name}: opened a database that cannot be in WAL mode"),
            Err(e) => e,
        };
        assert!(
            err.contains(&path.display().to_string()) && err.contains("WAL"),
            "{name}: {err}"
        );
        std::fs::remove_dir(&wal).unwrap();
        let store = open(&root).unwrap_or_else(|e| panic!("{name} without the obstacle: {e}"));
        assert_eq!(journal_mode(&path), "wal", "{name}");
        drop(store);
    }
}
