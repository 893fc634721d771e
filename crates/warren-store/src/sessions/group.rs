//! Group commit for SQLite appends (SESS-1, `[channels] session_durability`).
//!
//! Appends go to one writer thread per backend. The writer takes everything queued (up to
//! [`MAX_BATCH`]) and writes it as ONE transaction with a SAVEPOINT per append: an append that
//! fails is rolled back to its savepoint alone (its message and its session-row change
//! together), the others commit. Each caller is answered only after the transaction holding
//! its append committed (or failed), so an acknowledged append is exactly as durable as the
//! sync level says: one `fsync` per batch with `synchronous=FULL` (`turn`), none with WAL
//! `NORMAL` (`batched`). A lone writer's batch is itself; concurrent writers (threads, or async
//! tasks through `SessionHandle`, which wait without holding a thread) share commits.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use warren_core::SessionKey;

use super::{NewMessage, SessionError, StoredMessage};

/// The most appends one transaction takes (bounds the latency of the last one in a batch).
pub(crate) const MAX_BATCH: usize = 1024;

/// How long the writer waits for concurrent appends to join a batch (only when the previous
/// batch held several).
const GATHER: Duration = Duration::from_micros(250);

pub(crate) type AppendResult = Result<StoredMessage, SessionError>;

/// Where the writer sends an append's result.
pub(crate) enum Reply {
    /// Committed by the caller's own thread (an idle writer; see `SqliteBackend::append_many`).
    Direct,
    Blocking(mpsc::SyncSender<AppendResult>),
    Async(tokio::sync::oneshot::Sender<AppendResult>),
}

impl Reply {
    fn send(self, result: AppendResult) {
        // A caller that went away (a dropped future) just does not hear the answer.
        match self {
            Reply::Direct => {}
            Reply::Blocking(tx) => {
                let _ = tx.send(result);
            }
            Reply::Async(tx) => {
                let _ = tx.send(result);
            }
        }
    }
}

/// One queued append.
pub(crate) struct Request {
    pub key: SessionKey,
    pub message: NewMessage,
    pub reply: Reply,
}

/// The writer thread of one backend. Dropping it lets the thread finish the queue and joins it.
pub(crate) struct Writer {
    /// `None` once dropping (`mpsc::Sender` is `Sync`: appends share it without a lock).
    tx: Option<mpsc::Sender<Request>>,
    /// Appends sent to the thread and not answered yet.
    pending: Arc<AtomicUsize>,
    /// Whether the thread's last batch held several appends (writers are concurrent).
    concurrent: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").finish_non_exhaustive()
    }
}

impl Writer {
    /// Starts the writer; `commit` writes one batch and returns one result per request, in
    /// order.
    pub(crate) fn start<F>(commit: F) -> std::io::Result<Self>
    where
        F: FnMut(&mut Vec<Request>) -> Vec<AppendResult> + Send + 'static,
    {
        let (tx, rx) = mpsc::channel::<Request>();
        let pending = Arc::new(AtomicUsize::new(0));
        let answered = Arc::clone(&pending);
        let concurrent = Arc::new(AtomicBool::new(false));
        let seen_concurrent = Arc::clone(&concurrent);
        let thread = std::thread::Builder::new()
            .name("warren-sessions-writer".into())
            .spawn(move || {
                let mut commit = commit;
                let mut last = 1;
                while let Ok(first) = rx.recv() {
                    let mut batch = vec![first];
                    while batch.len() < MAX_BATCH {
                        match rx.try_recv() {
                            Ok(r) => batch.push(r),
                            Err(_) => break,
                        }
                    }
                    // Under concurrency (the last batch held several appends), give the writers
                    // between two appends a moment to join: one commit then serves them all. A
                    // lone writer never waits.
                    if last > 1 && batch.len() < last {
                        let deadline = Instant::now() + GATHER;
                        while batch.len() < last.min(MAX_BATCH) {
                            let now = Instant::now();
                            if now >= deadline {
                                break;
                            }
                            match rx.recv_timeout(deadline - now) {
                                Ok(r) => batch.push(r),
                                Err(_) => break,
                            }
                        }
                    }
                    last = batch.len();
                    seen_concurrent.store(last > 1, Ordering::Release);
                    let results = commit(&mut batch);
                    let n = batch.len();
                    for (req, result) in batch.into_iter().zip(results) {
                        req.reply.send(result);
                    }
                    answered.fetch_sub(n, Ordering::AcqRel);
                }
            })?;
        Ok(Self {
            tx: Some(tx),
            pending,
            concurrent,
            thread: Some(thread),
        })
    }

