//! `max_actions_per_hour` (PERM-2, issue 14): every tool execution of an agent takes a slot in
//! its one-hour sliding window, held by the process: the daemon's window spans its reloads and
//! every entry point it serves (the gateway's chats, ACP, cron and SOP turns, and the tool
//! calls cron command jobs and SOP tool steps run without a turn), while a `warren agent`
//! process counts its own turns only. The limit is read from the agent's `SecurityPolicy`
//! only, so a subagent, whose policy `narrow` capped at its parent's, counts in the same window
//! under a limit no higher than the parent's.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use warren_core::AgentAlias;

/// The window's length.
pub const WINDOW: Duration = Duration::from_secs(3600);

/// A call refused because the agent used its actions for the hour.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "agent '{agent}' reached max_actions_per_hour = {limit} (its risk profile); the next tool call is possible in {} (the window frees its oldest action then)",
    human(*resets_in)
)]
pub struct ActionLimited {
    pub agent: AgentAlias,
    pub limit: u32,
    /// Until the oldest action in the window leaves it.
    pub resets_in: Duration,
}

fn human(d: Duration) -> String {
    let secs = d.as_secs().max(1);
    match (secs / 60, secs % 60) {
        (0, s) => format!("{s}s"),
        (m, s) => format!("{m}m {s}s"),
    }
}

/// Each agent's tool executions of the last hour.
#[derive(Debug, Default)]
pub struct ActionWindow {
    agents: Mutex<HashMap<AgentAlias, VecDeque<Instant>>>,
}

impl ActionWindow {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes a slot for one action of `agent` under `limit`, or says when one frees.
    pub fn admit(&self, agent: &AgentAlias, limit: u32) -> Result<(), ActionLimited> {
        self.admit_at(agent, limit, Instant::now())
    }

    fn admit_at(&self, agent: &AgentAlias, limit: u32, now: Instant) -> Result<(), ActionLimited> {
        let mut agents = self.agents.lock().unwrap_or_else(|p| p.into_inner());
        // Looked up without cloning the alias: every tool call passes here.
        if !agents.contains_key(agent) {
            agents.insert(agent.clone(), VecDeque::new());
        }
        let Some(window) = agents.get_mut(agent) else {
            return Ok(());
        };
        while window
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= WINDOW)
        {
            window.pop_front();
        }
        if window.len() >= limit as usize {
            let resets_in = window.front().map_or(WINDOW, |t| {
                WINDOW.saturating_sub(now.saturating_duration_since(*t))
            });
            return Err(ActionLimited {
                agent: agent.clone(),
                limit,
                resets_in,
            });
        }
        window.push_back(now);
        Ok(())
    }

    /// Actions of `agent` in the window now.
    pub fn used(&self, agent: &AgentAlias) -> usize {
        let now = Instant::now();
        self.agents
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(agent)
            .map_or(0, |w| {
                w.iter()
                    .filter(|t| now.saturating_duration_since(**t) < WINDOW)
                    .count()
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_n_plus_first_action_waits_for_the_oldest_to_leave_the_window() {
        let w = ActionWindow::new();
        let a = AgentAlias::new("ada").unwrap_or_else(|e| panic!("{e}"));
        let t0 = Instant::now();
        for i in 0..3 {
            w.admit_at(&a, 3, t0 + Duration::from_secs(i * 60))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let refused = w
            .admit_at(&a, 3, t0 + Duration::from_secs(600))
            .expect_err("the fourth action in the hour");
        assert_eq!(refused.limit, 3);
        assert_eq!(refused.resets_in, Duration::from_secs(3000));
        assert!(refused.to_string().contains("max_actions_per_hour = 3"));
        assert!(refused.to_string().contains("50m 0s"), "{refused}");
        // An hour after the first action, its slot is free again (the window resets).
        w.admit_at(&a, 3, t0 + WINDOW)
            .unwrap_or_else(|e| panic!("{e}"));
        // Other agents have their own window.
        let b = AgentAlias::new("bee").unwrap_or_else(|e| panic!("{e}"));
        w.admit_at(&b, 1, t0).unwrap_or_else(|e| panic!("{e}"));
    }
}
