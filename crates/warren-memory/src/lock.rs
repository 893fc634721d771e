//! The backend lock (MEM-9): once an agent has written memory, its backend may not change
//! until the rows are migrated or purged. The lock is the store itself: a registration in the
//! SQLite or PostgreSQL `agents` table (made on the agent's first write), entries in its
//! Markdown files, or points in the Qdrant collection (Lucid's rows are SQLite's). No separate
//! marker or cache can drift from the data.
//!
//! [`BackendLock`] is a [`StateCheck`] for [`warren_config::ConfigStore`]: on a write or
//! reload it probes only agents whose effective backend changed; on `check_current` (config
//! validate, daemon start) it probes every agent. The error names where the rows live. A
//! Qdrant server that does not answer (or a damaged SQLite file) blocks only agents on another
//! backend (whose rows there cannot be ruled out); the agents that stay on it start, their
//! memory calls failing until it answers. A damaged SQLite file does not block the start
//! (issue 36 §1: it stops only memory, reported as a degraded store). An unreachable PostgreSQL server is an error (the rule cannot be checked).

use std::collections::BTreeMap;

use warren_config::schema::MemoryBackendKind;
use warren_config::{Config, InstallRoot, Problem, StateCheck};
use warren_core::AgentAlias;

use crate::error::MemoryError;
use crate::postgres::PostgresStore;

/// Where an agent has memory: backend, location, row count.
pub type Holding = (MemoryBackendKind, String, u64);

/// The MEM-9 rule, registered with `ConfigStore::with_check`.
#[derive(Debug, Default, Clone, Copy)]
pub struct BackendLock;

impl StateCheck for BackendLock {
    fn check(
        &self,
        root: &InstallRoot,
        previous: Option<&Config>,
        config: &Config,
    ) -> Vec<Problem> {
        let changed: Vec<(AgentAlias, MemoryBackendKind)> = config
            .agents()
            .map(|(alias, agent)| (alias, config.memory_backend_of(agent)))
            .filter(|(alias, kind)| {
                previous.is_none_or(|p| {
                    p.agent(alias)
                        .is_none_or(|old| p.memory_backend_of(old) != *kind)
                })
            })
            .collect();
        if changed.is_empty() {
            return Vec::new();
        }
        let Probe {
            held: holdings,
            unreachable,
        } = match probe(root, config, previous) {
            Ok(p) => p,
            Err(e) => {
                return vec![Problem::at(
                    "memory",
                    format!("cannot check where agents' memory lives (MEM-9): {e}"),
                )];
            }
        };
        // Lucid keeps its rows in the SQLite store: the two share one set of rows.
        let store_of = |k: MemoryBackendKind| match k {
            MemoryBackendKind::Lucid => MemoryBackendKind::Sqlite,
            k => k,
        };
        let mut out = Vec::new();
        // A server that does not answer hides only its own rows: an agent that stays on it
        // loses nothing (its calls report the server's error until it is back), so only agents
        // on another backend cannot be checked.
        for (kind, location, error) in &unreachable {
            let blocked: Vec<&AgentAlias> = changed
                .iter()
                .filter(|(_, k)| store_of(*k) != store_of(*kind))
                .map(|(a, _)| a)
                .collect();
            // A damaged SQLite store at start (nothing changes: the config on disk is checked
            // against the stores) stops only memory (issue 36 §1): the daemon starts and
            // reports the store as degraded; a change of backend is still refused below.
            let at_start = previous.is_none() && *kind == MemoryBackendKind::Sqlite;
            if blocked.is_empty() || at_start {
                tracing::warn!(backend = name(*kind), %location, %error, "memory backend unreachable; the agents on it start without memory until it answers");
                continue;
            }
            for alias in blocked {
                out.push(Problem::at(
                    format!("agents.{alias}.memory.backend"),
                    format!(
                        "cannot check whether agent '{alias}' has written memory to the {} backend \
                         at {location} (MEM-9): {error}",
                        name(*kind)
                    ),
                ));
            }
        }
        for (alias, kind) in changed {
            for (held_kind, location, rows) in holdings.get(alias.as_str()).into_iter().flatten() {
                if store_of(*held_kind) == store_of(kind) {
                    continue;
                }
                out.push(
                    Problem::at(
                        format!("agents.{alias}.memory.backend"),
                        format!(
                            "agent '{alias}' has written memory to the {} backend ({rows} rows in {location}); \
                             its memory backend is locked to {} (MEM-9) and cannot become {}",
                            name(*held_kind),
                            name(*held_kind),
                            name(kind)
                        ),
                    )
                    .with_hint(Some(format!(
                        "keep backend = \"{}\", or move the rows and purge them there first",
                        name(*held_kind)
                    ))),
                );
            }
        }
        out
    }
}

