//! The control plane (STATE-11): `data/control_plane.db`, one row per background run (cron
//! now; SOP runs and background delegates later) with its owner (PID + boot ID + the process's
//! start time + its PID namespace, one [`StoredOwner`]), producer kind, start time and state
//! `running | ok | failed | lost | cancelled | timed_out`. Rows of owners that are provably gone
//! (another boot, a dead PID of this boot, a PID of our namespace now held by a process that
//! started at another time, or another PID namespace no process is in any more) are marked
//! `lost` by the reaper the daemon runs at start ([`ControlPlane::reap`]). An owner we cannot
//! judge (another PID namespace, a process we may not inspect) is alive while its heartbeat is
//! fresh: the owning process renews `beat_ms` of its running rows every [`HEARTBEAT`]
//! ([`ControlPlane::heartbeat`], on [`monotonic_ms`]); one older than [`HEARTBEAT_STALE`] is
//! gone. A cancel request is a flag on the row; the owning process acts on it. Read paths
//! ([`ControlPlane::open_existing`]) never create the file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, ToSql, params};
use serde::{Deserialize, Serialize};

use crate::sqlite_util::{OpenError, SharedConn, Sync, alias_column};
use crate::timefmt;

/// Schema version of `control_plane.db` (`PRAGMA user_version`): 1 without the owner's start
/// time, 2 with it and the owner's PID namespace (`owner_start`, `owner_ns`, issue 17).
pub const SCHEMA_VERSION: i64 = 2;

/// How often an owner renews the heartbeat of its running rows (control-plane runs, cron locks).
pub const HEARTBEAT: Duration = Duration::from_secs(30);

/// Age past which a heartbeat no longer vouches for an owner we cannot judge otherwise: three
/// missed beats (a busy disk or a slow tick is not a death).
pub const HEARTBEAT_STALE: Duration = Duration::from_secs(3 * HEARTBEAT.as_secs());

/// [`HEARTBEAT_STALE`] in milliseconds of [`monotonic_ms`].
#[allow(clippy::cast_possible_wrap)] // 90 s
const STALE_MS: i64 = HEARTBEAT_STALE.as_secs() as i64 * 1000;

/// `CLOCK_MONOTONIC` in milliseconds: the clock heartbeats are written and judged on. Wall-clock
/// time would make a live owner look dead after an NTP step forward or a suspend (and a dead one
/// fresh after a step back); this clock does not jump and stops while the machine sleeps. It
/// counts from the boot, the same for every process of the machine: rows are compared only
/// within their owner's boot ([`StoredOwner::boot_id`]). Not covered: a container in its own
/// time namespace (an offset monotonic clock; Docker and Podman do not create one).
pub fn monotonic_ms() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid, exclusively borrowed `ts`;
    // CLOCK_MONOTONIC is always available on Linux (std's `Instant` reads the same clock but
    // does not hand out its value, which a row must store).
    #[allow(unsafe_code)]
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    // time_t and c_long are i32 on 32-bit targets.
    #[allow(clippy::useless_conversion)]
    let ms = i64::from(ts.tv_sec) * 1000 + i64::from(ts.tv_nsec) / 1_000_000;
    ms
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS runs (
    id               TEXT PRIMARY KEY NOT NULL,
    kind             TEXT NOT NULL,
    agent            TEXT NOT NULL,
    label            TEXT NOT NULL,
    owner_pid        INTEGER NOT NULL,
    owner_boot       TEXT NOT NULL,
    owner_start      INTEGER,
    owner_ns         TEXT,
    started_at       TEXT NOT NULL,
    finished_at      TEXT,
    state            TEXT NOT NULL CHECK (state IN
                     ('running', 'ok', 'failed', 'lost', 'cancelled', 'timed_out')),
    heartbeat_at     TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    error            TEXT,
    beat_ms          INTEGER
);
CREATE INDEX IF NOT EXISTS runs_by_state ON runs(state);
CREATE INDEX IF NOT EXISTS runs_by_started ON runs(started_at);
";

/// [`open_owner_store`] with WAL NORMAL: `control_plane.db` and the cron store's `jobs.db`.
/// Every commit survives a process crash (the case the reapers handle); a power loss may roll
/// back the last commits — a registration, a claim or a result then reads as still running and
/// the next boot marks it `lost`, never `ok`. No fsync per run keeps fire-time lateness low.
pub(crate) fn open_with_owner_start(
    path: &Path,
    version: i64,
    schema: &str,
    start_columns: &[(&str, &str, &str)],
) -> Result<SharedConn, OpenError> {
    open_owner_store(path, Sync::Normal, version, schema, start_columns)
}

