//! A background subsystem of one generation (cron, SOP, telemetry, the gateway, ACP): a task
//! with a stop signal, stopped before the next generation starts (STATE-19).

use std::time::Duration;

use tokio::sync::oneshot;

/// A subsystem started for one generation; stopped before the next one starts.
pub struct RunningSubsystem {
    name: &'static str,
    stop: Option<oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<()>,
}

impl RunningSubsystem {
    /// `task` must finish soon after `stop` fires (in-flight work drains, listeners close).
    pub fn new(
        name: &'static str,
        stop: oneshot::Sender<()>,
        task: tokio::task::JoinHandle<()>,
    ) -> Self {
        Self {
            name,
            stop: Some(stop),
            done: task,
        }
    }

    /// Signals the stop without waiting (a listener stops accepting; in-flight work goes on).
    pub fn signal_stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Signals the stop and waits up to `grace` for the task; then aborts it.
    pub async fn stop(mut self, grace: Duration) {
        self.signal_stop();
        let mut done = self.done;
        if tokio::time::timeout(grace, &mut done).await.is_err() {
            tracing::warn!(
                subsystem = self.name,
                "did not stop within {grace:?}; aborted"
            );
            done.abort();
        }
    }
}
