//! The state map of the files (SPEC §9, BAK-1): which file holds which store, and how a backup
//! reads each path of the install root. The backup walks the whole root, so a store added
//! later is never forgotten; this table says which of its files must be read through SQLite or
//! as a ledger, and a test ties it to the lifecycle registry
//! ([`crate::lifecycle::registered`]).

use std::path::{Path, PathBuf};

use warren_config::InstallRoot;
use warren_config::sqlite::{SNAPSHOT_DIR, STORE_SCHEMA_VERSION};
use warren_memory::SqliteStore;

use super::manifest::Class;

/// One durable store and its file.
#[derive(Debug, Clone)]
pub struct StoreFile {
    /// The SPEC row.
    pub state: &'static str,
    /// The store's name (as the lifecycle registry names it, where it is there).
    pub store: &'static str,
    pub path: PathBuf,
    pub class: Class,
    /// The schema version this build writes (`PRAGMA user_version`), for databases.
    pub schema: Option<i64>,
}

/// Every durable store of an install root (STATE-1..16; those with no file are left out).
pub fn state_map(root: &InstallRoot) -> Vec<StoreFile> {
    let row = |state, store, path, class, schema| StoreFile {
        state,
        store,
        path,
        class,
        schema,
    };
    use Class::{Ledger, Plain, Sqlite};
    let v1 = Some(STORE_SCHEMA_VERSION);
    vec![
        row("STATE-1", "config", root.config_file(), Plain, None),
        row("STATE-2", "secret_key", root.secret_key(), Plain, None),
        row("STATE-3", "workspaces", root.agents_dir(), Plain, None),
        row("STATE-4", "shared", root.shared_dir(), Plain, None),
        row(
            "STATE-5",
            "memory",
            root.memory_db(),
            Sqlite,
            Some(SqliteStore::SCHEMA_VERSION),
        ),
        row(
            "STATE-6",
            "sessions",
            root.sessions_db(),
            Sqlite,
            Some(warren_store::sessions::sqlite::SCHEMA_VERSION),
        ),
        row(
            "STATE-7",
            "acp",
            root.acp_sessions_db(),
            Sqlite,
            Some(warren_store::acp::SCHEMA_VERSION),
        ),
        row(
            "STATE-9",
            "cron",
            root.cron_db(),
            Sqlite,
            Some(warren_store::cron::SCHEMA_VERSION),
        ),
        row(
            "STATE-10",
            "sop",
            root.sop_runs_db(),
            Sqlite,
            Some(warren_store::sop::SCHEMA_VERSION),
        ),
        row(
            "STATE-11",
            "control_plane",
            root.control_plane_db(),
            Sqlite,
            Some(warren_store::control_plane::SCHEMA_VERSION),
        ),
        row("STATE-13", "trace", root.runtime_trace(), Ledger, None),
        row("STATE-14", "costs", root.costs_ledger(), Ledger, None),
        row("STATE-16", "devices", root.devices_db(), Sqlite, v1),
        row(
            "PERM-2",
            "actions",
            warren_runtime::actions::actions_db(root),
            Sqlite,
            v1,
        ),
        row(
            "LIFE-4",
            "deleted_agents",
            root.deleted_agents_dir(),
            Plain,
            None,
        ),
        row(
            "BEYOND-3",
            "lifecycle_journal",
            root.lifecycle_journal_dir(),
            Plain,
            None,
        ),
    ]
}

/// How the backup treats one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Treat {
    /// Left out: process-local state, or a side file of a database copied through SQLite.
    Skip,
    Read(Class),
}

/// Process-local files of a running install: locks, the running daemon's state, the gateway's
/// per-process admin key and the daemon's control socket key (issue 35 §1). A restored install
/// starts without them.
fn process_local(root: &InstallRoot) -> [PathBuf; 6] {
    [
        root.daemon_lock(),
        root.daemon_state(),
        root.config_lock(),
        root.gateway_admin(),
        root.daemon_socket_key(),
        root.sessions_lock(),
    ]
}