/// Opens (creating its directory) a store that records owners with their start time for
/// writing: `control_plane.db`, the cron store's `jobs.db` and the SOP store's `runs.db` at
/// schema `version`, of which version 1 knew no start time nor PID namespace.
/// [`warren_config::sqlite::open_migrated`] snapshots an older file first, applies `schema` and
/// adds each `(table, column, type)` of `start_columns` it lacks in place: the rows of version 1
/// keep everything and get no start time nor namespace (NULL: their owners are judged by PID
/// and boot only, as when they were written). A failed migration leaves the file read-only at
/// its old schema, where reads still answer ([`owner_columns`]) and writes say why
/// ([`SharedConn::read_only`]). The error names the file (or its directory); a caller whose
/// error names it too takes [`OpenError::cause`].
pub(crate) fn open_owner_store(
    path: &Path,
    sync: Sync,
    version: i64,
    schema: &str,
    start_columns: &[(&str, &str, &str)],
) -> Result<SharedConn, OpenError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|cause| OpenError::Dir {
            dir: dir.to_path_buf(),
            cause,
        })?;
    }
    let migrate = |conn: &mut Connection| {
        let tx = conn.transaction()?;
        tx.execute_batch(schema)?;
        for (table, column, kind) in start_columns {
            let has = tx
                .prepare("SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2")?
                .exists(params![table, column])?;
            if !has {
                tx.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {kind}"))?;
            }
        }
        tx.commit()
    };
    warren_config::sqlite::open_migrated(path, sync, version, migrate).map_err(|e| {
        OpenError::Sqlite {
            path: path.to_path_buf(),
            cause: warren_config::sqlite::cause_text(&e, path),
        }
    })
}

/// `owner_start, owner_ns` of `table` for a SELECT list, with `NULL` for either column a file
/// of schema 1 lacks (read-only: a read never migrates, and a failed migration leaves it at 1),
/// so read paths still answer and its owners are judged by PID and boot, as when written.
pub(crate) fn owner_columns(conn: &Connection, table: &str) -> rusqlite::Result<String> {
    Ok(owner_column_names(conn, table)?.join(", "))
}

fn owner_column_names(conn: &Connection, table: &str) -> rusqlite::Result<[&'static str; 2]> {
    let has = |column: &'static str| -> rusqlite::Result<&'static str> {
        let has = conn
            .prepare_cached("SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2")?
            .exists(params![table, column])?;
        Ok(if has { column } else { "NULL" })
    };
    Ok([has("owner_start")?, has("owner_ns")?])
}

/// A WHERE condition: the row of `table` (columns `owner_pid`, `owner_boot`, `owner_start`,
/// `owner_ns`) is `owner`'s, the SQL form of [`StoredOwner::is`]. Its parameters, from
/// `?first` on, are the PID, boot, start time and PID namespace of [`Owner::stored`]. The start
/// time and namespace are compared where both the row and the owner have them: a row of schema
/// 1 (NULL) is matched by PID and boot as before; a row of an earlier process that had the same
/// PID (another start time), or of another PID namespace, is not.
pub(crate) fn same_owner(conn: &Connection, table: &str, first: usize) -> rusqlite::Result<String> {
    let [start, ns] = owner_column_names(conn, table)?;
    let [pid, boot, start_p, ns_p] = [first, first + 1, first + 2, first + 3];
    Ok(format!(
        "owner_pid = ?{pid} AND owner_boot = ?{boot} \
         AND ({start} IS NULL OR ?{start_p} IS NULL OR {start} = ?{start_p}) \
         AND ({ns} IS NULL OR ?{ns_p} IS NULL OR {ns} = ?{ns_p})"
    ))
}

/// Sets `set` on the rows of `table` that are `owner`'s ([`same_owner`]) and match `filter`;
/// `set` and `filter` take their parameters from `?5` on (`values`, in order). Returns the
/// rows changed. The renewals (heartbeat, SOP lease) of this very process go through it.
pub(crate) fn update_owned(
    conn: &Connection,
    table: &str,
    set: &str,
    filter: &str,
    owner: &Owner,
    values: &[&dyn ToSql],
) -> rusqlite::Result<usize> {
    let mine = same_owner(conn, table, 1)?;
    let o = owner.stored();
    let mut all: Vec<&dyn ToSql> = vec![&o.pid, &o.boot_id, &o.start, &o.pid_ns];
    all.extend_from_slice(values);
    conn.execute(
        &format!("UPDATE {table} SET {set} WHERE {filter} AND {mine}"),
        all.as_slice(),
    )
}

/// Who runs something: a process of one boot of one machine, as it registers its own rows
/// ([`Owner::current`]). What a row keeps of it, and the one way to judge it later, is
/// [`StoredOwner`] ([`Owner::stored`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Owner {
    pub pid: u32,
    pub boot_id: String,
}

impl Owner {
    /// This process.
    pub fn current() -> Self {
        Self {
            pid: std::process::id(),
            boot_id: boot_id(),
        }
    }

    /// When the process with this owner's PID started ([`process_start`]), if it runs in this
    /// boot. Read while the owner runs (it registers its own rows), this is the owner's.
    pub fn start_time(&self) -> Option<u64> {
        if self.boot_id != boot_id() {
            return None;
        }
        process_start(self.pid)
    }

    /// What a row records of this owner: PID, boot, start time and PID namespace, read while
    /// the owner runs.
    pub fn stored(&self) -> StoredOwner {
        StoredOwner {
            pid: self.pid,
            boot_id: self.boot_id.clone(),
            start: self.start_time(),
            pid_ns: self.pid_namespace(),
        }
    }

