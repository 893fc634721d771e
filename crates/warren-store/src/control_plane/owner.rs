//! Who owns a background run (issue 17): [`Owner`], the process registering its rows, and
//! [`StoredOwner`], what a row keeps of it and the one way to judge later whether it is gone
//! (another boot, a dead PID, a PID of our namespace now held by a process that started at
//! another time, a PID namespace no process is in any more) or cannot be judged (then its
//! heartbeat decides). Process identity read from `/proc`: [`process_start`],
//! [`pid_namespace`], [`boot_id`].

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::STALE_MS;

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
    /// namespace (the same number in another namespace is another process).
    /// [`same_owner`](super::same_owner) is the same rule in SQL.
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
    /// ([`monotonic_ms`](super::monotonic_ms), `None`: never). An owner that cannot be judged
    /// (another PID namespace, a process we may not inspect) is alive while the heartbeat is
    /// younger than [`HEARTBEAT_STALE`](super::HEARTBEAT_STALE) at `now`, and so is one of a
    /// namespace the `/proc` scan did not find (a sibling container's looks empty from here); a
    /// row without a heartbeat (written by a version that did not beat: rows get one when
    /// registered) keeps the rule of [`StoredOwner::is_alive`]. An
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
}
