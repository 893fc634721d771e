//! `max_actions_per_hour` (PERM-2, issue 14 §4): every tool execution of an agent takes a slot
//! in its one-hour sliding window, kept in `data/state/actions.db` and so shared by every
//! process of the install root: the daemon (across its reloads, and every entry point it
//! serves: the gateway's chats, ACP, cron and SOP turns, the tool calls cron command jobs and
//! SOP tool steps run without a turn) and each `warren agent` run beside it or after it. The
//! limit is read from the agent's `SecurityPolicy` only, so a subagent, whose policy `narrow`
//! capped at its parent's, counts in the same window under a limit no higher than the parent's.
//!
//! The file is opened through the one open routine (`warren_config::sqlite`, schema version 1),
//! lazily at the first admission and once per process (a failed open is retried at the next
//! call). One admission is one `BEGIN IMMEDIATE` transaction: drop the agent's actions older
//! than the hour, count, insert when under the limit, commit; times are wall-clock
//! milliseconds, which every process shares. If the file cannot be opened or written (a
//! read-only directory, a full disk) the call is refused (fail closed), naming the file and the
//! cause.
//!
//! Leases: an agent calling tools in quick succession under a high limit claims several slots
//! per transaction and uses them from memory. A lease is at most [`MAX_LEASE`] slots and at
//! most 1/[`LEASE_SHARE`] of the limit (so under 512 actions per hour, the default 120 too,
//! every call is its own transaction, as without leases), it grows by doubling only while each
//! lease is used up within [`LEASE_MS`] of its claim, and its slots are usable only until then.
//! Its rows carry that end time, never the claim time, so every action stays in the window at
//! least an hour after it ran: a lease never admits more than the limit. Slots a lease did not
//! use go back at the process's next claim for the agent, at rename and delete, and when the
//! window is dropped; a process killed with a lease open leaves them counted until the hour
//! ends (fewer than 1/256 of the limit). Other processes therefore may be refused up to that
//! many actions early, never late.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use warren_config::InstallRoot;
use warren_config::sqlite::rusqlite::{self, Connection, OptionalExtension, TransactionBehavior};
use warren_config::sqlite::{SharedConn, Sync, cause_text};
use warren_core::AgentAlias;

/// The window's length.
pub const WINDOW: Duration = Duration::from_secs(3600);

const WINDOW_MS: i64 = 3_600_000;

/// A lease's slots are usable for this long after its claim (see the module docs).
pub const LEASE_MS: i64 = 1_000;
/// The most slots one lease claims.
pub const MAX_LEASE: u32 = 32;
/// A lease claims at most this fraction of the limit (1/256).
pub const LEASE_SHARE: u32 = 256;

/// The window's tables: one row per admitted action, and each agent's number of rows (kept in
/// the same transactions, so an admission never counts the rows: its cost does not grow with
/// the limit or the hour's actions).
const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS actions (agent TEXT NOT NULL, at_ms INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS actions_by_agent ON actions (agent, at_ms);
CREATE TABLE IF NOT EXISTS action_counts (agent TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;";

/// Sets `agent`'s row count from its rows (after a rename, purge or restore).
const RECOUNT: &str = "INSERT OR REPLACE INTO action_counts (agent, n) SELECT ?1, count(*) FROM actions WHERE agent = ?1";

/// `data/state/actions.db`: the `max_actions_per_hour` windows of every agent of `root`.
pub fn actions_db(root: &InstallRoot) -> PathBuf {
    root.state_dir().join("actions.db")
}

/// A call refused because the agent used its actions for the hour, or because the window's
/// file could not be read or written (`unavailable`: the call is refused then too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionLimited {
    pub agent: AgentAlias,
    pub limit: u32,
    /// Until the oldest action in the window leaves it (zero when `unavailable`).
    pub resets_in: Duration,
    /// The window's file and why it could not be used, when that is the reason.
    pub unavailable: Option<ActionWindowError>,
}

/// The window's file (`data/state/actions.db`) could not be opened, read or written: the file
/// and the cause (a full disk is named as one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {cause}", path.display())]
pub struct ActionWindowError {
    pub path: PathBuf,
    pub cause: String,
}

impl std::fmt::Display for ActionLimited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.unavailable {
            None => write!(
                f,
                "agent '{}' reached max_actions_per_hour = {} (its risk profile); the next tool call is possible in {} (the window frees its oldest action then)",
                self.agent,
                self.limit,
                human(self.resets_in)
            ),
            Some(cause) => write!(
                f,
                "agent '{}': the max_actions_per_hour window cannot be checked, so the tool call is refused: {cause}",
                self.agent
            ),
        }
    }
}