    /// The PID namespace of the process with this owner's PID, if it runs in this boot.
    fn pid_namespace(&self) -> Option<String> {
        if self.boot_id != boot_id() {
            None
        } else if self.pid == std::process::id() {
            pid_namespace()
        } else {
            read_namespace(&format!("/proc/{}/ns/pid", self.pid))
        }
    }
}

/// The owner of a stored row (a control-plane run, a cron lock or run, a background delegate's
/// record): the PID alone does not name a process for long — after a crash the kernel may give
/// it to an unrelated process (a container's small PID space, a machine up for months) — so a
/// row also keeps the owner's start time and PID namespace. Every store returns its rows' owner
/// as this type and [`StoredOwner::is_alive`] is the one rule that judges it. Serialized with
/// the rows' column names (`owner_pid`, ...), as `warren runs list --json` and a delegate's
/// result record show them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredOwner {
    #[serde(rename = "owner_pid")]
    pub pid: u32,
    #[serde(rename = "owner_boot")]
    pub boot_id: String,
    /// `/proc/<pid>/stat` field 22 when the row was written; `None` in a row of schema 1.
    #[serde(rename = "owner_start", default)]
    pub start: Option<u64>,
    /// The owner's PID namespace (`readlink /proc/self/ns/pid`, e.g. `pid:[4026531836]`): its
    /// PID means that process only to a reader of the same namespace. `None` in a row of
    /// schema 1, or when it could not be read.
    #[serde(rename = "owner_ns", default)]
    pub pid_ns: Option<String>,
}

impl StoredOwner {
    /// Reads the owner of a row from its four columns at `first`: PID, boot, start, namespace.
    pub(crate) fn from_row(r: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<Self> {
        Ok(Self {
            pid: r.get(first)?,
            boot_id: r.get(first + 1)?,
            start: r.get(first + 2)?,
            pid_ns: r.get(first + 3)?,
        })
    }

    /// Whether `owner` is this row's owner: the same PID and boot and, when both are known, the
    /// same start time (the same PID started at another time is an earlier process) and PID
    /// namespace (the same number in another namespace is another process). [`same_owner`] is
    /// the same rule in SQL.
    pub fn is(&self, owner: &Owner) -> bool {
        fn same<T: PartialEq>(row: Option<&T>, now: Option<T>) -> bool {
            row.zip(now.as_ref()).is_none_or(|(row, now)| row == now)
        }
        self.pid == owner.pid
            && self.boot_id == owner.boot_id
            && same(self.start.as_ref(), owner.start_time())
            && same(self.pid_ns.as_ref(), owner.pid_namespace())
    }

    /// Whether the owner may still run: `false` only when it is provably gone — another boot,
    /// no process with its PID, a process with its PID that started at another time (the PID
    /// was reused), or a PID namespace no process is in any more. A row of another PID
    /// namespace than this process's is never judged by its PID, which names another process
    /// here; the owner is gone only when its namespace is ([`Namespaces`]: a container killed
    /// and restarted runs in a new one, so its old rows are reaped), and may be alive while
    /// any process is in it (a host CLI reading a running container's rows does not steal
    /// them). A row without a start time (schema 1) is judged by PID and boot; one without a
    /// namespace as if it were ours. Without the row's heartbeat, an owner that cannot be
    /// judged counts as alive; [`StoredOwner::is_alive_beating`] bounds that by the heartbeat.
    pub fn is_alive(&self) -> bool {
        // The same rule with no heartbeat: one place decides.
        self.is_alive_beating(None, 0)
    }

    /// [`StoredOwner::is_alive`] of a row whose owner last renewed it at `heartbeat`
    /// ([`monotonic_ms`], `None`: never). An owner that cannot be judged (another PID
    /// namespace, a process we may not inspect) is alive while the heartbeat is younger than
    /// [`HEARTBEAT_STALE`] at `now` ([`monotonic_ms`]), and so is one of a namespace the `/proc`
    /// scan did not find (a sibling container's looks empty from here); a row without a heartbeat (written by a version that did not
    /// beat: rows get one when registered) keeps the rule of [`StoredOwner::is_alive`]. An
    /// owner that is provably gone stays gone whatever its heartbeat says, and one we see
    /// running (our PID namespace, its PID and start time) stays alive.
    pub fn is_alive_beating(&self, heartbeat: Option<i64>, now: i64) -> bool {
        self.alive_seen(heartbeat, now, &mut Namespaces::default())
    }

    /// [`StoredOwner::is_alive_beating`] with the namespaces a pass over several rows has
    /// looked at already (`/proc` is scanned at most once per pass, and only for rows of
    /// another namespace than ours, which are rare).
    pub(crate) fn alive_seen(
        &self,
        heartbeat: Option<i64>,
        now: i64,
        namespaces: &mut Namespaces,
    ) -> bool {
        match self.verdict(namespaces) {
            Verdict::Gone => false,
            Verdict::Alive => true,
            Verdict::CannotTell => heartbeat.is_none_or(|at| now - at < STALE_MS),
            // The scan cannot see a sibling container's namespace, so not finding it proves
            // nothing while the row beats; a dead container's rows stop beating and go stale.
            // A row that never beat (an older version's) keeps the scan's verdict.
            Verdict::NamespaceUnseen => heartbeat.is_some_and(|at| now - at < STALE_MS),
        }
    }

    fn verdict(&self, namespaces: &mut Namespaces) -> Verdict {
        if self.boot_id != boot_id() {
            return Verdict::Gone;
        }
        if let Some(theirs) = &self.pid_ns {
            match pid_namespace() {
                // Our own namespace unreadable: neither can be told apart.
                None => return Verdict::CannotTell,
                Some(ours) if ours != *theirs => {
                    // A process in that namespace proves the namespace is up, not that the
                    // owner (a PID we cannot map) is.
                    return if namespaces.may_be_alive(theirs) {
                        Verdict::CannotTell
                    } else {
                        Verdict::NamespaceUnseen
                    };
                }
                Some(_) => {}
            }
        }
        let Some(started) = self.start else {
            let alive = self.pid == std::process::id()
                || (self.pid != 0 && Path::new(&format!("/proc/{}", self.pid)).exists());
            return if alive { Verdict::Alive } else { Verdict::Gone };
        };
        if self.pid == 0 {
            return Verdict::Gone;
        }
        match std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) {
            Ok(stat) => match parse_start(&stat) {
                Some(now) if now == started => Verdict::Alive,
                Some(_) => Verdict::Gone,
                // Unparsable: the process cannot be told apart, so it may be the owner.
                None => Verdict::CannotTell,
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Verdict::Gone,
            // Unreadable for another reason (permissions, a race with its exit): not provably
            // gone; the next reap looks again.
            Err(_) => Verdict::CannotTell,
        }
    }
}

/// What `/proc` says of a row's owner, before its heartbeat is looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Provably gone: another boot, no such process, its PID held by a process that started
    /// at another time, or a PID namespace no process is in any more.
    Gone,
    /// Seen running: our namespace, its PID, its start time (or a row of schema 1 whose PID
    /// exists).
    Alive,
    /// Neither: another namespace we cannot map its PID into, a process we may not inspect.
    CannotTell,
    /// Another PID namespace in which a complete `/proc` scan found no process. Gone if it is
    /// below ours (a killed container, seen from the host), but a sibling's (a daemon in one
    /// container, a CLI in another on the same install root) is invisible from here too: only
    /// a heartbeat tells them apart, so a row with one is judged by it.
    NamespaceUnseen,
}

