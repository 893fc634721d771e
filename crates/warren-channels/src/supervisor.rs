//! [`Channels`]: the supervisor of one generation's channels (issue 38), started by the daemon
//! as a generation hook so a reload stops and starts it cleanly. One task per configured
//! channel runs it and restarts only that channel, with backoff, when it fails to start or
//! completes no round-trip with its platform within its health window. The daemon never
//! restarts for a channel.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use warren_runtime::RunningSubsystem;
use warren_runtime::cancel::CancelToken;
use warren_runtime::host::AgentHost;

use crate::health::{Health, Status};
use crate::telegram::{self, Context};

/// The channels of one generation and their health.
#[derive(Debug)]
pub struct Channels {
    health: Vec<Arc<Health>>,
}

impl Channels {
    /// Every configured channel's health, by name.
    pub fn statuses(&self) -> Vec<Status> {
        self.health.iter().map(|h| h.status()).collect()
    }

    /// Whether any running channel is `down`.
    pub fn any_down(&self) -> bool {
        self.health.iter().any(|h| h.status().status == "down")
    }

    /// Starts every channel of `host`'s config; the subsystem stops them all.
    pub fn start(host: &Arc<AgentHost>) -> (Arc<Self>, RunningSubsystem) {
        let config = host.snapshot().config().clone();
        let stop = CancelToken::new();
        let mut health = Vec::new();
        let mut tasks = Vec::new();
        let mut bots = Vec::new();
        for (short, channel) in &config.channels.telegram {
            let name = format!("telegram.{short}");
            let h = Arc::new(Health::new(
                &name,
                Duration::from_secs(channel.health_window_secs),
            ));
            health.push(Arc::clone(&h));
            let token = channel
                .token
                .as_ref()
                .map(|t| t.expose().to_string())
                .filter(|t| !t.is_empty());
            let Some(token) = token.filter(|_| channel.enabled) else {
                h.stopped(Some(if channel.enabled {
                    format!(
                        "no token: set it with `warren config set --secret channels.{name}.token`"
                    )
                } else {
                    "disabled (enabled = false)".to_string()
                }));
                continue;
            };
            // Issue 38 §4: the bot that asks this channel's owners about approvals.
            let api =
                telegram::api::Api::new(&name, &channel.api_base, &token, Duration::from_secs(30));
            bots.push((
                short.clone(),
                Arc::new(api) as Arc<dyn crate::approvals::Messenger>,
            ));
            let (host, stop, short, channel) = (
                Arc::clone(host),
                stop.clone(),
                short.clone(),
                channel.clone(),
            );
            tasks.push(tokio::spawn(async move {
                supervise(host, name, short, channel, token, h, stop).await;
            }));
        }
        let channels = Arc::new(Self { health });
        // Issue 38 §4: the channels' owners are asked about approvals until the channels stop.
        let approvals = crate::approvals::register(host, bots);
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = rx.await;
            drop(approvals);
            stop.cancel();
            for t in tasks {
                let _ = t.await;
            }
        });
        (channels, RunningSubsystem::new("channels", tx, task))
    }
}

/// Runs one channel, restarting it after a failure or an expired health window.
async fn supervise(
    host: Arc<AgentHost>,
    name: String,
    short: String,
    channel: warren_config::schema::channels::TelegramChannel,
    token: String,
    health: Arc<Health>,
    stop: CancelToken,
) {
    let mut restarts: u32 = 0;
    loop {
        health.starting(restarts > 0);
        let store = match host.stores().channels() {
            Ok(s) => s,
            Err(e) => {
                health.failure(&e.to_string());
                tracing::error!(channel = %name, "{e}");
                if !pause(&stop, restarts).await {
                    return;
                }
                restarts += 1;
                continue;
            }
        };
        let run_stop = CancelToken::new();
        let ctx = Context {
            name: name.clone(),
            short: short.clone(),
            config: channel.clone(),
            token: token.clone(),
            host: Arc::clone(&host),
            store,
            health: Arc::clone(&health),
        };
        let began = std::time::Instant::now();
        let mut run = tokio::spawn(telegram::run(ctx, run_stop.clone()));
        let watchdog = async {
            loop {
                tokio::time::sleep(Duration::from_millis(250)).await;
                if health.expired() {
                    break;
                }
            }
        };
        tokio::select! {
            ended = &mut run => {
                match ended {
                    Ok(Err(e)) => {
                        health.failure(&e.to_string());
                        tracing::error!("{e}");
                    }
                    Err(e) => health.failure(&format!("channels.{name}: the channel task failed: {e}")),
                    Ok(Ok(())) => {}
                }
            }
            () = watchdog => {
                let why = format!(
                    "channels.{name}: no round-trip with Telegram within {}s; restarting the channel",
                    channel.health_window_secs
                );
                tracing::warn!("{why}");
                health.down(&why);
                run_stop.cancel();
                let _ = tokio::time::timeout(Duration::from_secs(5), &mut run).await;
            }
            () = stop.cancelled() => {
                run_stop.cancel();
                let _ = tokio::time::timeout(Duration::from_secs(5), &mut run).await;
                health.stopped(None);
                return;
            }
        }
        // A run that lasted longer than its window was healthy for a while: back off from
        // the start again.
        let step = if began.elapsed() > Duration::from_secs(channel.health_window_secs) {
            0
        } else {
            restarts
        };
        if !pause(&stop, step).await {
            health.stopped(None);
            return;
        }
        restarts = restarts.saturating_add(1);
    }
}

/// Waits the backoff before restart `restarts + 1` (1 s doubling, at most 60 s); `false` when
/// the supervisor stops meanwhile.
async fn pause(stop: &CancelToken, restarts: u32) -> bool {
    let wait = Duration::from_secs(1u64 << restarts.min(6)).min(Duration::from_secs(60));
    tokio::select! {
        () = tokio::time::sleep(wait) => true,
        () = stop.cancelled() => false,
    }
}
