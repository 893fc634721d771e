//! A channel's health, measured end to end (issue 38, BEYOND-14): when a poll last came back
//! from the platform, when a send last succeeded, consecutive failures and the last error. A
//! channel with no completed round-trip within its window is `down` (never judged from socket
//! state), in `/api/health`, `warren channels status` and `/metrics`; its supervisor restarts
//! it alone.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

/// What one channel's tasks report as they work.
#[derive(Debug)]
pub struct Health {
    name: String,
    window: Duration,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Set when the channel (re)started: a new start has a full window to succeed.
    started: Instant,
    state: &'static str,
    last_poll_ok: Option<(Instant, SystemTime)>,
    last_send_ok: Option<(Instant, SystemTime)>,
    failures: u64,
    last_error: Option<String>,
    restarts: u64,
    bot: Option<String>,
    /// Milliseconds from a message's queueing to its last chunk's send, of the last message.
    lag_ms: Option<u64>,
}

/// A channel's health as reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Status {
    pub name: String,
    /// `starting`, `ok`, `down` or `stopped`.
    pub status: String,
    pub bot: Option<String>,
    pub last_poll_ok: Option<String>,
    pub last_poll_age_secs: Option<u64>,
    pub last_send_ok: Option<String>,
    pub consecutive_failures: u64,
    pub last_error: Option<String>,
    pub restarts: u64,
    pub lag_ms: Option<u64>,
    pub health_window_secs: u64,
}

fn stamp(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    time::OffsetDateTime::from_unix_timestamp(i64::try_from(secs).unwrap_or_default())
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

impl Health {
    pub fn new(name: &str, window: Duration) -> Self {
        Self {
            name: name.to_string(),
            window,
            inner: Mutex::new(Inner {
                started: Instant::now(),
                state: "starting",
                last_poll_ok: None,
                last_send_ok: None,
                failures: 0,
                last_error: None,
                restarts: 0,
                bot: None,
                lag_ms: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The channel (re)starts: it gets a full window again. A channel restarted because it
    /// was down stays `down` until its first round-trip.
    pub fn starting(&self, restart: bool) {
        let mut h = self.lock();
        h.started = Instant::now();
        if h.state != "down" {
            h.state = "starting";
        }
        if restart {
            h.restarts += 1;
        }
        drop(h);
        self.publish();
    }

    /// The channel is stopped (disabled, no token, or the daemon reloads).
    pub fn stopped(&self, why: Option<String>) {
        let mut h = self.lock();
        h.state = "stopped";
        if why.is_some() {
            h.last_error = why;
        }
        drop(h);
        self.publish();
    }

    pub fn bot(&self, username: &str) {
        self.lock().bot = Some(username.to_string());
    }

    /// A poll came back from the platform.
    pub fn poll_ok(&self) {
        let mut h = self.lock();
        h.last_poll_ok = Some((Instant::now(), SystemTime::now()));
        h.failures = 0;
        h.state = "ok";
        drop(h);
        self.publish();
    }

    /// A send was accepted by the platform, `lag` after the message it answers arrived.
    pub fn send_ok(&self, lag: Option<Duration>) {
        let mut h = self.lock();
        h.last_send_ok = Some((Instant::now(), SystemTime::now()));
        if let Some(lag) = lag {
            h.lag_ms = Some(u64::try_from(lag.as_millis()).unwrap_or(u64::MAX));
        }
        drop(h);
        self.publish();
    }

    /// The channel completed no round-trip within its window (its supervisor restarts it).
    pub fn down(&self, why: &str) {
        let mut h = self.lock();
        h.state = "down";
        h.failures += 1;
        h.last_error = Some(why.to_string());
        drop(h);
        self.publish();
    }

    /// A round-trip failed.
    pub fn failure(&self, error: &str) {
        let mut h = self.lock();
        h.failures += 1;
        h.last_error = Some(error.to_string());
        drop(h);
        self.publish();
    }

    /// Whether the channel has had no successful poll within its window (counted from its
    /// last (re)start when it has had none since).
    pub fn expired(&self) -> bool {
        let h = self.lock();
        let since = match h.last_poll_ok {
            Some((at, _)) if at > h.started => at,
            _ => h.started,
        };
        h.state != "stopped" && since.elapsed() > self.window
    }

    /// The report.
    pub fn status(&self) -> Status {
        let expired = self.expired();
        let h = self.lock();
        let status = if h.state == "stopped" {
            "stopped"
        } else if expired {
            "down"
        } else {
            h.state
        };
        Status {
            name: self.name.clone(),
            status: status.to_string(),
            bot: h.bot.clone(),
            last_poll_ok: h.last_poll_ok.map(|(_, t)| stamp(t)),
            last_poll_age_secs: h.last_poll_ok.map(|(at, _)| at.elapsed().as_secs()),
            last_send_ok: h.last_send_ok.map(|(_, t)| stamp(t)),
            consecutive_failures: h.failures,
            last_error: h.last_error.clone(),
            restarts: h.restarts,
            lag_ms: h.lag_ms,
            health_window_secs: self.window.as_secs(),
        }
    }

    /// Sets the channel's gauges in `/metrics`.
    pub fn publish(&self) {
        let s = self.status();
        warren_runtime::metrics::channel_health(
            &self.name,
            s.status == "ok",
            s.consecutive_failures,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_round_trip_within_the_window_is_down_until_the_next_poll_issue38() {
        let h = Health::new("telegram.home", Duration::from_millis(150));
        assert_eq!(h.status().status, "starting");
        h.poll_ok();
        assert_eq!(h.status().status, "ok");
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(h.status().status, "down", "no poll within the window");
        h.down("no round-trip");
        h.starting(true);
        assert_eq!(h.status().status, "down", "a restart is not a round-trip");
        assert_eq!(h.status().restarts, 1);
        h.poll_ok();
        let s = h.status();
        assert_eq!((s.status.as_str(), s.consecutive_failures), ("ok", 0));
        h.stopped(Some("disabled".into()));
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            h.status().status,
            "stopped",
            "a stopped channel is not down"
        );
    }
}