/// The PID namespaces this process can see processes in, looked at once per pass of
/// [`StoredOwner::alive_seen`] (a reaper's rows), to judge rows of another PID namespace
/// than ours.
#[derive(Debug, Default)]
pub(crate) struct Namespaces {
    scan: Option<Scan>,
}

/// One look at every process in `/proc`.
#[derive(Debug)]
struct Scan {
    /// `/proc/<n>/ns/pid` of every process whose link could be read.
    live: std::collections::HashSet<String>,
    /// Every process's namespace was read, and `/proc` lists every process.
    complete: bool,
}

/// `readlink` of the machine's first PID namespace (`PROC_PID_INIT_INO`, a kernel constant).
const INIT_PID_NS: &str = "pid:[4026531836]";

impl Namespaces {
    /// Whether a process may still be in PID namespace `ns`, which is not ours. We see the
    /// processes of our namespace and of those below it (a container's, seen from the host),
    /// never of those above: the host's namespace (the machine's first; a host daemon's rows
    /// read by a CLI in a container) counts as alive, and so does any namespace when ours is
    /// nested two deep or more (an unknown ancestor, e.g. Docker in Docker). A namespace in
    /// which we see a process is alive. One in which we see none is gone (a container killed
    /// and restarted) if we saw every process; if a process's namespace could not be read
    /// (EACCES/EPERM: another user's, for a daemon that is not root) or `/proc` hides other
    /// users' processes (`hidepid`), we cannot tell: such a cron lock or control-plane run
    /// stays while its owner's heartbeat is fresh (or, without one, until a reboot or a reap by
    /// a process that can see; an SOP claim is bounded by its lease). A sibling namespace of
    /// ours (a daemon in one container, a CLI in another on the same install root) is invisible
    /// and looks empty: `false` here means gone only for a row without a heartbeat
    /// ([`Verdict::NamespaceUnseen`]). A namespace that may be alive leaves the owner's fate to
    /// its heartbeat ([`StoredOwner::is_alive_beating`]).
    fn may_be_alive(&mut self, ns: &str) -> bool {
        if ns == INIT_PID_NS || !matches!(own_nesting(), Some(0 | 1)) {
            return true;
        }
        let scan = self.scan.get_or_insert_with(scan_namespaces);
        !scan.complete || scan.live.contains(ns)
    }
}

