//! The async face of a session backend (docs/architecture.md, "blocking work stays off the
//! async workers"): every call runs on tokio's blocking pool, so SQLite and file I/O never run
//! on an async worker.

use std::sync::Arc;

use warren_core::SessionKey;

use super::{History, NewMessage, Page, SessionBackend, SessionError, StoredMessage};

/// A cloneable handle on one backend for async callers.
#[derive(Debug, Clone)]
pub struct SessionHandle {
    backend: Arc<dyn SessionBackend>,
}

impl SessionHandle {
    pub fn new(backend: Arc<dyn SessionBackend>) -> Self {
        Self { backend }
    }

    /// The backend, for blocking contexts (CLI, tests, other blocking tasks).
    pub fn blocking(&self) -> &Arc<dyn SessionBackend> {
        &self.backend
    }

    /// Runs `f` against the backend on the blocking pool.
    pub async fn run<T, F>(&self, f: F) -> Result<T, SessionError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn SessionBackend) -> Result<T, SessionError> + Send + 'static,
    {
        let backend = Arc::clone(&self.backend);
        tokio::task::spawn_blocking(move || f(backend.as_ref()))
            .await
            .map_err(|e| SessionError::Task(e.to_string()))?
    }

    /// Appends one message; resolves once it is committed. On SQLite the append joins the
    /// group commit without holding a thread while it waits.
    pub async fn append(
        &self,
        key: SessionKey,
        message: NewMessage,
    ) -> Result<StoredMessage, SessionError> {
        if let Some(queued) = self.backend.queue_append(&key, &message) {
            return queued?.await.map_err(|_| {
                SessionError::Task("the session writer stopped before answering".into())
            })?;
        }
        self.run(move |b| b.append(&key, &message)).await
    }

    pub async fn load(&self, key: SessionKey, page: Page) -> Result<History, SessionError> {
        self.run(move |b| b.load(&key, page)).await
    }
}