impl std::error::Error for ActionLimited {}

fn human(d: Duration) -> String {
    let secs = d.as_secs().max(1);
    match (secs / 60, secs % 60) {
        (0, s) => format!("{s}s"),
        (m, s) => format!("{m}m {s}s"),
    }
}

/// Each agent's tool executions of the last hour, in the install root's `actions.db`.
#[derive(Debug)]
pub struct ActionWindow {
    path: PathBuf,
    /// Opened at the first admission.
    conn: Mutex<Option<SharedConn>>,
    /// This process's open lease of each agent (locked before `conn`, never after).
    leases: Mutex<HashMap<AgentAlias, Lease>>,
}

/// Slots of one agent claimed together (see the module docs).
#[derive(Debug, Clone, Copy, Default)]
struct Lease {
    /// The `at_ms` of the claimed rows.
    stamp: i64,
    /// The slots are usable until then (the claim time + [`LEASE_MS`]).
    until: i64,
    /// Claimed slots not used yet.
    left: u32,
    /// How many the claim took.
    size: u32,
    /// The limit they were claimed under.
    limit: u32,
}

impl Lease {
    /// The size of the next claim under `limit` at `now`: double the last one when it was used
    /// up in its time, else one.
    fn next_size(&self, limit: u32, now: i64) -> u32 {
        let cap = (limit / LEASE_SHARE).clamp(1, MAX_LEASE);
        let busy = self.left == 0 && self.limit == limit && now < self.until;
        if busy {
            (self.size * 2).clamp(1, cap)
        } else {
            1
        }
    }

    /// The claimed slots to give back: (the rows' stamp, how many).
    fn unused(&self) -> Option<(i64, u32)> {
        (self.left > 0).then_some((self.stamp, self.left))
    }
}

impl ActionWindow {
    /// The window of `root` (nothing is opened yet).
    pub fn open(root: &InstallRoot) -> Self {
        Self {
            path: actions_db(root),
            conn: Mutex::new(None),
            leases: Mutex::new(HashMap::new()),
        }
    }