    /// Whether no append is queued or being written by the thread, and the writers are not
    /// concurrent (then appends should meet in the thread's batches instead).
    pub(crate) fn idle(&self) -> bool {
        self.pending.load(Ordering::Acquire) == 0 && !self.concurrent.load(Ordering::Acquire)
    }

    fn send(&self, req: Request) -> Result<(), SessionError> {
        match self.tx.as_ref() {
            Some(tx) => {
                self.pending.fetch_add(1, Ordering::AcqRel);
                tx.send(req).map_err(|_| {
                    self.pending.fetch_sub(1, Ordering::AcqRel);
                    SessionError::Task("the session writer thread stopped".into())
                })
            }
            None => Err(SessionError::Task("the session store is closed".into())),
        }
    }

    /// Queues `items` and blocks until each is committed or failed; results in order.
    pub(crate) fn submit_blocking(
        &self,
        items: impl IntoIterator<Item = (SessionKey, NewMessage)>,
    ) -> Vec<AppendResult> {
        let mut waits = Vec::new();
        for (key, message) in items {
            let (tx, rx) = mpsc::sync_channel(1);
            let sent = self.send(Request {
                key,
                message,
                reply: Reply::Blocking(tx),
            });
            waits.push(sent.map(|()| rx));
        }
        waits
            .into_iter()
            .map(|w| {
                w.and_then(|rx| {
                    rx.recv().unwrap_or_else(|_| {
                        Err(SessionError::Task(
                            "the session writer stopped before answering".into(),
                        ))
                    })
                })
            })
            .collect()
    }

    /// Queues one append; the receiver yields its result after its batch committed.
    pub(crate) fn submit_async(
        &self,
        key: SessionKey,
        message: NewMessage,
    ) -> Result<tokio::sync::oneshot::Receiver<AppendResult>, SessionError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.send(Request {
            key,
            message,
            reply: Reply::Async(tx),
        })?;
        Ok(rx)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Closing the channel ends the thread once the queue is written.
        drop(self.tx.take());
        if let Some(t) = self.thread.take()
            && t.thread().id() != std::thread::current().id()
        {
            let _ = t.join();
        }
    }
}

/// Shared by the writer thread and direct commits.
pub(crate) type SharedCheckpointer = Arc<Mutex<Option<Checkpointer>>>;

/// Checkpoints the WAL on its own thread and connection, so appends never wait for the
/// checkpoint's copy and `fsync` of the database file (SQLite's automatic checkpoint runs
/// inside the commit that crosses the threshold). A PASSIVE checkpoint does not block writers.
pub(crate) struct Checkpointer {
    tx: Option<mpsc::SyncSender<()>>,
    thread: Option<JoinHandle<()>>,
    appends: usize,
    batches: usize,
}

/// WAL frames (pages) beyond which a checkpoint also restarts the WAL (see [`checkpoint`]).
const RESTART_FRAMES: i64 = 4000;

/// A PASSIVE checkpoint copies what it can without blocking the writer. Under sustained load
/// the writer keeps appending while it runs, so the WAL would never start over from its
/// beginning and would grow without bound; past [`RESTART_FRAMES`] a RESTART checkpoint
/// briefly holds the writer off (the PASSIVE pass already copied almost everything) so the
/// next commit writes the WAL from the start again.
fn checkpoint(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    let log: i64 = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1))?;
    if log >= RESTART_FRAMES {
        conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(()))?;
    }
    Ok(())
}

/// Ask for a checkpoint after this many appends or batches (about 1000 WAL pages at most,
/// SQLite's own threshold).
const CHECKPOINT_APPENDS: usize = 2000;
const CHECKPOINT_BATCHES: usize = 150;

impl std::fmt::Debug for Checkpointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpointer").finish_non_exhaustive()
    }
}

impl Checkpointer {
    pub(crate) fn start(conn: rusqlite::Connection) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::sync_channel::<()>(1);
        let thread = std::thread::Builder::new()
            .name("warren-sessions-checkpoint".into())
            .spawn(move || {
                while rx.recv().is_ok() {
                    if let Err(e) = checkpoint(&conn) {
                        tracing::warn!("sessions.db: background WAL checkpoint failed: {e}");
                    }
                }
            })?;
        Ok(Self {
            tx: Some(tx),
            thread: Some(thread),
            appends: 0,
            batches: 0,
        })
    }

    /// Called by the writer after each committed batch.
    pub(crate) fn committed(&mut self, appends: usize) {
        self.appends += appends;
        self.batches += 1;
        if self.appends >= CHECKPOINT_APPENDS || self.batches >= CHECKPOINT_BATCHES {
            self.appends = 0;
            self.batches = 0;
            if let Some(tx) = &self.tx {
                // Full means a checkpoint is already asked for.
                let _ = tx.try_send(());
            }
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