fn scan_namespaces() -> Scan {
    let mut scan = Scan {
        live: Default::default(),
        complete: !proc_hides_processes(),
    };
    let Ok(dir) = std::fs::read_dir("/proc") else {
        scan.complete = false;
        return scan;
    };
    for entry in dir {
        let Ok(entry) = entry else {
            scan.complete = false;
            continue;
        };
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        match std::fs::read_link(entry.path().join("ns/pid")) {
            Ok(target) => {
                scan.live.insert(target.to_string_lossy().into_owned());
            }
            // The process exited meanwhile: it is in no namespace any more.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            // EACCES/EPERM: a process we may not inspect (another user's, or one with
            // capabilities we lack, as an init outside our reach). Its `status` stays readable:
            // with one `NSpid` it is in our namespace, so in none of another row's.
            Err(e)
                if e.kind() == std::io::ErrorKind::PermissionDenied
                    && in_our_namespace(&entry.path()) => {}
            // In a namespace below ours, or unexpected: cannot tell.
            Err(_) => scan.complete = false,
        }
    }
    scan
}

/// Whether the process at `/proc/<n>` is in our PID namespace: its `status` has one `NSpid`
/// (a process in a namespace below ours has one PID per level).
fn in_our_namespace(proc_dir: &Path) -> bool {
    std::fs::read_to_string(proc_dir.join("status")).is_ok_and(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .is_some_and(|pids| pids.split_whitespace().count() == 1)
    })
}

/// How deep this process's PID namespace is below the machine's first (0: it is the first),
/// from the `NSpid` line of `/proc/self/status` (one PID per level); `None` when unreadable.
fn own_nesting() -> Option<usize> {
    static LEVEL: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *LEVEL.get_or_init(|| {
        own_status("NSpid:")?
            .split_whitespace()
            .count()
            .checked_sub(1)
    })
}

/// Whether `/proc` leaves other users' processes out of its listing for us (mounted with
/// `hidepid=2`/`invisible` and we are not root), so not seeing a process proves nothing.
fn proc_hides_processes() -> bool {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return true;
    };
    let hidden = mounts
        .lines()
        .filter(|l| l.split(' ').nth(4) == Some("/proc"))
        .flat_map(|l| l.rsplit(' ').next().unwrap_or("").split(','))
        .filter_map(|option| option.strip_prefix("hidepid="))
        .any(|mode| matches!(mode, "2" | "invisible" | "4" | "ptraceable"));
    // The effective UID is the second of the line.
    let root = own_status("Uid:").is_some_and(|uids| uids.split_whitespace().nth(1) == Some("0"));
    hidden && !root
}

/// The rest of the line of `/proc/self/status` that starts with `key` (`NSpid:`, `Uid:`).
fn own_status(key: &str) -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix(key))?;
    Some(line.to_string())
}

/// This process's PID namespace (`/proc/self/ns/pid`, e.g. `pid:[4026531836]`); `None` when
/// it cannot be read. A process never changes its own PID namespace, so it is read once.
pub fn pid_namespace() -> Option<String> {
    static NS: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    NS.get_or_init(|| read_namespace("/proc/self/ns/pid"))
        .clone()
}

fn read_namespace(link: &str) -> Option<String> {
    std::fs::read_link(link)
        .ok()
        .map(|target| target.to_string_lossy().into_owned())
}

