//! The reference model of config (LIFE-1..4): every place an agent alias can appear, classified
//! hard (delete refused) or soft (scrubbed on delete, rewritten on rename).
//!
//! | Site                                         | Strength | Delete        | Rename      |
//! |----------------------------------------------|----------|---------------|-------------|
//! | `runtime.default_agent`                      | hard     | refuse        | rewrite     |
//! | `agents.<x>.workspace.access.<alias>`        | soft     | remove key    | re-key      |
//! | `agents.<x>.memory.read_memory_from[i]`      | soft     | drop element  | rewrite     |
//! | `cron.jobs.<job>.agent`                      | soft     | remove job    | rewrite     |
//! | `agents.<alias>.heartbeat` (its own)         | soft     | removed with it | moves with it |
//!
//! A removed job's rows and runs are archived by the cron store's share of the cascade
//! (`warren_store::agent_state::cron`) and come back disabled on restore.
//!
//! After a mutation the walk runs again on the edited (not yet saved) config; any remaining
//! reference aborts before anything is persisted.
//!
//! Outside config, a live ACP session is a hard reference too ([`live_acp`]): an active record
//! in `acp-sessions.db`, or a `warren acp` server of the agent running now (its live marker is
//! an OS lock, so a server killed with SIGKILL no longer counts).

use serde::Serialize;
use toml_edit::{Array, InlineTable, Value};
use warren_config::schema::MemoryGrant;
use warren_config::{Config, ConfigError, KeyPath, WriteTxn};
use warren_core::AgentAlias;
use warren_store::acp::AcpLive;
use warren_store::agent_state::{StateCause, StoreHandles};

/// Hard references block a delete; soft ones are scrubbed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Strength {
    Hard,
    Soft,
}

/// Where the reference sits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Site {
    DefaultAgent,
    WorkspaceAccess {
        owner: String,
        level: String,
    },
    MemoryGrant {
        owner: String,
        index: usize,
    },
    /// A declared cron job runs as the agent.
    CronJob {
        job: String,
    },
    /// The agent's own heartbeat (listed so a delete plan names it; removed with the agent).
    Heartbeat,
}

/// One reference to an alias.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RefSite {
    /// Dotted key path, as validation reports it.
    pub path: String,
    pub strength: Strength,
    pub site: Site,
}

fn key(parts: &[&str]) -> KeyPath {
    parts.iter().fold(KeyPath::default(), |p, k| p.push_key(*k))
}

/// Every reference to `alias` in `config` (its own entry excluded).
pub fn collect(config: &Config, alias: &str) -> Vec<RefSite> {
    let mut out = Vec::new();
    if config.runtime.default_agent.as_deref() == Some(alias) {
        out.push(RefSite {
            path: "runtime.default_agent".into(),
            strength: Strength::Hard,
            site: Site::DefaultAgent,
        });
    }
    for (job, decl) in &config.cron.jobs {
        if decl.agent == alias {
            out.push(RefSite {
                path: key(&["cron", "jobs", job, "agent"]).to_string(),
                strength: Strength::Soft,
                site: Site::CronJob { job: job.clone() },
            });
        }
    }
    if config
        .agents
        .get(alias)
        .is_some_and(|a| a.heartbeat.is_some())
    {
        out.push(RefSite {
            path: key(&["agents", alias, "heartbeat"]).to_string(),
            strength: Strength::Soft,
            site: Site::Heartbeat,
        });
    }
    for (owner, agent) in &config.agents {
        if owner == alias {
            continue;
        }
        if let Some(level) = agent.workspace.access.get(alias) {
            let level = serde_json::to_value(level)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            out.push(RefSite {
                path: key(&["agents", owner, "workspace", "access", alias]).to_string(),
                strength: Strength::Soft,
                site: Site::WorkspaceAccess {
                    owner: owner.to_string(),
                    level,
                },
            });
        }
        for (index, grant) in agent.memory.read_memory_from.iter().enumerate() {
            if grant.agent() == alias {
                out.push(RefSite {
                    path: format!(
                        "{}[{index}]",
                        key(&["agents", owner, "memory", "read_memory_from"])
                    ),
                    strength: Strength::Soft,
                    site: Site::MemoryGrant {
                        owner: owner.to_string(),
                        index,
                    },
                });
            }
        }
    }
    out
}

fn grants_value(grants: &[MemoryGrant], from: &str, to: Option<&str>) -> Value {
    let mut array = Array::new();
    for g in grants {
        let agent = if g.agent() == from {
            match to {
                Some(to) => to,
                None => continue,
            }
        } else {
            g.agent()
        };
        match g {
            MemoryGrant::All(_) => array.push(agent),
            MemoryGrant::Categories { categories, .. } => {
                let mut t = InlineTable::new();
                t.insert("agent", agent.into());
                let mut cats = Array::new();
                for c in categories {
                    cats.push(c.as_str());
                }
                t.insert("categories", Value::Array(cats));
                array.push(Value::InlineTable(t));
            }
        }
    }
    Value::Array(array)
}

