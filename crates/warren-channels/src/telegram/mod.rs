//! The Telegram adapter (issue 38 §6): `getMe` at start (an error names the channel), then
//! three tasks until the channel stops —
//!
//! - the **poller**, on a blocking thread: `getUpdates` long polls; each batch is stored and
//!   committed in the inbox before the next poll's offset confirms it to Telegram; a 409
//!   (another poller on the token) waits and retries on a new connection, forever; a 429
//!   waits its `retry_after`; any other failure backs off. One poller per token in the
//!   process: a restarted channel's poller waits for the old one to end;
//! - the **worker** ([`crate::inbound`]): rows → refusals, commands and turns;
//! - the **sender** ([`send`]): due outbox rows → `sendMessage`.

pub mod api;
mod bridge;
pub mod send;
pub mod updates;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;
use warren_config::schema::channels::TelegramChannel;
use warren_runtime::cancel::CancelToken;
use warren_runtime::host::AgentHost;
use warren_store::channels::ChannelStore;

use crate::health::Health;
use crate::inbound::{Worker, interrupted_notice};
use api::Api;
use send::{Delivery, deliver};
use updates::Bot;

/// Why a channel stopped (its supervisor restarts it after a backoff).
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("channels.{channel}: getMe failed, the bot cannot start: {cause}")]
    GetMe {
        channel: String,
        cause: api::ApiError,
    },
    #[error("channels.{channel}: {cause}")]
    Store {
        channel: String,
        cause: warren_store::channels::ChannelStoreError,
    },
    #[error("channels.{channel}: a task failed: {cause}")]
    Task { channel: String, cause: String },
}

/// Slack on top of a long poll's own timeout before the request is abandoned as dead.
const POLL_SLACK: Duration = Duration::from_secs(5);

/// One lock per bot token in the process: the one poller holding it polls.
fn token_lock(token: &str) -> Arc<Mutex<()>> {
    static LOCKS: OnceLock<Mutex<HashMap<String, Arc<Mutex<()>>>>> = OnceLock::new();
    let mut locks = LOCKS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    Arc::clone(locks.entry(token.to_string()).or_default())
}

/// Channels whose interrupted turns were settled in this process (once per process: a
/// restarted channel's old turns are still running).
fn first_start(name: &str) -> bool {
    static DONE: OnceLock<Mutex<std::collections::HashSet<String>>> = OnceLock::new();
    DONE.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(name.to_string())
}

/// Everything one run of a channel needs.
pub struct Context {
    /// `telegram.<name>`.
    pub name: String,
    pub short: String,
    pub config: TelegramChannel,
    pub token: String,
    pub host: Arc<AgentHost>,
    pub store: Arc<ChannelStore>,
    pub health: Arc<Health>,
}

fn sleep_unless(stop: &CancelToken, total: Duration) {
    let step = Duration::from_millis(100);
    let mut left = total;
    while !stop.is_cancelled() && !left.is_zero() {
        let now = left.min(step);
        std::thread::sleep(now);
        left -= now;
    }
}