    fn leases(&self) -> MutexGuard<'_, HashMap<AgentAlias, Lease>> {
        self.leases.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn conn(&self) -> Result<SharedConn, ActionWindowError> {
        let mut slot = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(conn) = slot.as_ref() {
            return Ok(conn.clone());
        }
        // WAL with synchronous = NORMAL: no fsync per admission. A commit survives a process
        // crash; a power loss may lose the last second of the window, which for a rate limit
        // only lets those few actions count again.
        let conn = SharedConn::open_store(&self.path, Sync::Normal, SCHEMA).map_err(|e| {
            ActionWindowError {
                path: self.path.clone(),
                cause: e.cause(),
            }
        })?;
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Takes a slot for one action of `agent` under `limit`, or says when one frees.
    ///
    /// From the agent's open lease when it has a slot left in its time (no I/O), else through a
    /// claim. The claim's transaction runs on the caller's thread, an async worker too: it
    /// takes about 10 µs and waits only while another process holds the file's write lock for
    /// a claim of its own (microseconds). On the blocking pool (`SharedConn::run`) it cost
    /// about 55 µs more per tool call in `turn_loop`'s script run (67.5× instead of 16.7×,
    /// before leases), so it stays here.
    pub fn admit(&self, agent: &AgentAlias, limit: u32) -> Result<(), ActionLimited> {
        self.admit_at(agent, limit, now_ms())
    }

    fn admit_at(&self, agent: &AgentAlias, limit: u32, now: i64) -> Result<(), ActionLimited> {
        // Opened (at the first call: created, migrated) before the leases are locked, so that
        // never holds up another agent's admission from its lease.
        let conn = self
            .conn()
            .map_err(|cause| unavailable(agent, limit, cause))?;
        let mut leases = self.leases();
        let lease = leases.get(agent).copied().unwrap_or_default();
        if lease.left > 0 && lease.limit == limit && now < lease.until {
            if let Some(l) = leases.get_mut(agent) {
                l.left -= 1;
            }
            return Ok(());
        }
        let size = lease.next_size(limit, now);
        // One slot is used at once and recorded at its time; a lease's rows carry its end.
        let stamp = if size > 1 { now + LEASE_MS } else { now };
        let claim = Claim {
            agent: agent.as_str(),
            limit,
            now,
            give_back: lease.unused(),
            size,
            stamp,
        };
        let granted = claim_tx(&mut conn.lock(), &claim)
            .map_err(|e| unavailable(agent, limit, self.db_error(&e)))?;
        let next = match granted {
            Ok(n) => Lease {
                stamp,
                until: now + LEASE_MS,
                left: n - 1,
                size: n,
                limit,
            },
            Err(_) => Lease::default(),
        };
        match leases.get_mut(agent) {
            Some(l) => *l = next,
            None => {
                leases.insert(agent.clone(), next);
            }
        }
        decide(agent, limit, now, granted.err())
    }

    /// Actions of `agent` in the window now; `Ok(0)` when there is no file yet.
    pub fn count(&self, agent: &AgentAlias) -> Result<u64, ActionWindowError> {
        self.rows(agent).map(|r| r.len() as u64)
    }

    /// The times (unix ms) of `agent`'s actions in the window now, oldest first.
    pub fn rows(&self, agent: &AgentAlias) -> Result<Vec<i64>, ActionWindowError> {
        self.with_existing(|c| {
            let mut st = c.prepare(
                "SELECT at_ms FROM actions WHERE agent = ?1 AND at_ms > ?2 ORDER BY at_ms",
            )?;
            st.query_map((agent.as_str(), now_ms() - WINDOW_MS), |r| r.get(0))?
                .collect()
        })
        .map(Option::unwrap_or_default)
    }

    /// Deletes every action of `agent` (agent delete); returns how many.
    pub fn purge(&self, agent: &AgentAlias) -> Result<u64, ActionWindowError> {
        self.leases().remove(agent);
        self.with_existing(|c| {
            let tx = c.unchecked_transaction()?;
            let n = tx.execute("DELETE FROM actions WHERE agent = ?1", [agent.as_str()])?;
            tx.execute(
                "DELETE FROM action_counts WHERE agent = ?1",
                [agent.as_str()],
            )?;
            tx.commit()?;
            Ok(n)
        })
        .map(|n| n.unwrap_or(0) as u64)
    }

    /// Moves `from`'s actions to `to` (agent rename): the new alias keeps the hour's count.
    pub fn rename(&self, from: &AgentAlias, to: &AgentAlias) -> Result<u64, ActionWindowError> {
        self.give_back(from);
        self.with_existing(|c| {
            let tx = c.unchecked_transaction()?;
            let n = tx.execute(
                "UPDATE actions SET agent = ?2 WHERE agent = ?1",
                (from.as_str(), to.as_str()),
            )?;
            tx.execute(
                "DELETE FROM action_counts WHERE agent = ?1",
                [from.as_str()],
            )?;
            tx.execute(RECOUNT, [to.as_str()])?;
            tx.commit()?;
            Ok(n)
        })
        .map(|n| n.unwrap_or(0) as u64)
    }

    /// Puts actions of `agent` (unix ms) back, those still in the window (agent restore);
    /// returns how many.
    pub fn restore(&self, agent: &AgentAlias, at_ms: &[i64]) -> Result<u64, ActionWindowError> {
        let since = now_ms() - WINDOW_MS;
        let keep: Vec<i64> = at_ms.iter().copied().filter(|t| *t > since).collect();
        if keep.is_empty() {
            return Ok(0);
        }
        // Rows of one lease share their time: restore each time's number of rows, less those
        // already there (a repeated restore adds nothing).
        let mut per_time = std::collections::BTreeMap::<i64, i64>::new();
        for t in keep {
            *per_time.entry(t).or_default() += 1;
        }
        let conn = self.conn()?;
        let mut conn = conn.lock();
        let run = |c: &mut Connection| -> rusqlite::Result<u64> {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let mut n = 0;
            for (t, want) in &per_time {
                let there: i64 = tx
                    .prepare_cached("SELECT count(*) FROM actions WHERE agent = ?1 AND at_ms = ?2")?
                    .query_row((agent.as_str(), t), |r| r.get(0))?;
                n += insert_rows(&tx, agent.as_str(), *t, want - there)?;
            }
            tx.execute(RECOUNT, [agent.as_str()])?;
            tx.commit()?;
            Ok(n)
        };
        run(&mut conn).map_err(|e| self.db_error(&e))
    }

    /// Returns the unused slots of `agent`'s lease to the window (best effort: slots that
    /// cannot be returned stay counted until their hour ends, the safe side).
    fn give_back(&self, agent: &AgentAlias) {
        let lease = self.leases().remove(agent);
        if let Some((stamp, n)) = lease.and_then(|l| l.unused()) {
            let returned = self.with_existing(|c| {
                let tx = c.unchecked_transaction()?;
                give_back_tx(&tx, agent.as_str(), stamp, n)?;
                tx.commit()
            });
            if let Err(error) = returned {
                tracing::warn!(%agent, %error, "returning unused max_actions_per_hour slots");
            }
        }
    }

    /// `f` on the window's connection; `None` when there is no file yet (nothing to change).
    fn with_existing<T>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<Option<T>, ActionWindowError> {
        if !self.path.exists() {
            return Ok(None);
        }
        let conn = self.conn()?;
        let conn = conn.lock();
        f(&conn).map(Some).map_err(|e| self.db_error(&e))
    }

    /// A database error of the window's file, naming it.
    fn db_error(&self, e: &rusqlite::Error) -> ActionWindowError {
        ActionWindowError {
            path: self.path.clone(),
            cause: cause_text(e, &self.path),
        }
    }
}

impl Drop for ActionWindow {
    /// Returns every open lease's unused slots.
    fn drop(&mut self) {
        let agents: Vec<AgentAlias> = self.leases().keys().cloned().collect();
        for agent in agents {
            self.give_back(&agent);
        }
    }
}

/// One claim of `size` slots (see [`claim_tx`]).
struct Claim<'a> {
    agent: &'a str,
    limit: u32,
    now: i64,
    /// The previous lease's unused slots, returned first: (their stamp, how many).
    give_back: Option<(i64, u32)>,
    size: u32,
    /// The `at_ms` of the claimed rows.
    stamp: i64,
}

