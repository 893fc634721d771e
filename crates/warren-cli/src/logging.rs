//! Logging of the `warren` process (STATE-13 `log.level`): one `tracing` subscriber on stderr
//! whose level filter sits behind a reload handle.
//!
//! One-shot commands log warnings and errors (`-v` debug, `-vv` trace). The daemon starts at
//! `info` and then follows `[log] level` of every generation it runs, the first and each one a
//! reload publishes ([`LogLevelHook`]); `-v`/`-vv` on `warren daemon` win over the config.

use std::sync::OnceLock;

use tracing::level_filters::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Registry, reload};
use warren_daemon::{Generation, GenerationHook, RunningSubsystem, StartFuture};

use crate::cli::{Cli, Command};

/// The level filter's reload handle, set when the config decides the level (the daemon
/// without `-v`).
static CONFIGURED: OnceLock<reload::Handle<LevelFilter, Registry>> = OnceLock::new();

/// Installs the process's subscriber.
pub fn init(cli: &Cli) {
    let daemon = matches!(cli.command, Command::Daemon);
    let level = match (cli.verbose, daemon) {
        (0, false) => LevelFilter::WARN,
        (0, true) => LevelFilter::INFO,
        (1, _) => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    };
    let (filter, handle) = reload::Layer::new(level);
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false);
    let registry = tracing_subscriber::registry().with(filter);
    // One-shot commands print bare lines; the daemon's log lines carry timestamps.
    let installed = if daemon {
        registry.with(lines).try_init()
    } else {
        registry.with(lines.without_time()).try_init()
    };
    if installed.is_ok() && daemon && cli.verbose == 0 {
        let _ = CONFIGURED.set(handle);
    }
}

/// Applies `level` (`log.level`, validated by the config: error, warn, info, debug, trace)
/// when the config decides the level; otherwise nothing.
fn apply(level: &str) {
    let Some(handle) = CONFIGURED.get() else {
        return;
    };
    match level.parse::<LevelFilter>() {
        Ok(filter) => {
            if let Err(e) = handle.reload(filter) {
                eprintln!("warning: cannot apply log.level = \"{level}\": {e}");
            }
        }
        Err(_) => tracing::warn!("log.level = \"{level}\" is not a level; keeping the current one"),
    }
}

/// Applies each generation's `log.level` as it starts (daemon start and every reload). Listed
/// first among the daemon's hooks, so the other subsystems start under the new level.
#[derive(Debug, Default)]
pub struct LogLevelHook;

impl GenerationHook for LogLevelHook {
    fn name(&self) -> &'static str {
        "log-level"
    }

    fn start<'a>(&'a self, generation: &'a Generation) -> StartFuture<'a> {
        Box::pin(async move {
            apply(&generation.snapshot.log.level);
            // Nothing runs between reloads; the subsystem only marks the generation's level.
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let task = tokio::spawn(async move {
                let _ = stopped.await;
            });
            Ok(RunningSubsystem::new("log-level", stop, task))
        })
    }
}
