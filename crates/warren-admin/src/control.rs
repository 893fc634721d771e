//! The lifecycle part of the typed control seam (issue 34 §3; codex-rs's `Op`): `warren agents
//! add|rename|delete|restore|resume` build one [`LifecycleOp`], and one executor runs it,
//! [`Lifecycle::execute`] — in the CLI's process when no daemon runs, in the daemon when one
//! does. The seam itself (the one `AdminOp` enum over every admin verb, the `Control` trait and
//! its local and daemon implementations) is `warren_gateway::control`: it sits above the jobs
//! crate, whose cron and SOP verbs it carries too. The wire form is this enum's serde form.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use warren_core::AgentAlias;

use crate::lifecycle::{Lifecycle, LifecycleError};

/// One lifecycle verb, as the CLI asks for it and the daemon's admin routes receive it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum LifecycleOp {
    /// `warren agents add`: `[agents.<alias>]` with the given fields.
    Add {
        alias: AgentAlias,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        risk_profile: Option<String>,
    },
    Rename {
        alias: AgentAlias,
        to: AgentAlias,
    },
    Delete {
        alias: AgentAlias,
    },
    DeletePlan {
        alias: AgentAlias,
    },
    Restore {
        archive: String,
        #[serde(default, rename = "as", skip_serializing_if = "Option::is_none")]
        as_alias: Option<AgentAlias>,
    },
    Resume {},
}

/// The wire names of the lifecycle verbs.
pub const LIFECYCLE_OPS: &[&str] = &[
    "add",
    "rename",
    "delete",
    "delete_plan",
    "restore",
    "resume",
];

impl LifecycleOp {
    /// The verb's name (`rename`, `delete_plan`, ...), as on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            LifecycleOp::Add { .. } => "add",
            LifecycleOp::Rename { .. } => "rename",
            LifecycleOp::Delete { .. } => "delete",
            LifecycleOp::DeletePlan { .. } => "delete_plan",
            LifecycleOp::Restore { .. } => "restore",
            LifecycleOp::Resume {} => "resume",
        }
    }

    /// Whether the verb changes the config (the daemon reloads after it).
    pub fn mutates(&self) -> bool {
        !matches!(
            self,
            LifecycleOp::DeletePlan { .. } | LifecycleOp::Resume {}
        )
    }
}

/// What `warren agents add` did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AddReport {
    pub op: &'static str,
    pub alias: AgentAlias,
    pub workspace: std::path::PathBuf,
    pub config_generation: u64,
    pub warnings: Vec<String>,
}

impl Lifecycle {
    /// THE executor of a [`LifecycleOp`]: its report (an add/rename/delete/restore report, a
    /// delete plan, or the list of converged journals) as JSON.
    pub async fn execute(&self, op: &LifecycleOp) -> Result<Value, LifecycleError> {
        let json = |v: Result<Value, serde_json::Error>| {
            v.map_err(|e| LifecycleError::Worker(format!("cannot encode the report: {e}")))
        };
        match op {
            LifecycleOp::Add {
                alias,
                provider,
                model,
                risk_profile,
            } => {
                let fields: Vec<(&'static str, String)> = [
                    ("provider", provider),
                    ("model", model),
                    ("risk_profile", risk_profile),
                ]
                .into_iter()
                .filter_map(|(k, v)| v.clone().map(|v| (k, v)))
                .collect();
                json(serde_json::to_value(self.add(alias, fields).await?))
            }
            LifecycleOp::Rename { alias, to } => {
                json(serde_json::to_value(self.rename(alias, to).await?))
            }
            LifecycleOp::Delete { alias } => json(serde_json::to_value(self.delete(alias).await?)),
            LifecycleOp::DeletePlan { alias } => {
                json(serde_json::to_value(self.delete_plan(alias).await?))
            }
            LifecycleOp::Restore { archive, as_alias } => json(serde_json::to_value(
                self.restore(archive, as_alias.as_ref()).await?,
            )),
            LifecycleOp::Resume {} => json(serde_json::to_value(self.converge_pending().await)),
        }
    }

    /// `warren agents add`: the new `[agents.<alias>]` table, through the one config write
    /// lock (CFG-3); refuses an alias that exists.
    async fn add(
        &self,
        alias: &AgentAlias,
        fields: Vec<(&'static str, String)>,
    ) -> Result<AddReport, LifecycleError> {
        let added = alias.clone();
        let outcome = self
            .blocking(move |me, _| {
                let fields: Vec<(&str, &str)> =
                    fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
                let mut txn = me.config().write_blocking()?;
                txn.add_agent(&added, &fields)?;
                txn.commit()
            })
            .await??;
        Ok(AddReport {
            op: "add",
            alias: alias.clone(),
            workspace: self.root().agent_workspace(alias),
            config_generation: outcome.generation,
            warnings: outcome.warnings,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alias(s: &str) -> AgentAlias {
        AgentAlias::new(s).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The wire form is the one the admin route has always read (`op` tag, `as` for the new
    /// alias of a restore), and it round-trips.
    #[test]
    fn every_verb_round_trips_in_the_admin_routes_wire_form_issue34() {
        let ops = [
            (
                LifecycleOp::Add {
                    alias: alias("a"),
                    provider: Some("demo".into()),
                    model: None,
                    risk_profile: Some("strict".into()),
                },
                r#"{"op":"add","alias":"a","provider":"demo","risk_profile":"strict"}"#,
            ),
            (
                LifecycleOp::Add {
                    alias: alias("a"),
                    provider: None,
                    model: None,
                    risk_profile: None,
                },
                r#"{"op":"add","alias":"a"}"#,
            ),
            (
                LifecycleOp::Rename {
                    alias: alias("a"),
                    to: alias("b"),
                },
                r#"{"op":"rename","alias":"a","to":"b"}"#,
            ),
            (
                LifecycleOp::Delete { alias: alias("a") },
                r#"{"op":"delete","alias":"a"}"#,
            ),
            (
                LifecycleOp::DeletePlan { alias: alias("a") },
                r#"{"op":"delete_plan","alias":"a"}"#,
            ),
            (
                LifecycleOp::Restore {
                    archive: "a-20261201".into(),
                    as_alias: Some(alias("c")),
                },
                r#"{"op":"restore","archive":"a-20261201","as":"c"}"#,
            ),
            (
                LifecycleOp::Restore {
                    archive: "a-20261201".into(),
                    as_alias: None,
                },
                r#"{"op":"restore","archive":"a-20261201"}"#,
            ),
            (LifecycleOp::Resume {}, r#"{"op":"resume"}"#),
        ];
        for (op, wire) in ops {
            assert_eq!(serde_json::to_string(&op).unwrap_or_default(), wire);
            let back: LifecycleOp = serde_json::from_str(wire).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(back, op);
            assert_eq!(op.name(), wire.split('"').nth(3).unwrap_or_default());
            assert!(LIFECYCLE_OPS.contains(&op.name()));
        }
        assert!(serde_json::from_str::<LifecycleOp>(r#"{"op":"rename","alias":"a"}"#).is_err());
        assert!(
            serde_json::from_str::<LifecycleOp>(r#"{"op":"delete","alias":"a","extra":1}"#)
                .is_err(),
            "unknown fields are refused"
        );
        assert!(
            serde_json::from_str::<LifecycleOp>(r#"{"op":"resume","alias":"a"}"#).is_err(),
            "a verb without fields refuses fields too"
        );
    }
}