/// One claim, one `BEGIN IMMEDIATE` transaction (the write lock first, so two processes never
/// both count the same free slot): `Ok(n)` slots granted (1..=size, as many as are free), else
/// `Err` with the oldest action's time.
fn claim_tx(conn: &mut Connection, c: &Claim<'_>) -> rusqlite::Result<Result<u32, i64>> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    if let Some((stamp, n)) = c.give_back {
        give_back_tx(&tx, c.agent, stamp, n)?;
    }
    let expired = tx
        .prepare_cached("DELETE FROM actions WHERE agent = ?1 AND at_ms <= ?2")?
        .execute((c.agent, c.now - WINDOW_MS))?;
    uncount(&tx, c.agent, expired)?;
    let used: i64 = tx
        .prepare_cached("SELECT n FROM action_counts WHERE agent = ?1")?
        .query_row([c.agent], |r| r.get(0))
        .optional()?
        .unwrap_or(0);
    let free = i64::from(c.limit) - used;
    if free <= 0 {
        let oldest: Option<i64> = tx
            .prepare_cached("SELECT min(at_ms) FROM actions WHERE agent = ?1")?
            .query_row([c.agent], |r| r.get(0))?;
        tx.commit()?;
        return Ok(Err(oldest.unwrap_or(c.now)));
    }
    let n = insert_rows(&tx, c.agent, c.stamp, i64::from(c.size).min(free))?;
    tx.commit()?;
    Ok(Ok(u32::try_from(n).unwrap_or(1)))
}

