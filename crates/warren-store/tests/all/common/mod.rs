//! Helpers shared by the store's test files: a real child process to own rows (issue 17's
//! owner start time and PID namespace), a control plane and a cron store in a fresh directory
//! with a second connection to write rows as another process or version would have, and the
//! files an older warren wrote (schema 1) for the migration tests.

#![allow(clippy::unwrap_used)]

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use tempfile::TempDir;
use warren_store::control_plane::{ControlPlane, Owner, StoredOwner, boot_id, pid_namespace};
use warren_store::cron::CronStore;

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
/// from the host, or the other way round). No process is in it: for liveness it is a namespace
/// that is gone; a live one is a [`LiveNamespace`].
pub const OTHER_NS: &str = "pid:[4026530000]";

/// A process in a PID namespace of its own that still runs (`unshare --pid --fork --kill-child
/// sleep 30`): a daemon in a container that is up, seen from the host. Killed when dropped.
pub struct LiveNamespace {
    unshare: Child,
    /// The `sleep` inside, by its PID in this process's namespace.
    inner: u32,
    /// Its namespace, `pid:[...]`.
    pub ns: String,
}

/// Why a test that needs PID namespaces cannot run here (not root, or a seccomp profile that
/// denies `unshare`); the test prints it and passes without asserting.
pub type Unsupported = String;

impl LiveNamespace {
    pub fn spawn() -> Result<Self, Unsupported> {
        let unshare = Command::new("unshare")
            .args(["--pid", "--fork", "--kill-child", "sleep", "30"])
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run unshare: {e}"))?;
        let mut this = Self {
            unshare,
            inner: 0,
            ns: String::new(),
        };
        // The forked child appears in /proc a moment after unshare starts.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = this.unshare.try_wait().unwrap() {
                let mut why = String::new();
                if let Some(mut err) = this.unshare.stderr.take() {
                    let _ = err.read_to_string(&mut why);
                }
                return Err(format!(
                    "`unshare --pid --fork` is not permitted here ({status}: {})",
                    why.trim()
                ));
            }
            if let Some(inner) = child_of(this.unshare.id()) {
                let ns = std::fs::read_link(format!("/proc/{inner}/ns/pid"))
                    .map(|t| t.to_string_lossy().into_owned());
                // Until it has forked, the child may still be in our namespace.
                if let Ok(ns) = ns
                    && Some(&ns) != pid_namespace().as_ref()
                {
                    this.inner = inner;
                    this.ns = ns;
                    return Ok(this);
                }
            }
            assert!(Instant::now() < deadline, "unshare's child never appeared");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Kills the process inside and waits for unshare, which reaps it: afterwards no process
    /// is in the namespace. The returned handle keeps the namespace itself allocated (an open
    /// `/proc/<pid>/ns/pid`), so its number is not given to a namespace created meanwhile by
    /// another test or process of the machine.
    pub fn kill(mut self) -> DeadNamespace {
        let hold = File::open(format!("/proc/{}/ns/pid", self.inner)).unwrap();
        let killed = Command::new("kill")
            .args(["-KILL", &self.inner.to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        self.unshare.wait().unwrap();
        assert!(
            !Path::new(&format!("/proc/{}", self.inner)).exists(),
            "unshare reaped its child"
        );
        DeadNamespace {
            ns: std::mem::take(&mut self.ns),
            _hold: hold,
        }
    }
}

impl Drop for LiveNamespace {
    fn drop(&mut self) {
        // --kill-child: the sleep inside dies with unshare.
        let _ = self.unshare.kill();
        let _ = self.unshare.wait();
    }
}

/// A PID namespace no process is in any more: a container that was killed (`docker kill`, the
/// OOM killer) and restarted in a new one.
pub struct DeadNamespace {
    pub ns: String,
    _hold: File,
}

impl DeadNamespace {
    pub fn new() -> Result<Self, Unsupported> {
        Ok(LiveNamespace::spawn()?.kill())
    }
}

/// `made` (a `Result<T, Unsupported>`)'s value; or, after printing why the calling test cannot
/// run here, a return of `Ok(())` from it: it passes without asserting (a skip that says so, not
/// a silent one).
macro_rules! or_skip {
    ($test:expr, $made:expr) => {
        match $made {
            Ok(made) => made,
            Err(why) => {
                eprintln!("SKIPPED {}: {why}", $test);
                return Ok(());
            }
        }
    };
}
pub(crate) use or_skip;

/// The first child of process `pid` (`/proc/<pid>/task/<pid>/children`).
fn child_of(pid: u32) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

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

/// A control plane at `<dir>/data/control_plane.db` of a fresh directory, and a second
/// connection to its file (rows written as another process or an older version left them).
pub struct Plane {
    pub dir: TempDir,
    pub db: PathBuf,
    pub cp: ControlPlane,
    pub conn: Connection,
}

impl Plane {
    pub fn empty() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("data").join("control_plane.db");
        let cp = ControlPlane::open(&db).unwrap();
        let conn = Connection::open(&db).unwrap();
        Self { dir, db, cp, conn }
    }

    /// A new plane with a running cron run (agent `main`, `cron:a`) of `owner` for each of `ids`.
    pub fn with_cron_runs(ids: &[&str], owner: &Owner) -> Self {
        let this = Self::empty();
        for id in ids {
            this.cp
                .register(id, "cron", "main", "cron:a", owner)
                .unwrap();
        }
        this
    }
}

/// `(id, state)` of every row, by id.
pub fn states(cp: &ControlPlane) -> Vec<(String, String)> {
    let mut rows: Vec<_> = cp
        .list(None, 100)
        .unwrap()
        .into_iter()
        .map(|r| (r.id, r.state))
        .collect();
    rows.sort();
    rows
}

/// The runs [`ControlPlane::reap`] marks lost, by id.
pub fn reaped(cp: &ControlPlane) -> Vec<String> {
    let mut lost = cp.reap().unwrap();
    lost.sort();
    lost
}

/// `(id, state)` pairs as [`states`] returns them.
pub fn pairs(rows: &[(&str, &str)]) -> Vec<(String, String)> {
    rows.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// A cron store at `<dir>/cron/jobs.db`, and a second connection to its file.
pub struct Cron {
    pub store: CronStore,
    pub conn: Connection,
}

impl Cron {
    pub fn open(dir: &Path) -> Self {
        let db = dir.join("cron").join("jobs.db");
        let store = CronStore::open(&db).unwrap();
        let conn = Connection::open(&db).unwrap();
        Self { store, conn }
    }
}
