//! The gateway's state: what lives for the whole process (pairing lockouts, the device
//! registry, the local admin key) and what one config generation derived (agent posture).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use axum::http::HeaderMap;
use serde::Serialize;
use warren_config::{Config, ConfigStore, InstallRoot};
use warren_daemon::{Generation, ReloadTrigger};
use warren_runtime::{AgentHost, AgentKit, CancelToken};

use crate::devices::{DeviceError, Devices};
use crate::pairing::{self, Pairing, RandomError};

/// State that survives reloads (STATE-20: rotated only by a process restart).
pub struct ProcessState {
    pub pairing: Pairing,
    /// `None` with the reason when `data/devices.db` cannot be opened (reported in health).
    pub devices: Result<Devices, DeviceError>,
    /// Authenticates `warren pair` / `warren tokens` on loopback admin routes; published in
    /// `data/gateway.json` (0600).
    pub admin_key: String,
    /// Turns a JSON chat caller follows (`GET /api/turns/{id}`, issue 16 §2).
    pub turns: crate::turns::Turns,
    last_touch: Mutex<HashMap<String, Instant>>,
}

impl std::fmt::Debug for ProcessState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessState")
            .field("devices", &self.devices)
            .finish_non_exhaustive()
    }
}

const TOUCH_EVERY: Duration = Duration::from_secs(60);

impl ProcessState {
    pub fn new(root: &InstallRoot) -> Result<Self, RandomError> {
        Ok(Self {
            pairing: Pairing::default(),
            devices: Devices::open(&root.devices_db()),
            admin_key: pairing::new_key()?,
            turns: crate::turns::Turns::default(),
            last_touch: Mutex::new(HashMap::new()),
        })
    }

    /// Updates the device's "last seen" at most once a minute, off the request path.
    fn touch(&self, hash: &str) {
        let Ok(devices) = &self.devices else { return };
        {
            let mut seen = match self.last_touch.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            let now = Instant::now();
            if seen
                .get(hash)
                .is_some_and(|t| now.duration_since(*t) < TOUCH_EVERY)
            {
                return;
            }
            seen.insert(hash.to_string(), now);
        }
        let (devices, hash) = (devices.clone(), hash.to_string());
        tokio::task::spawn_blocking(move || {
            let _ = devices.touch(&hash);
        });
    }
}

/// One agent as `/api/status` shows it; `sandbox` is its posture or why it cannot start.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentReport {
    pub alias: warren_core::AgentAlias,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub risk_profile: String,
    pub ok: bool,
    pub sandbox: serde_json::Value,
}

/// Builds each agent's kit (policy + sandbox) once per generation, for status and health.
pub fn agent_reports(config: &Config, root: &InstallRoot) -> Vec<AgentReport> {
    config
        .agents()
        .map(|(alias, agent)| {
            let (ok, sandbox) = match AgentKit::build(config, root, &alias) {
                Ok(kit) => (true, kit.sandbox().posture()),
                Err(e) => (false, serde_json::json!({"error": e.to_string()})),
            };
            AgentReport {
                alias: alias.clone(),
                provider: agent.provider.clone(),
                model: agent.model.clone(),
                risk_profile: agent.risk_profile.clone(),
                ok,
                sandbox,
            }
        })
        .collect()
}

/// Everything a handler sees. Cheap to clone.
#[derive(Clone, Debug)]
pub struct AppState(pub(crate) Arc<Inner>);

#[derive(Debug)]
pub(crate) struct Inner {
    pub root: InstallRoot,
    pub store: ConfigStore,
    /// The daemon generation this gateway was built for.
    pub generation: u64,
    pub started_at: SystemTime,
    pub generation_since: SystemTime,
    pub reload: Option<ReloadTrigger>,
    pub process: Arc<ProcessState>,
    pub local_addr: Option<SocketAddr>,
    /// Each agent's posture; empty until built (the listener serves before, see `server`).
    pub agents: std::sync::OnceLock<Vec<AgentReport>>,
    /// Agents, sessions, queue, trace and costs of this generation.
    pub host: Arc<AgentHost>,
    /// The cron scheduler and SOP engine of this generation (the daemon's hooks start them).
    pub jobs: Arc<warren_daemon::hooks::Jobs>,
    /// Fired when this generation's listener stops: live streams end so the reload can finish.
    pub shutdown: CancelToken,
}

impl AppState {
    pub fn new(
        generation: &Generation,
        process: Arc<ProcessState>,
        local_addr: Option<SocketAddr>,
        agents: Vec<AgentReport>,
    ) -> Self {
        let state = Self::starting(generation, process, local_addr);
        state.set_agents(agents);
        state
    }

    /// [`AppState::new`] whose agent reports come later ([`AppState::set_agents`]): the
    /// listener serves `/health` while the agents' sandboxes are probed.
    pub fn starting(
        generation: &Generation,
        process: Arc<ProcessState>,
        local_addr: Option<SocketAddr>,
    ) -> Self {
        Self(Arc::new(Inner {
            root: generation.root.clone(),
            store: generation.store.clone(),
            generation: generation.snapshot.generation(),
            started_at: generation.started_at,
            generation_since: SystemTime::now(),
            reload: Some(generation.reload.clone()),
            process,
            local_addr,
            agents: std::sync::OnceLock::new(),
            host: Arc::clone(&generation.host),
            jobs: Arc::clone(&generation.jobs),
            shutdown: CancelToken::new(),
        }))
    }

    /// Publishes the agent reports of a state made by [`AppState::starting`].
    pub fn set_agents(&self, agents: Vec<AgentReport>) {
        let _ = self.0.agents.set(agents);
    }

    /// The agent reports, `None` while they are being built.
    pub fn agents(&self) -> Option<&[AgentReport]> {
        self.0.agents.get().map(Vec::as_slice)
    }

    /// The cron scheduler and SOP engine of this generation, while they run.
    pub fn jobs(&self) -> &warren_daemon::hooks::Jobs {
        &self.0.jobs
    }

    /// The process's store handles (control plane, cron, SOP runs; never opened by a handler).
    pub fn stores(&self) -> &Arc<warren_runtime::stores::Stores> {
        self.0.host.stores()
    }

    /// The agents of this generation.
    pub fn host(&self) -> &Arc<AgentHost> {
        &self.0.host
    }

    /// Fired when this generation's listener stops.
    pub fn shutdown(&self) -> &CancelToken {
        &self.0.shutdown
    }

    pub fn root(&self) -> &InstallRoot {
        &self.0.root
    }

    pub fn store(&self) -> &ConfigStore {
        &self.0.store
    }

    pub fn process(&self) -> &Arc<ProcessState> {
        &self.0.process
    }

    /// The hash of the presented bearer token if it is in the live canonical set.
    pub fn authenticate(&self, headers: &HeaderMap) -> Option<String> {
        let token = bearer(headers)?;
        let snapshot = self.0.store.snapshot();
        let hash = pairing::find_token(
            token,
            snapshot.gateway.paired_tokens.iter().map(|s| s.expose()),
        )?
        .to_string();
        self.0.process.touch(&hash);
        Some(hash)
    }
}

/// The token of `Authorization: Bearer <token>`, if present.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}