/// Inserts `n` rows of `agent` at `at` (none when `n` <= 0) and counts them; returns `n`.
fn insert_rows(
    tx: &rusqlite::Transaction<'_>,
    agent: &str,
    at: i64,
    n: i64,
) -> rusqlite::Result<u64> {
    if n <= 0 {
        return Ok(0);
    }
    tx.prepare_cached(
        "WITH RECURSIVE slot(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM slot WHERE i < ?3)
         INSERT INTO actions (agent, at_ms) SELECT ?1, ?2 FROM slot",
    )?
    .execute((agent, at, n))?;
    tx.prepare_cached(
        "INSERT INTO action_counts (agent, n) VALUES (?1, ?2) ON CONFLICT (agent) DO UPDATE SET n = n + ?2",
    )?
    .execute((agent, n))?;
    Ok(n as u64)
}

/// Takes `gone` deleted rows off `agent`'s count.
fn uncount(tx: &rusqlite::Transaction<'_>, agent: &str, gone: usize) -> rusqlite::Result<()> {
    if gone > 0 {
        tx.prepare_cached("UPDATE action_counts SET n = max(n - ?2, 0) WHERE agent = ?1")?
            .execute((agent, gone as i64))?;
    }
    Ok(())
}

/// Deletes `n` of `agent`'s rows stamped `stamp` (a lease's unused slots) inside a transaction.
fn give_back_tx(
    tx: &rusqlite::Transaction<'_>,
    agent: &str,
    stamp: i64,
    n: u32,
) -> rusqlite::Result<()> {
    let gone = tx
        .prepare_cached(
            "DELETE FROM actions WHERE rowid IN (SELECT rowid FROM actions WHERE agent = ?1 AND at_ms = ?2 LIMIT ?3)",
        )?
        .execute((agent, stamp, n))?;
    uncount(tx, agent, gone)
}

/// A call refused because the window's file could not be used.
fn unavailable(agent: &AgentAlias, limit: u32, cause: ActionWindowError) -> ActionLimited {
    ActionLimited {
        agent: agent.clone(),
        limit,
        resets_in: Duration::ZERO,
        unavailable: Some(cause),
    }
}