/// Runs the channel until `stop` (Ok) or a failure to start (Err).
pub async fn run(ctx: Context, stop: CancelToken) -> Result<(), ChannelError> {
    let timeout = Duration::from_secs(ctx.config.poll_timeout_secs) + POLL_SLACK;
    let api = Api::new(&ctx.name, &ctx.config.api_base, &ctx.token, timeout);
    let me = {
        let api = api.clone();
        tokio::task::spawn_blocking(move || api.get_me())
            .await
            .map_err(|e| ChannelError::Task {
                channel: ctx.name.clone(),
                cause: e.to_string(),
            })?
    };
    let (id, username) = me.map_err(|cause| ChannelError::GetMe {
        channel: ctx.name.clone(),
        cause,
    })?;
    ctx.health.bot(&username);
    let bot = Bot { id, username };
    if first_start(&ctx.name) {
        let (store, name) = (Arc::clone(&ctx.store), ctx.name.clone());
        let settled =
            tokio::task::spawn_blocking(move || store.interrupt_started(&name, interrupted_notice))
                .await
                .map_err(|e| ChannelError::Task {
                    channel: ctx.name.clone(),
                    cause: e.to_string(),
                })?
                .map_err(|cause| ChannelError::Store {
                    channel: ctx.name.clone(),
                    cause,
                })?;
        if !settled.is_empty() {
            tracing::warn!(channel = %ctx.name, rows = settled.len(), "turns interrupted by the last stop were not run again; their senders are told");
        }
    }
    let received = Arc::new(Notify::new());
    let queued = Arc::new(Notify::new());

    let poller = {
        let (store, health, name) = (
            Arc::clone(&ctx.store),
            Arc::clone(&ctx.health),
            ctx.name.clone(),
        );
        let (api, stop, received, poll) = (
            api.clone(),
            stop.clone(),
            Arc::clone(&received),
            ctx.config.poll_timeout_secs,
        );
        let lock = token_lock(&ctx.token);
        tokio::task::spawn_blocking(move || {
            let _held = lock.lock().unwrap_or_else(|p| p.into_inner());
            poll_loop(&store, &health, &name, api, &bot, poll, &stop, &received);
        })
    };

    let typing_api = api.clone();
    let toast_api = api.clone();
    let worker = Arc::new(Worker {
        name: ctx.name.clone(),
        short: ctx.short.clone(),
        config: ctx.config.clone(),
        host: Arc::clone(&ctx.host),
        store: Arc::clone(&ctx.store),
        queued: Arc::clone(&queued),
        files: Arc::new(api.clone()),
        typing: Arc::new(move |chat: &str, thread: Option<&str>| {
            let (api, chat, thread) = (
                typing_api.clone(),
                chat.to_string(),
                thread.map(str::to_string),
            );
            tokio::task::spawn_blocking(move || {
                let _ = api.typing(&chat, thread.as_deref());
            });
        }),
        toast: Arc::new(move |query: &str, text: &str| {
            let (api, query, text) = (toast_api.clone(), query.to_string(), text.to_string());
            tokio::task::spawn_blocking(move || {
                let _ = api.answer_callback(&query, &text);
            });
        }),
        running: Mutex::new(HashMap::new()),
    });
    let work = {
        let (stop, worker, health) = (stop.clone(), Arc::clone(&worker), Arc::clone(&ctx.health));
        tokio::spawn(async move {
            loop {
                if let Err(e) = worker.drain().await {
                    health.failure(&e.to_string());
                }
                tokio::select! {
                    () = received.notified() => {}
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    () = stop.cancelled() => break,
                }
            }
        })
    };
    let send = {
        let (stop, store, health, name) = (
            stop.clone(),
            Arc::clone(&ctx.store),
            Arc::clone(&ctx.health),
            ctx.name.clone(),
        );
        let send_api = api.fresh(Duration::from_secs(30));
        tokio::spawn(async move {
            loop {
                let (store2, health2, name2, api2) = (
                    Arc::clone(&store),
                    Arc::clone(&health),
                    name.clone(),
                    send_api.clone(),
                );
                let pass =
                    tokio::task::spawn_blocking(move || send_due(&store2, &api2, &health2, &name2))
                        .await;
                if let Ok(Err(e)) = pass {
                    health.failure(&e.to_string());
                }
                tokio::select! {
                    () = queued.notified() => {}
                    () = tokio::time::sleep(Duration::from_millis(500)) => {}
                    () = stop.cancelled() => break,
                }
            }
        })
    };
    stop.cancelled().await;
    let _ = work.await;
    let _ = send.await;
    // The poller ends within one poll; the next run's poller waits for its token lock.
    drop(poller);
    Ok(())
}

fn send_due(
    store: &ChannelStore,
    api: &Api,
    health: &Health,
    name: &str,
) -> Result<(), warren_store::channels::ChannelStoreError> {
    for row in store.due(name, ChannelStore::now_ms())? {
        match deliver(store, api, health, &row)? {
            Delivery::Sent | Delivery::Failed => {}
            // Keep the conversation's order: a later message waits for this one.
            Delivery::Retry(_) => break,
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn poll_loop(
    store: &ChannelStore,
    health: &Health,
    name: &str,
    mut api: Api,
    bot: &Bot,
    poll_secs: u64,
    stop: &CancelToken,
    received: &Notify,
) {
    let timeout = Duration::from_secs(poll_secs) + POLL_SLACK;
    let mut offset: Option<i64> = None;
    let mut failures: u32 = 0;
    while !stop.is_cancelled() {
        match api.get_updates(offset, poll_secs) {
            Ok(batch) => {
                let rows: Vec<_> = batch
                    .iter()
                    .filter_map(|u| updates::inbound(u, bot))
                    .collect();
                // Stored and committed before the next poll's offset confirms them.
                if let Err(e) = store.receive(name, &rows) {
                    health.failure(&e.to_string());
                    failures += 1;
                    sleep_unless(stop, send::backoff(failures).min(Duration::from_secs(30)));
                    continue;
                }
                if let Some(max) = batch.iter().filter_map(updates::update_id).max() {
                    offset = Some(max + 1);
                }
                failures = 0;
                health.poll_ok();
                if !rows.is_empty() {
                    received.notify_one();
                }
            }
            Err(e) => {
                health.failure(&e.to_string());
                failures = failures.saturating_add(1);
                let wait = match (e.code(), e.retry_after()) {
                    (_, Some(secs)) => Duration::from_secs(secs),
                    // Another poller holds the token: never give up, new connection each time.
                    (Some(409), None) => Duration::from_secs(2),
                    _ => send::backoff(failures).min(Duration::from_secs(30)),
                };
                tracing::warn!(channel = %name, "{e}; polling again in {wait:?}");
                sleep_unless(stop, wait);
                if e.code().is_none_or(|c| c == 409 || c >= 500) {
                    api = api.fresh(timeout);
                }
            }
        }
    }
}