/// The start time of process `pid`: `/proc/<pid>/stat` field 22 (`starttime`, clock ticks after
/// boot). With the boot ID and the PID it names one process. `None` when there is no such
/// process or the file cannot be read.
pub fn process_start(pid: u32) -> Option<u64> {
    if pid == 0 {
        return None;
    }
    parse_start(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Field 22 of a `/proc/<pid>/stat` line. The command name (field 2, in parentheses) may hold
/// spaces and parentheses itself, so the fields are counted after its LAST `)`: field 3 is the
/// first there, field 22 the 20th.
fn parse_start(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

/// `/proc/sys/kernel/random/boot_id` (empty when unreadable: then only the PID decides).
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

#[derive(Debug, thiserror::Error)]
pub enum ControlPlaneError {
    #[error("control plane {path}: {cause}")]
    Db { path: PathBuf, cause: String },
    #[error("no background run '{0}' (see `warren runs list`)")]
    NotFound(String),
    #[error("run '{id}' is already {state}; only running runs can be cancelled")]
    NotRunning { id: String, state: String },
}

/// One background run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRecord {
    pub id: String,
    pub kind: String,
    pub agent: warren_core::AgentAlias,
    pub label: String,
    /// Judge it with [`StoredOwner::is_alive`].
    #[serde(flatten)]
    pub owner: StoredOwner,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub state: String,
    /// When the owner last renewed the row, for people (wall clock); judged is `beat_ms`.
    pub heartbeat_at: Option<String>,
    /// The heartbeat the owner is judged by ([`monotonic_ms`], meaningful in its boot only).
    #[serde(skip)]
    pub beat_ms: Option<i64>,
    pub cancel_requested: bool,
    pub error: Option<String>,
}

impl RunRecord {
    /// Whether the run's owner may still run now, its heartbeat counted
    /// ([`StoredOwner::is_alive_beating`]).
    pub fn owner_alive(&self) -> bool {
        self.owner.is_alive_beating(self.beat_ms, monotonic_ms())
    }
}

/// `data/control_plane.db`.
#[derive(Debug)]
pub struct ControlPlane {
    conn: SharedConn,
}

impl ControlPlane {
    /// Opens (creating) the control plane for writing, at schema 2 ([`open_with_owner_start`]:
    /// version 2 adds `runs.owner_start` and `runs.owner_ns`).
    pub fn open(path: &Path) -> Result<Self, ControlPlaneError> {
        let conn = open_with_owner_start(
            path,
            SCHEMA_VERSION,
            SCHEMA,
            &[
                ("runs", "owner_start", "INTEGER"),
                ("runs", "owner_ns", "TEXT"),
                ("runs", "beat_ms", "INTEGER"),
            ],
        )
        .map_err(|e| ControlPlaneError::Db {
            path: path.to_path_buf(),
            cause: e.cause(),
        })?;
        Ok(Self { conn })
    }

    /// Opens an existing control plane read-only; `None` when there is none yet.
    pub fn open_existing(path: &Path) -> Result<Option<Self>, ControlPlaneError> {
        let conn = SharedConn::open_existing(path).map_err(|e| ControlPlaneError::Db {
            path: path.to_path_buf(),
            cause: e.cause(),
        })?;
        Ok(conn.map(|conn| Self { conn }))
    }

    /// A SQLite error on this store; a full disk reads "disk full at <dir>" (issue 15 §8).
    fn err(&self, e: rusqlite::Error) -> ControlPlaneError {
        ControlPlaneError::Db {
            path: self.conn.path().to_path_buf(),
            cause: warren_config::sqlite::cause_text(&e, self.conn.path()),
        }
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn.lock()
    }

    /// Why this handle is read-only (a migration left the file at its old schema), `None` when
    /// it is writable: a long-lived holder (the heartbeat task) reopens such a handle later.
    pub fn read_only(&self) -> Option<&str> {
        self.conn.read_only()
    }

    /// Refuses a write to a store left read-only at schema 1 by a failed migration, with why
    /// (its statements name `owner_start` / `owner_ns`, which SQLite would report as missing
    /// columns).
    fn writable(&self) -> Result<(), ControlPlaneError> {
        match self.conn.read_only() {
            None => Ok(()),
            Some(why) => Err(ControlPlaneError::Db {
                path: self.conn.path().to_path_buf(),
                cause: why.to_string(),
            }),
        }
    }

    /// Registers a running run of `owner`.
    pub fn register(
        &self,
        id: &str,
        kind: &str,
        agent: &str,
        label: &str,
        owner: &Owner,
    ) -> Result<(), ControlPlaneError> {
        self.insert_running(id, kind, agent, label, owner, "")
    }

    /// Registers `id` for `owner` as running again, or anew: a run another process continues
    /// after its owner died (an SOP run restored at start; the reaper had marked it `lost`).
    pub fn resume(
        &self,
        id: &str,
        kind: &str,
        agent: &str,
        label: &str,
        owner: &Owner,
    ) -> Result<(), ControlPlaneError> {
        self.insert_running(
            id,
            kind,
            agent,
            label,
            owner,
            "ON CONFLICT (id) DO UPDATE SET state = 'running', owner_pid = ?5,
                 owner_boot = ?6, owner_start = ?8, owner_ns = ?9, finished_at = NULL,
                 error = NULL, cancel_requested = 0, heartbeat_at = ?7, beat_ms = ?10",
        )
    }

    /// Inserts a `running` row of `owner`, its heartbeat set to now (a process killed before
    /// its first beat leaves a row that goes stale, not one judged by the rule without a
    /// heartbeat); `on_conflict` says what an existing `id` becomes (empty: an existing id is
    /// an error; a resumed row's heartbeat must be reset too, not keep the dead owner's).
    fn insert_running(
        &self,
        id: &str,
        kind: &str,
        agent: &str,
        label: &str,
        owner: &Owner,
        on_conflict: &str,
    ) -> Result<(), ControlPlaneError> {
        self.writable()?;
        let owner = owner.stored();
        self.conn()
            .execute(
                &format!(
                    "INSERT INTO runs (id, kind, agent, label, owner_pid, owner_boot, started_at,
                     state, owner_start, owner_ns, heartbeat_at, beat_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'running', ?8, ?9, ?7, ?10)
                     {on_conflict}"
                ),
                params![
                    id,
                    kind,
                    agent,
                    label,
                    owner.pid,
                    owner.boot_id,
                    timefmt::format(timefmt::now()),
                    owner.start,
                    owner.pid_ns,
                    monotonic_ms()
                ],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Ends a running run with `state` (a run already ended keeps its state).
    pub fn finish(
        &self,
        id: &str,
        state: &str,
        error: Option<&str>,
    ) -> Result<(), ControlPlaneError> {
        self.conn()
            .execute(
                "UPDATE runs SET state = ?2, error = ?3, finished_at = ?4
                 WHERE id = ?1 AND state = 'running'",
                params![id, state, error, timefmt::format(timefmt::now())],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Asks the owner to cancel `id`.
    pub fn request_cancel(&self, id: &str) -> Result<RunRecord, ControlPlaneError> {
        let run = self
            .get(id)?
            .ok_or_else(|| ControlPlaneError::NotFound(id.into()))?;
        if run.state != "running" {
            return Err(ControlPlaneError::NotRunning {
                id: id.into(),
                state: run.state,
            });
        }
        self.conn()
            .execute(
                "UPDATE runs SET cancel_requested = 1 WHERE id = ?1",
                params![id],
            )
            .map_err(|e| self.err(e))?;
        Ok(RunRecord {
            cancel_requested: true,
            ..run
        })
    }

    /// Running runs of `owner` with a cancel request: rows of this very process
    /// ([`same_owner`]), not of an earlier one that had its PID (a crashed daemon's run keeps
    /// its request until the reaper marks it `lost`).
    pub fn cancel_requests(&self, owner: &Owner) -> Result<Vec<String>, ControlPlaneError> {
        let conn = self.conn();
        let mine = same_owner(&conn, "runs", 1).map_err(|e| self.err(e))?;
        let mut stmt = conn
            .prepare(&format!(
                "SELECT id FROM runs WHERE state = 'running' AND cancel_requested = 1 AND {mine}"
            ))
            .map_err(|e| self.err(e))?;
        let o = owner.stored();
        let rows = stmt
            .query_map(params![o.pid, o.boot_id, o.start, o.pid_ns], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<String>, _>>()
            .map_err(|e| self.err(e))
    }

    pub fn get(&self, id: &str) -> Result<Option<RunRecord>, ControlPlaneError> {
        let conn = self.conn();
        let columns = columns(&conn).map_err(|e| self.err(e))?;
        conn.query_row(
            &format!("SELECT {columns} FROM runs WHERE id = ?1"),
            params![id],
            row,
        )
        .optional()
        .map_err(|e| self.err(e))
    }

    /// The newest runs first, of `agent` if given.
    pub fn list(
        &self,
        agent: Option<&str>,
        limit: u32,
    ) -> Result<Vec<RunRecord>, ControlPlaneError> {
        let conn = self.conn();
        let columns = columns(&conn).map_err(|e| self.err(e))?;
        let mut stmt = conn
            .prepare(&format!(
                "SELECT {columns} FROM runs WHERE (?1 IS NULL OR agent = ?1)
                 ORDER BY started_at DESC, id LIMIT ?2"
            ))
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![agent, limit], row)
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    /// Marks `lost` every running row whose owner is provably gone; returns their ids.
    pub fn reap(&self) -> Result<Vec<String>, ControlPlaneError> {
        self.reap_with(Reaper::Anytime)
    }

    /// [`ControlPlane::reap`] at daemon start, before this process registered any run: a row
    /// owned by this very PID in this boot is an earlier process's that had the same PID (a
    /// container's PID 1 restarted), so it is gone too.
    pub fn reap_at_start(&self) -> Result<Vec<String>, ControlPlaneError> {
        self.reap_with(Reaper::AtStart)
    }

    fn reap_with(&self, reaper: Reaper) -> Result<Vec<String>, ControlPlaneError> {
        self.writable()?;
        let lost = gone_owners(
            &self.conn(),
            "SELECT id, owner_pid, owner_boot, owner_start, owner_ns, beat_ms FROM runs
             WHERE state = 'running'",
            reaper,
            monotonic_ms(),
        )
        .map_err(|e| self.err(e))?;
        for id in &lost {
            self.finish(id, "lost", Some("its owner process exited during the run"))?;
        }
        Ok(lost)
    }

    /// Renews the heartbeat of `owner`'s running rows to now (`beat_ms`, [`monotonic_ms`], and
    /// `heartbeat_at` for people), in one UPDATE: rows of this very process ([`same_owner`]),
    /// never an earlier one's that had its PID, whose heartbeat must age. The owning process
    /// calls it every [`HEARTBEAT`]; returns the rows renewed.
    pub fn heartbeat(&self, owner: &Owner) -> Result<usize, ControlPlaneError> {
        self.writable()?;
        update_owned(
            &self.conn(),
            "runs",
            "heartbeat_at = ?5, beat_ms = ?6",
            "state = 'running'",
            owner,
            params![timefmt::format(timefmt::now()), monotonic_ms()],
        )
        .map_err(|e| self.err(e))
    }

    /// Repoints every row of agent `from` to `to` (LIFE-3).
    pub fn rename_agent(&self, from: &str, to: &str) -> Result<usize, ControlPlaneError> {
        self.conn()
            .execute(
                "UPDATE runs SET agent = ?2 WHERE agent = ?1",
                params![from, to],
            )
            .map_err(|e| self.err(e))
    }

    /// Removes every ended row of `agent` (LIFE-4; the cron store archives the runs).
    pub fn delete_agent(&self, agent: &str) -> Result<usize, ControlPlaneError> {
        self.conn()
            .execute(
                "DELETE FROM runs WHERE agent = ?1 AND state != 'running'",
                params![agent],
            )
            .map_err(|e| self.err(e))
    }
}

/// The columns [`row`] reads (NULL for the owner's start and namespace in a file of schema 1,
/// [`owner_columns`], and for its `beat_ms`).
fn columns(conn: &Connection) -> rusqlite::Result<String> {
    let owner = owner_columns(conn, "runs")?;
    let beat = if conn
        .prepare_cached("SELECT 1 FROM pragma_table_info('runs') WHERE name = 'beat_ms'")?
        .exists([])?
    {
        "beat_ms"
    } else {
        "NULL"
    };
    Ok(format!(
        "id, kind, agent, label, owner_pid, owner_boot, {owner}, started_at, finished_at, state, \
         heartbeat_at, cancel_requested, error, {beat}"
    ))
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunRecord> {
    Ok(RunRecord {
        id: r.get(0)?,
        kind: r.get(1)?,
        agent: alias_column(r, 2)?,
        label: r.get(3)?,
        owner: StoredOwner::from_row(r, 4)?,
        started_at: r.get(8)?,
        finished_at: r.get(9)?,
        state: r.get(10)?,
        heartbeat_at: r.get(11)?,
        cancel_requested: r.get(12)?,
        error: r.get(13)?,
        beat_ms: r.get(14)?,
    })
}

/// When a reaper runs: any time (this process may own running rows), or at the start of a
/// process that owns none yet (a row of its own PID and boot is an earlier process's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reaper {
    Anytime,
    AtStart,
}

/// The ids of the rows `sql` selects as `(id, owner_pid, owner_boot, owner_start, owner_ns,
/// heartbeat)` whose owner is gone ([`StoredOwner::is_alive_beating`] at `now`; the reapers of
/// the control plane and the cron store). At start ([`Reaper::AtStart`]) a row of this very
/// process is an earlier one's too.
pub(crate) fn gone_owners(
    conn: &Connection,
    sql: &str,
    reaper: Reaper,
    now: i64,
) -> rusqlite::Result<Vec<String>> {
    let me = Owner::current();
    let mut namespaces = Namespaces::default();
    let mut stmt = conn.prepare(sql)?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            StoredOwner::from_row(r, 1)?,
            r.get::<_, Option<i64>>(5)?,
        ))
    })?;
    let mut gone = Vec::new();
    for row in rows {
        let (id, owner, heartbeat) = row?;
        if (reaper == Reaper::AtStart && owner.is(&me))
            || !owner.alive_seen(heartbeat, now, &mut namespaces)
        {
            gone.push(id);
        }
    }
    Ok(gone)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_time_is_field_22_counted_after_the_last_parenthesis_of_the_command_name() {
        // A command name may hold spaces and parentheses: `x) 1 2 (y`.
        let fields: Vec<String> = (3..=52).map(|n| format!("{n}")).collect();
        let stat = format!("4242 (x) 1 2 (y) {}\n", fields.join(" "));
        assert_eq!(parse_start(&stat), Some(22));
        assert_eq!(parse_start("4242 (sleep) S 1"), None, "a cut-off line");
        assert_eq!(parse_start("no parenthesis"), None);
        assert!(process_start(std::process::id()).is_some());
    }

    #[test]
    fn runs_of_a_gone_owner_are_reaped_as_lost_and_live_ones_stay()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("control_plane.db");
        assert!(ControlPlane::open_existing(&path)?.is_none());
        assert!(!path.exists(), "a read path never creates the file");
        let cp = ControlPlane::open(&path)?;
        let me = Owner::current();
        let other_boot = Owner {
            pid: me.pid,
            boot_id: "00000000-0000-0000-0000-000000000000".into(),
        };
        cp.register("a", "cron", "main", "cron:a", &me)?;
        cp.register("b", "cron", "main", "cron:b", &other_boot)?;
        assert_eq!(cp.reap()?, vec!["b".to_string()]);
        let a = cp.get("a")?.map(|r| r.state);
        assert_eq!(a.as_deref(), Some("running"));
        assert_eq!(cp.get("b")?.map(|r| r.state).as_deref(), Some("lost"));
        cp.request_cancel("a")?;
        assert_eq!(cp.cancel_requests(&me)?, vec!["a".to_string()]);
        cp.finish("a", "cancelled", None)?;
        assert!(matches!(
            cp.request_cancel("a"),
            Err(ControlPlaneError::NotRunning { .. })
        ));
        assert_eq!(cp.list(Some("main"), 10)?.len(), 2);
        Ok(())
    }

    #[test]
    fn at_start_a_row_of_this_pid_is_an_earlier_process_and_lost()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let cp = ControlPlane::open(&dir.path().join("control_plane.db"))?;
        // A daemon that is PID 1 of a container, killed and started again: same PID, same boot.
        cp.register("a", "cron", "main", "cron:a", &Owner::current())?;
        assert!(
            cp.reap()?.is_empty(),
            "any time, this process's row is live"
        );
        assert_eq!(cp.reap_at_start()?, vec!["a".to_string()]);
        assert_eq!(cp.get("a")?.map(|r| r.state).as_deref(), Some("lost"));
        Ok(())
    }
}