/// The outcome of an admission: `oldest` is the window's oldest action when it was full.
fn decide(
    agent: &AgentAlias,
    limit: u32,
    now: i64,
    oldest: Option<i64>,
) -> Result<(), ActionLimited> {
    match oldest {
        None => Ok(()),
        Some(oldest) => Err(ActionLimited {
            agent: agent.clone(),
            limit,
            resets_in: Duration::from_millis((oldest + WINDOW_MS - now).clamp(0, WINDOW_MS) as u64),
            unavailable: None,
        }),
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alias(s: &str) -> AgentAlias {
        AgentAlias::new(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_n_plus_first_action_waits_for_the_oldest_to_leave_the_window() {
        let dir = tempfile::tempdir().unwrap();
        let root = InstallRoot::at(dir.path());
        let w = ActionWindow::open(&root);
        let a = alias("ada");
        let t0 = now_ms();
        for i in 0..3 {
            w.admit_at(&a, 3, t0 + i * 60_000)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let refused = w
            .admit_at(&a, 3, t0 + 600_000)
            .expect_err("the fourth action in the hour");
        assert_eq!(refused.limit, 3);
        assert_eq!(refused.resets_in, Duration::from_secs(3000));
        assert!(refused.to_string().contains("max_actions_per_hour = 3"));
        assert!(refused.to_string().contains("50m 0s"), "{refused}");
        // An hour after the first action, its slot is free again (the window resets).
        w.admit_at(&a, 3, t0 + WINDOW_MS)
            .unwrap_or_else(|e| panic!("{e}"));
        // Other agents have their own window.
        let b = alias("bee");
        w.admit_at(&b, 1, t0).unwrap_or_else(|e| panic!("{e}"));
        // The file is the install root's, private.
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(actions_db(&root))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    /// Two windows on one install root (two processes' connections) share the count: what one
    /// admitted, the other refuses beyond the limit.
    #[test]
    fn windows_on_one_install_root_share_the_count() {
        let dir = tempfile::tempdir().unwrap();
        let root = InstallRoot::at(dir.path());
        let (one, two) = (ActionWindow::open(&root), ActionWindow::open(&root));
        let a = alias("ada");
        one.admit(&a, 2).unwrap_or_else(|e| panic!("{e}"));
        two.admit(&a, 2).unwrap_or_else(|e| panic!("{e}"));
        let refused = one
            .admit(&a, 2)
            .expect_err("the third action, counted by both");
        assert!(refused.unavailable.is_none());
        assert_eq!(two.count(&a), Ok(2));
        // Rename moves the count; delete removes it.
        let b = alias("bee");
        assert_eq!(one.rename(&a, &b).unwrap(), 2);
        assert!(two.admit(&b, 2).is_err(), "bee inherits ada's hour");
        assert_eq!(two.count(&a), Ok(0));
        assert_eq!(one.purge(&b).unwrap(), 2);
        two.admit(&b, 2).unwrap_or_else(|e| panic!("{e}"));
    }

    /// Leases (issue 14's benchmark): quick calls under a high limit claim growing leases, but
    /// two processes together never admit more than the limit, every action stays counted at
    /// least an hour after it ran, and unused slots go back.
    #[test]
    fn leases_never_admit_beyond_the_limit_and_give_back_what_they_did_not_use() {
        let dir = tempfile::tempdir().unwrap();
        let root = InstallRoot::at(dir.path());
        let a = alias("ada");
        // 1024 per hour: leases of up to 4 slots.
        let limit = 1024;
        let (one, two) = (ActionWindow::open(&root), ActionWindow::open(&root));
        let t0 = now_ms();
        let (mut admitted, mut last) = (0u32, t0);
        let mut t = t0;
        for i in 0..3000 {
            t += 1;
            let w = if i % 3 == 0 { &two } else { &one };
            match w.admit_at(&a, limit, t) {
                Ok(()) => (admitted, last) = (admitted + 1, t),
                Err(refused) => assert!(refused.unavailable.is_none(), "{refused}"),
            }
        }
        // Each process may hold up to 3 unused slots of its lease: refused early, never late.
        assert!(admitted <= limit && admitted >= limit - 6, "{admitted}");
        assert_eq!(one.count(&a), Ok(u64::from(limit)), "claimed slots count");
        // No row is older than the call it stands for: the earliest is the first call's time.
        let rows = one.rows(&a).unwrap();
        assert!(rows.iter().all(|at| *at > t0), "{:?}", &rows[..4]);
        assert!(
            rows.iter().any(|at| *at > last),
            "leased rows carry the lease's end, after the last admitted call"
        );
        drop(two);
        drop(one);
        let after = ActionWindow::open(&root);
        assert_eq!(
            after.count(&a),
            Ok(u64::from(admitted)),
            "unused slots given back"
        );
        // Delete and restore (agents delete/restore) bring back every row, leased ones sharing
        // their time too, and a repeated restore adds none.
        let rows = after.rows(&a).unwrap();
        assert_eq!(after.purge(&a), Ok(u64::from(admitted)));
        assert_eq!(after.restore(&a, &rows), Ok(u64::from(admitted)));
        assert_eq!(after.restore(&a, &rows), Ok(0));
        assert_eq!(after.count(&a), Ok(u64::from(admitted)));

        // A lapsed lease gives its slots back at the next claim, which starts small again; a
        // limit under 512 claims one slot per call, recorded at its time.
        let b = alias("bee");
        let w = ActionWindow::open(&root);
        for i in 0..4 {
            w.admit_at(&b, 100_000, t0 + i).unwrap();
        }
        assert!(w.count(&b).unwrap() > 4, "a lease is open");
        w.admit_at(&b, 100_000, t0 + 10 * LEASE_MS).unwrap();
        assert_eq!(w.count(&b), Ok(5));
        let c = alias("cid");
        for i in 0..5 {
            w.admit_at(&c, 511, t0 + i).unwrap();
        }
        assert_eq!(w.rows(&c).unwrap(), (t0..t0 + 5).collect::<Vec<_>>());
    }

    /// A window whose file cannot be created refuses the call (fail closed), naming the file.
    #[test]
    fn an_unusable_window_file_refuses_the_call_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = InstallRoot::at(dir.path());
        // `data/state` is a file: the database cannot be created below it.
        std::fs::create_dir_all(root.data_dir()).unwrap();
        std::fs::write(root.state_dir(), b"not a directory").unwrap();
        let w = ActionWindow::open(&root);
        let refused = w.admit(&alias("ada"), 120).expect_err("fail closed");
        let text = refused.to_string();
        assert!(refused.unavailable.is_some());
        assert!(text.contains("actions.db"), "{text}");
        assert!(text.contains("refused"), "{text}");
    }
}