/// How the file at `path` (below `root`) is read; `sqlite_header` says whether it starts with
/// SQLite's magic bytes. Databases and ledgers are recognised in `data/` only: a database an
/// agent keeps in its workspace is its own file, copied as it is.
pub fn classify(root: &InstallRoot, path: &Path, sqlite_header: bool) -> Treat {
    if process_local(root).iter().any(|p| p == path) {
        return Treat::Skip;
    }
    if !path.starts_with(root.data_dir()) {
        // An agent's own folder of that name is its file too: only the stores' snapshot
        // directories (all in `data/`) are left out.
        return Treat::Read(Class::Plain);
    }
    if path
        .components()
        .any(|c| c.as_os_str() == std::ffi::OsStr::new(SNAPSHOT_DIR))
    {
        return Treat::Skip;
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if ["-wal", "-shm", "-journal"]
        .iter()
        .any(|s| name.ends_with(s))
    {
        let main = path.with_file_name(name.rsplit_once('-').map_or("", |(m, _)| m));
        if main.is_file() {
            return Treat::Skip;
        }
    }
    if sqlite_header {
        Treat::Read(Class::Sqlite)
    } else if name.ends_with(".jsonl") {
        Treat::Read(Class::Ledger)
    } else {
        Treat::Read(Class::Plain)
    }
}

/// Whether the first bytes of a file are SQLite's header.
pub fn is_sqlite_header(prefix: &[u8]) -> bool {
    prefix.starts_with(b"SQLite format 3\0")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use super::*;
    use crate::lifecycle::registered;
    use crate::lifecycle::stores::{OwnStores, StoreContext, StoreSource};

    /// Every store of the lifecycle registry has its file in the state map: a store added to
    /// the registry without a row here fails this test, so backup and doctor cannot forget it.
    #[test]
    fn every_registered_store_is_in_the_state_map() {
        let dir = tempfile::tempdir().unwrap();
        let root = InstallRoot::at(dir.path());
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let ctx = StoreContext {
            root: root.clone(),
            config: Arc::new(warren_config::Config::default()),
            memory_backend: warren_config::schema::MemoryBackendKind::Sqlite,
            handle: rt.handle().clone(),
            source: StoreSource::Own(Arc::new(OwnStores::new(
                &root,
                Arc::new(warren_runtime::stores::Stores::new(
                    &root,
                    &warren_config::Config::default(),
                )),
            ))),
        };
        let mapped: BTreeSet<&str> = state_map(&root).iter().map(|s| s.store).collect();
        for store in registered(&ctx) {
            assert!(
                mapped.contains(store.name()),
                "store '{}' of the lifecycle registry has no row in backup::stores::state_map",
                store.name()
            );
        }
    }

    /// Each row's file is read the way its row says; process-local files and database side
    /// files are left out.
    #[test]
    fn state_map_files_are_classified_as_their_rows_say() {
        let dir = tempfile::tempdir().unwrap();
        let root = InstallRoot::at(dir.path());
        for row in state_map(&root) {
            let header = row.class == Class::Sqlite;
            assert_eq!(
                classify(&root, &row.path, header),
                Treat::Read(row.class),
                "{}",
                row.path.display()
            );
        }
        for p in process_local(&root) {
            assert_eq!(classify(&root, &p, false), Treat::Skip, "{}", p.display());
        }
        std::fs::create_dir_all(root.sessions_dir()).unwrap();
        std::fs::write(root.sessions_db(), b"SQLite format 3\0").unwrap();
        let wal = root.sessions_dir().join("sessions.db-wal");
        assert_eq!(classify(&root, &wal, false), Treat::Skip);
        let snap = root
            .sessions_dir()
            .join(SNAPSHOT_DIR)
            .join("sessions.db.v0.1.db");
        assert_eq!(classify(&root, &snap, true), Treat::Skip);
        // A database in a workspace is the agent's file, in a folder named like the stores'
        // snapshot directories too (it used to be left out of the backup).
        let ws = root.agents_dir().join("main/workspace/app.db");
        assert_eq!(classify(&root, &ws, true), Treat::Read(Class::Plain));
        let own = root
            .agents_dir()
            .join("main/workspace")
            .join(SNAPSHOT_DIR)
            .join("notes.md");
        assert_eq!(classify(&root, &own, false), Treat::Read(Class::Plain));
    }
}
