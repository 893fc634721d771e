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

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use warren_config::InstallRoot;
use warren_config::sqlite::rusqlite::{self, Connection, OptionalExtension, TransactionBehavior};
use warren_config::sqlite::{SharedConn, Sync, cause_text};
use warren_core::AgentAlias;

/// The window's length.
pub const WINDOW: Duration = Duration::from_secs(3600);

const WINDOW_MS: i64 = 3_600_000;

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
    pub unavailable: Option<String>,
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
}

impl ActionWindow {
    /// The window of `root` (nothing is opened yet).
    pub fn open(root: &InstallRoot) -> Self {
        Self {
            path: actions_db(root),
            conn: Mutex::new(None),
        }
    }

    fn conn(&self) -> Result<SharedConn, String> {
        let mut slot = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(conn) = slot.as_ref() {
            return Ok(conn.clone());
        }
        // WAL with synchronous = NORMAL: no fsync per admission. A commit survives a process
        // crash; a power loss may lose the last second of the window, which for a rate limit
        // only lets those few actions count again.
        let conn = SharedConn::open_store(&self.path, Sync::Normal, SCHEMA)
            .map_err(|cause| format!("{}: {cause}", self.path.display()))?;
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Takes a slot for one action of `agent` under `limit`, or says when one frees.
    ///
    /// The transaction runs on the caller's thread, an async worker too: it takes about 10 µs
    /// and waits only while another process holds the file's write lock for an admission of
    /// its own (microseconds). On the blocking pool (`SharedConn::run`) it cost about 55 µs
    /// more per tool call in `turn_loop`'s script run (67.5× instead of 16.7×; over HTTP 1.18×
    /// either way), so it stays here.
    pub fn admit(&self, agent: &AgentAlias, limit: u32) -> Result<(), ActionLimited> {
        self.admit_at(agent, limit, now_ms())
    }

    fn admit_at(&self, agent: &AgentAlias, limit: u32, now: i64) -> Result<(), ActionLimited> {
        let conn = self
            .conn()
            .map_err(|cause| unavailable(agent, limit, cause))?;
        let oldest = admit_tx(&mut conn.lock(), agent.as_str(), limit, now).map_err(|e| {
            let cause = format!("{}: {}", self.path.display(), cause_text(&e, &self.path));
            unavailable(agent, limit, cause)
        })?;
        decide(agent, limit, now, oldest)
    }

    /// Actions of `agent` in the window now; `Ok(0)` when there is no file yet.
    pub fn count(&self, agent: &AgentAlias) -> Result<u64, String> {
        self.rows(agent).map(|r| r.len() as u64)
    }

    /// The times (unix ms) of `agent`'s actions in the window now, oldest first.
    pub fn rows(&self, agent: &AgentAlias) -> Result<Vec<i64>, String> {
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
    pub fn purge(&self, agent: &AgentAlias) -> Result<u64, String> {
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
    pub fn rename(&self, from: &AgentAlias, to: &AgentAlias) -> Result<u64, String> {
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
    pub fn restore(&self, agent: &AgentAlias, at_ms: &[i64]) -> Result<u64, String> {
        let since = now_ms() - WINDOW_MS;
        let keep: Vec<i64> = at_ms.iter().copied().filter(|t| *t > since).collect();
        if keep.is_empty() {
            return Ok(0);
        }
        let conn = self.conn()?;
        let mut conn = conn.lock();
        let run = |c: &mut Connection| -> rusqlite::Result<u64> {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let mut n = 0;
            for t in &keep {
                n += tx.execute(
                    "INSERT INTO actions (agent, at_ms) SELECT ?1, ?2 WHERE NOT EXISTS (SELECT 1 FROM actions WHERE agent = ?1 AND at_ms = ?2)",
                    (agent.as_str(), t),
                )? as u64;
            }
            tx.execute(RECOUNT, [agent.as_str()])?;
            tx.commit()?;
            Ok(n)
        };
        run(&mut conn)
            .map_err(|e| format!("{}: {}", self.path.display(), cause_text(&e, &self.path)))
    }

    /// `f` on the window's connection; `None` when there is no file yet (nothing to change).
    fn with_existing<T>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<Option<T>, String> {
        if !self.path.exists() {
            return Ok(None);
        }
        let conn = self.conn()?;
        let conn = conn.lock();
        f(&conn)
            .map(Some)
            .map_err(|e| format!("{}: {}", self.path.display(), cause_text(&e, &self.path)))
    }
}

/// One admission, one `BEGIN IMMEDIATE` transaction (the write lock first, so two processes
/// never both count the same free slot): `None` when admitted, else the oldest action's time.
fn admit_tx(
    conn: &mut Connection,
    agent: &str,
    limit: u32,
    now: i64,
) -> rusqlite::Result<Option<i64>> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let expired = tx
        .prepare_cached("DELETE FROM actions WHERE agent = ?1 AND at_ms <= ?2")?
        .execute((agent, now - WINDOW_MS))?;
    if expired > 0 {
        tx.prepare_cached("UPDATE action_counts SET n = max(n - ?2, 0) WHERE agent = ?1")?
            .execute((agent, expired as i64))?;
    }
    let used: i64 = tx
        .prepare_cached("SELECT n FROM action_counts WHERE agent = ?1")?
        .query_row([agent], |r| r.get(0))
        .optional()?
        .unwrap_or(0);
    if used >= i64::from(limit) {
        let oldest: Option<i64> = tx
            .prepare_cached("SELECT min(at_ms) FROM actions WHERE agent = ?1")?
            .query_row([agent], |r| r.get(0))?;
        tx.commit()?;
        return Ok(Some(oldest.unwrap_or(now)));
    }
    tx.prepare_cached("INSERT INTO actions (agent, at_ms) VALUES (?1, ?2)")?
        .execute((agent, now))?;
    tx.prepare_cached(
        "INSERT INTO action_counts (agent, n) VALUES (?1, 1) ON CONFLICT (agent) DO UPDATE SET n = n + 1",
    )?
    .execute([agent])?;
    tx.commit()?;
    Ok(None)
}

/// A call refused because the window's file could not be used.
fn unavailable(agent: &AgentAlias, limit: u32, cause: String) -> ActionLimited {
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
