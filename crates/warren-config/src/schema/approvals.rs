//! `[approvals]`: where tool approvals go besides the API (issue 38 §4, BEYOND-16). `notify`
//! lists channels (`"telegram.home"`) whose `owners` are asked, with Approve / Deny buttons, for
//! every approval of every entry point — a channel's turn, the gateway, cron, an SOP. How long a
//! request waits is the agent's risk profile's `approval_timeout_secs`; no answer in time is a
//! deny. With `notify` set, unattended turns (cron, SOP) wait for the approvers instead of being
//! denied at once.

use serde::{Deserialize, Serialize};

use crate::error::Problem;

/// `[approvals]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApprovalsConfig {
    /// Channels (`kind.name`) whose owners approve calls.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notify: Vec<String>,
}

impl ApprovalsConfig {
    pub fn is_empty(&self) -> bool {
        self.notify.is_empty()
    }

    /// Whether channel `name` (`telegram.home`) is listed.
    pub fn notifies(&self, name: &str) -> bool {
        self.notify.iter().any(|n| n == name)
    }
}

/// The problems of `[approvals]`: every `notify` entry names a configured channel.
pub fn validate(approvals: &ApprovalsConfig, telegram: &[&str]) -> Vec<Problem> {
    let mut out = Vec::new();
    for entry in &approvals.notify {
        let known = entry
            .strip_prefix("telegram.")
            .is_some_and(|name| telegram.contains(&name));
        if !known {
            out.push(
                Problem::at(
                    "approvals.notify",
                    format!("'{entry}' is not a configured channel"),
                )
                .with_hint(Some(
                    "name a channel as kind.name, e.g. \"telegram.home\" for [channels.telegram.home]"
                        .to_string(),
                )),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notify_names_configured_channels_issue38() {
        let a: ApprovalsConfig = toml::from_str("notify = [\"telegram.home\"]\n").unwrap();
        assert!(a.notifies("telegram.home"));
        assert!(validate(&a, &["home"]).is_empty());
        let problems = validate(&a, &["work"]);
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].key.as_deref(), Some("approvals.notify"));
        assert!(problems[0].message.contains("'telegram.home'"));
    }
}