fn name(kind: MemoryBackendKind) -> &'static str {
    match kind {
        MemoryBackendKind::Sqlite => "sqlite",
        MemoryBackendKind::Postgres => "postgres",
        MemoryBackendKind::Markdown => "markdown",
        MemoryBackendKind::None => "none",
        MemoryBackendKind::Qdrant => "qdrant",
        MemoryBackendKind::Lucid => "lucid",
    }
}

/// Every store's agents with rows or a registration: alias → holdings. PostgreSQL is probed
/// when a URL is configured in `config` or `previous`; an unreachable server (PostgreSQL or
/// Qdrant) is an error (the rule cannot be checked), not a pass.
pub fn holdings(
    root: &InstallRoot,
    config: &Config,
    previous: Option<&Config>,
) -> Result<BTreeMap<String, Vec<Holding>>, MemoryError> {
    let probe = probe(root, config, previous)?;
    match probe.unreachable.into_iter().next() {
        Some((_, _, error)) => Err(error),
        None => Ok(probe.held),
    }
}

/// What the stores answered: the holdings of those that answered, and each store that did
/// not (a Qdrant server down, a damaged SQLite file: backend, location, error).
struct Probe {
    held: BTreeMap<String, Vec<Holding>>,
    unreachable: Vec<(MemoryBackendKind, String, MemoryError)>,
}

fn probe(
    root: &InstallRoot,
    config: &Config,
    previous: Option<&Config>,
) -> Result<Probe, MemoryError> {
    let mut out: BTreeMap<String, Vec<Holding>> = BTreeMap::new();
    let mut unreachable = Vec::new();
    let db = root.memory_db();
    // A damaged file hides its rows as a server that does not answer does (issue 36 §1).
    match crate::sqlite::registered_agents_at(&db) {
        Ok(found) => {
            for (alias, _backend, rows) in found {
                out.entry(alias).or_default().push((
                    MemoryBackendKind::Sqlite,
                    db.display().to_string(),
                    rows,
                ));
            }
        }
        Err(e) => unreachable.push((MemoryBackendKind::Sqlite, db.display().to_string(), e)),
    }
    for (alias, _) in config.agents() {
        let rows = crate::markdown::rows_of(root, &alias)?;
        if rows > 0 {
            out.entry(alias.to_string()).or_default().push((
                MemoryBackendKind::Markdown,
                root.agent_workspace(&alias).display().to_string(),
                rows,
            ));
        }
    }
    let pg = previous
        .into_iter()
        .chain(std::iter::once(config))
        .filter_map(|c| {
            c.memory
                .postgres
                .url
                .as_ref()
                .map(|u| (u.expose().to_string(), c.memory.postgres.schema.clone()))
        })
        .next_back();
    if let Some((url, schema)) = pg {
        let store = PostgresStore::new(&url, &schema)?;
        let location = crate::store::MemoryStore::location(&store);
        let found = block_on(async move { store.probe_registered().await })??;
        for (alias, _backend, rows) in found {
            out.entry(alias).or_default().push((
                MemoryBackendKind::Postgres,
                location.clone(),
                rows,
            ));
        }
    }
    // Qdrant: probed when an agent of either config is on it; a server that does not answer
    // leaves its rows unknown (see `Probe::unreachable`).
    let qdrant = previous
        .into_iter()
        .chain(std::iter::once(config))
        .rfind(|c| {
            c.memory.qdrant.url.is_some()
                && c.agents()
                    .any(|(_, a)| c.memory_backend_of(a) == MemoryBackendKind::Qdrant)
        });
    if let Some(c) = qdrant {
        let store = crate::qdrant::QdrantStore::new(&c.memory.qdrant, None)?;
        let location = crate::store::MemoryStore::location(&store);
        let mut aliases: Vec<AgentAlias> = config.agents().map(|(a, _)| a).collect();
        if let Some(p) = previous {
            aliases.extend(p.agents().map(|(a, _)| a));
        }
        aliases.sort();
        aliases.dedup();
        match block_on(async move { store.points_per_agent(aliases).await })? {
            Ok(found) => {
                for (alias, rows) in found {
                    out.entry(alias).or_default().push((
                        MemoryBackendKind::Qdrant,
                        location.clone(),
                        rows,
                    ));
                }
            }
            Err(e) => unreachable.push((MemoryBackendKind::Qdrant, location, e)),
        }
    }
    Ok(Probe {
        held: out,
        unreachable,
    })
}

/// Runs `fut` to completion on a runtime of its own, on a thread of its own, so the probe
/// works from synchronous code and from inside an async runtime alike.
fn block_on<T: Send + 'static>(
    fut: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, MemoryError> {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map(|rt| rt.block_on(fut))
            .map_err(|e| MemoryError::Worker(e.to_string()))
    })
    .join()
    .map_err(|_| MemoryError::Worker("backend lock probe panicked".into()))?
}
