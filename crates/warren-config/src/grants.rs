//! The memory-grant rules (MEM-4, MEM-7, MEM-8): one rule set, used by config validation (every
//! refused grant becomes a [`Problem`](crate::Problem) at its key) and by the memory factory
//! (`warren_memory::create_memory_for_agent`, which refuses a handle whose config breaks one,
//! as a config may reach it without going through `ConfigStore`). Issue 14 §5.
//!
//! A grant `agents.<a>.memory.read_memory_from[i]` naming `b` (an alias, checked when the
//! config is read) is refused when `b` is granted twice, is `a` itself, is not configured,
//! keeps its memory in another backend than `a` (no cross-backend grants), or, for a category
//! grant, lists no category or `a`'s backend is Markdown (which keeps no categories).

use std::collections::BTreeSet;

use warren_core::AgentAlias;

use crate::error::did_you_mean;
use crate::schema::{Config, MemoryBackendKind, MemoryGrant};

/// One accepted grant: read `agent`'s memory, every category (`None`) or only these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryGrantRule {
    pub agent: AgentAlias,
    pub categories: Option<Vec<String>>,
}

/// Why a grant is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrantRefusal {
    /// The same agent appears in two entries.
    Twice,
    /// An agent granting itself.
    SelfGrant,
    /// No agent of that name is configured; `hint` is a close existing alias.
    UnknownAgent { hint: Option<String> },
    /// The two agents keep their memory in different backends.
    CrossBackend {
        own: MemoryBackendKind,
        other: MemoryBackendKind,
    },
    /// A category grant with no category.
    EmptyCategories,
    /// A category grant by an agent whose backend is Markdown.
    MarkdownCategories,
}

/// A refused grant: the entry's index in `read_memory_from`, the agent it names, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantProblem {
    pub index: usize,
    pub grant: AgentAlias,
    pub refusal: GrantRefusal,
}

impl GrantProblem {
    /// The rule it breaks and the way out, for `agent`'s grant (no key: callers add theirs).
    pub fn rule(&self, agent: &str) -> String {
        let sibling = &self.grant;
        match &self.refusal {
            GrantRefusal::Twice => {
                format!("agent '{sibling}' is granted twice; combine the categories into one grant")
            }
            GrantRefusal::SelfGrant => {
                "an agent always reads its own memory; remove this entry".to_string()
            }
            GrantRefusal::UnknownAgent { .. } => {
                format!("grant names agent '{sibling}', which does not exist")
            }
            GrantRefusal::CrossBackend { own, other } => format!(
                "'{agent}' uses memory backend {own:?} but '{sibling}' uses {other:?}; \
                 cross-backend memory grants are not supported (MEM-7)"
            ),
            GrantRefusal::EmptyCategories => {
                "categories is empty; grant the plain alias to share every category".to_string()
            }
            GrantRefusal::MarkdownCategories => "the markdown memory backend keeps no categories; \
                 only plain alias grants are accepted (MEM-4)"
                .to_string(),
        }
    }

    /// A suggestion, when there is one (a close alias for an unknown agent).
    pub fn hint(&self) -> Option<String> {
        match &self.refusal {
            GrantRefusal::UnknownAgent { hint } => hint.clone(),
            _ => None,
        }
    }
}

/// The grants of `agent` (a configured agent's `read_memory_from`) under the rules: the
/// accepted ones in order, and every refused one. An unknown `agent` has neither.
pub fn memory_grants(
    config: &Config,
    agent: &AgentAlias,
) -> (Vec<MemoryGrantRule>, Vec<GrantProblem>) {
    let (mut ok, mut refused) = (Vec::new(), Vec::new());
    let Some(own) = config.agents.get(agent) else {
        return (ok, refused);
    };
    let own_backend = config.memory_backend_of(own);
    let mut seen = BTreeSet::new();
    for (index, grant) in own.memory.read_memory_from.iter().enumerate() {
        let name = grant.agent();
        let mut refuse = |refusal| {
            refused.push(GrantProblem {
                index,
                grant: name.clone(),
                refusal,
            })
        };
        if !seen.insert(name) {
            refuse(GrantRefusal::Twice);
            continue;
        }
        if name == agent {
            refuse(GrantRefusal::SelfGrant);
            continue;
        }
        let Some(other) = config.agent(name) else {
            let hint = did_you_mean(name, config.agents.keys().map(AgentAlias::as_str));
            refuse(GrantRefusal::UnknownAgent { hint });
            continue;
        };
        let before = refused.len();
        let other_backend = config.memory_backend_of(other);
        if other_backend != own_backend {
            refused.push(GrantProblem {
                index,
                grant: name.clone(),
                refusal: GrantRefusal::CrossBackend {
                    own: own_backend,
                    other: other_backend,
                },
            });
        }
        let categories = match grant {
            MemoryGrant::All(_) => None,
            MemoryGrant::Categories { categories, .. } => {
                for (broken, refusal) in [
                    (categories.is_empty(), GrantRefusal::EmptyCategories),
                    (
                        own_backend == MemoryBackendKind::Markdown,
                        GrantRefusal::MarkdownCategories,
                    ),
                ] {
                    if broken {
                        refused.push(GrantProblem {
                            index,
                            grant: name.clone(),
                            refusal,
                        });
                    }
                }
                Some(categories.clone())
            }
        };
        if refused.len() == before {
            ok.push(MemoryGrantRule {
                agent: name.clone(),
                categories,
            });
        }
    }
    (ok, refused)
}