/// Rewrites (rename, `to = Some`) or scrubs (delete, `to = None`) every site in `refs` inside
/// the open transaction. Hard sites are only rewritten; a delete never reaches here with one.
pub fn apply(
    txn: &mut WriteTxn<'_>,
    base: &Config,
    refs: &[RefSite],
    from: &str,
    to: Option<&str>,
) -> Result<(), ConfigError> {
    let mut grants_done: Vec<&str> = Vec::new();
    for r in refs {
        match &r.site {
            Site::DefaultAgent => match to {
                Some(to) => txn.set(&key(&["runtime", "default_agent"]), Value::from(to))?,
                None => {
                    txn.remove(&key(&["runtime", "default_agent"]))?;
                }
            },
            Site::WorkspaceAccess { owner, level } => {
                txn.remove(&key(&["agents", owner, "workspace", "access", from]))?;
                if let Some(to) = to {
                    txn.set(
                        &key(&["agents", owner, "workspace", "access", to]),
                        Value::from(level.as_str()),
                    )?;
                }
            }
            Site::CronJob { job } => match to {
                Some(to) => txn.set(&key(&["cron", "jobs", job, "agent"]), Value::from(to))?,
                None => {
                    txn.remove(&key(&["cron", "jobs", job]))?;
                }
            },
            // Inside the agent's own table: it moves (rename) or goes (delete) with it.
            Site::Heartbeat => {}
            Site::MemoryGrant { owner, .. } => {
                if grants_done.contains(&owner.as_str()) {
                    continue;
                }
                grants_done.push(owner);
                let Some(agent) = base.agents.get(owner) else {
                    continue;
                };
                txn.set(
                    &key(&["agents", owner, "memory", "read_memory_from"]),
                    grants_value(&agent.memory.read_memory_from, from, to),
                )?;
            }
        }
    }
    Ok(())
}

/// How many live ACP references `alias` has (LIFE-4, hard): its active ACP sessions plus the
/// `warren acp` servers serving it now. An error means "cannot tell" (callers fail closed).
pub fn live_acp(
    ctx: &super::stores::StoreContext,
    alias: &AgentAlias,
) -> Result<u64, super::store_error::StoreError> {
    super::store_error::scoped("acp", alias, || {
        let sessions = ctx.with_acp(|store| store.list(Some(alias)))?;
        let servers = AcpLive::servers(&ctx.root, alias).map_err(StateCause::from)?;
        Ok((sessions.len() + servers.len()) as u64)
    })
}

/// SOP definitions naming `alias` (hard, outside config): each a refusal naming the SOP and
/// its file (`warren_store::agent_state::sop`).
pub fn sop_refusals(root: &warren_config::InstallRoot, alias: &AgentAlias) -> Vec<String> {
    warren_store::agent_state::sop::refusals(root, alias)
}

/// The key path of `[agents.<alias>]`.
pub fn agent_key(alias: &str) -> KeyPath {
    key(&["agents", alias])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        toml_edit::de::from_str(text).unwrap_or_else(|e| panic!("{e}"))
    }

    const GRAPH: &str = r#"
[runtime]
default_agent = "c"
[agents.a.workspace.access]
b = "Read"
[agents.a.memory]
read_memory_from = ["b", { agent = "c", categories = ["x"] }]
[agents.b.workspace.access]
c = "ReadWrite"
[agents.c]
"#;

    #[test]
    fn every_site_is_found_and_classified_life4() {
        let c = config(GRAPH);
        let to_c: Vec<(String, Strength)> = collect(&c, "c")
            .into_iter()
            .map(|r| (r.path, r.strength))
            .collect();
        assert_eq!(
            to_c,
            vec![
                ("runtime.default_agent".to_string(), Strength::Hard),
                (
                    "agents.a.memory.read_memory_from[1]".to_string(),
                    Strength::Soft
                ),
                ("agents.b.workspace.access.c".to_string(), Strength::Soft),
            ]
        );
        let to_b: Vec<String> = collect(&c, "b").into_iter().map(|r| r.path).collect();
        assert_eq!(
            to_b,
            vec![
                "agents.a.workspace.access.b".to_string(),
                "agents.a.memory.read_memory_from[0]".to_string(),
            ]
        );
        assert!(
            collect(&c, "a").is_empty(),
            "an agent's own entry is not a reference"
        );
    }

    #[test]
    fn grants_are_rewritten_or_dropped_keeping_their_categories() {
        let c = config(GRAPH);
        let grants = &c.agents["a"].memory.read_memory_from;
        assert_eq!(
            grants_value(grants, "c", Some("sea")).to_string(),
            r#"["b", { agent = "sea", categories = ["x"] }]"#
        );
        assert_eq!(
            grants_value(grants, "b", None).to_string(),
            r#"[{ agent = "c", categories = ["x"] }]"#
        );
    }
}
