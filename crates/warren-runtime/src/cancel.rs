//! The cancel token of a turn (LOOP-1, LOOP-7): set by Ctrl-C in the CLI or by any other entry
//! point; aborts the provider stream (through the provider's flag) and races every tool
//! future, so dropping the tool future kills its process.

use tokio::sync::watch;
use warren_providers::CancelFlag;

/// A clonable cancellation token.
#[derive(Debug, Clone)]
pub struct CancelToken {
    tx: std::sync::Arc<watch::Sender<bool>>,
    flag: CancelFlag,
}

impl Default for CancelToken {
    fn default() -> Self {
        Self::new()
    }
}

impl CancelToken {
    pub fn new() -> Self {
        let (tx, _rx) = watch::channel(false);
        Self {
            tx: std::sync::Arc::new(tx),
            flag: CancelFlag::new(),
        }
    }

    pub fn cancel(&self) {
        self.flag.cancel();
        self.tx.send_replace(true);
    }

    pub fn is_cancelled(&self) -> bool {
        self.flag.is_cancelled()
    }

    /// The flag handed to providers.
    pub fn provider_flag(&self) -> CancelFlag {
        self.flag.clone()
    }

    /// Resolves once the token is cancelled.
    pub async fn cancelled(&self) {
        let mut rx = self.tx.subscribe();
        let _ = rx.wait_for(|v| *v).await;
    }
}

/// Cancels `token` on the first Ctrl-C (SIGINT) until the returned task is aborted (the CLI
/// arms one per turn, so Ctrl-C cancels the running turn, not the process).
pub fn cancel_on_ctrl_c(token: CancelToken) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            token.cancel();
        }
    })
}
