//! Tool approvals by autonomy level (LOOP-1, issue 7 §5). The channel that asks the operator
//! is the [`Approver`] interface: the CLI prompts on the terminal; the gateway will add an HTTP
//! one. No answer within the policy's approval timeout (`approval_timeout_secs` of the risk
//! profile, as `SecurityPolicy` carries it) = denied.
//!
//! What needs asking before a call runs ([`requirement_for`], read from the agent's
//! `SecurityPolicy` only, so a subagent asks under exactly what `narrow` left it):
//! - `read_only`: only `Read` tools run; anything with side effects is refused.
//! - `supervised`: `Write` tools (medium risk) are asked about; `Execute` (the shell) goes to
//!   the shell's own command policy, which asks (medium) or blocks (high) through
//!   `ToolError::ApprovalRequired` / `Denied`.
//! - `full`: only tools listed in the risk profile's `always_ask` are asked about.
//!
//! `always_ask` applies at every level. A risk profile with `approve_own_writes = true` (the
//! starter config's `starter` profile) lets `supervised` run, without asking, `file_write` and
//! `file_edit` on a path the policy resolves into the agent's OWN workspace and
//! `memory_store`/`memory_forget` (its own memory); a sibling workspace, git writes and the
//! shell still ask. With nobody to ask (a one-shot run without a terminal: [`NoOperator`]),
//! a call that needs approval fails at once with [`NO_OPERATOR`].

use std::time::Duration;

use serde::Serialize;
use warren_config::schema::Autonomy;
use warren_security::SecurityPolicy;
pub use warren_tools::BoxFuture;
use warren_tools::RiskClass;

/// What the operator is asked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApprovalRequest {
    pub agent: warren_core::AgentAlias,
    pub tool: String,
    pub arguments: serde_json::Value,
    /// Why approval is needed.
    pub reason: String,
    /// The session of the turn that asks (who asked: `tg_home_7_7`, `cron-backup-12`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
}

/// The operator's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    Approved,
    Denied,
    /// Nobody answered in time (treated as denied).
    TimedOut,
    /// There is nobody to ask (no terminal, no approval channel): not run, at once.
    NoOperator,
}

/// What a call that needs approval answers when there is nobody to ask.
pub const NO_OPERATOR: &str = "needs approval: rerun in a terminal, or allow it in the profile";

/// A channel that asks the operator.
pub trait Approver: Send + Sync {
    fn ask(&self, request: ApprovalRequest) -> BoxFuture<'_, ApprovalDecision>;

    /// [`Approver::ask`], telling `announce` the id the operator decides the request by once
    /// it can be decided. Channels whose requests are decided elsewhere by id (the gateway's
    /// `GET /api/approvals` list) announce it, so the turn can show it (the SSE `approval`
    /// event); a channel that asks in place (the terminal prompt) has nothing to announce.
    fn ask_announced(
        &self,
        request: ApprovalRequest,
        announce: &(dyn Fn(&str) + Send + Sync),
    ) -> BoxFuture<'_, ApprovalDecision> {
        let _ = announce;
        self.ask(request)
    }

    /// Who decided the announced request `id` (`telegram.home:7`, `api`), for the trace; asked
    /// once, after the decision. Channels that decide in place know no more than the decision.
    fn decided_by(&self, id: &str) -> Option<String> {
        let _ = id;
        None
    }
}

/// Denies everything (non-interactive runs without an approval channel).
#[derive(Debug, Clone, Copy, Default)]
pub struct DenyAll;

impl Approver for DenyAll {
    fn ask(&self, _request: ApprovalRequest) -> BoxFuture<'_, ApprovalDecision> {
        Box::pin(async { ApprovalDecision::Denied })
    }
}

/// Nobody to ask (a one-shot `warren agent -m` without a terminal): every request is answered
/// [`ApprovalDecision::NoOperator`] at once, never after the approval timeout.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoOperator;

impl Approver for NoOperator {
    fn ask(&self, _request: ApprovalRequest) -> BoxFuture<'_, ApprovalDecision> {
        Box::pin(async { ApprovalDecision::NoOperator })
    }
}

/// Approves everything (tests and benchmarks only; never the default of an entry point).
#[derive(Debug, Clone, Copy, Default)]
pub struct ApproveAll;

impl Approver for ApproveAll {
    fn ask(&self, _request: ApprovalRequest) -> BoxFuture<'_, ApprovalDecision> {
        Box::pin(async { ApprovalDecision::Approved })
    }
}

/// Asks `approver`, giving up after `timeout` (= [`ApprovalDecision::TimedOut`]).
pub async fn ask_with_timeout(
    approver: &dyn Approver,
    request: ApprovalRequest,
    timeout: Duration,
) -> ApprovalDecision {
    ask_announced_with_timeout(approver, request, timeout, &|_| {}).await
}

/// [`ask_with_timeout`] through [`Approver::ask_announced`].
pub async fn ask_announced_with_timeout(
    approver: &dyn Approver,
    request: ApprovalRequest,
    timeout: Duration,
    announce: &(dyn Fn(&str) + Send + Sync),
) -> ApprovalDecision {
    tokio::time::timeout(timeout, approver.ask_announced(request, announce))
        .await
        .unwrap_or(ApprovalDecision::TimedOut)
}

/// What the runtime must do before a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// Run it (the tool's own policy still applies).
    Run,
    /// Ask the operator first.
    Ask(String),
    /// Refuse without running.
    Refuse(String),
}

/// Tools that only write the agent's own memory.
const OWN_MEMORY_WRITES: [&str; 2] = ["memory_store", "memory_forget"];
/// File tools whose `path` argument decides whose files they write.
const FILE_WRITES: [&str; 2] = ["file_write", "file_edit"];

/// The requirement for calling `tool` (of risk `risk`) with `arguments` under `policy`: its
/// autonomy, its `always_ask` and its `approve_own_writes`. Every caller that runs a tool for
/// an agent asks this.
pub fn requirement_for(
    policy: &SecurityPolicy,
    tool: &str,
    risk: RiskClass,
    arguments: &serde_json::Value,
) -> Requirement {
    let needed = requirement(policy.autonomy(), policy.always_ask(), tool, risk);
    if matches!(needed, Requirement::Ask(_))
        && policy.autonomy() == Autonomy::Supervised
        && policy.approve_own_writes()
        && !policy.always_asks(tool)
        && writes_only_own(policy, tool, arguments)
    {
        return Requirement::Run;
    }
    needed
}

/// `needed` under a lower autonomy `cap` (an ACP session's mode): `read_only` refuses every
/// call with side effects, `supervised` asks for a call that changes files or state.
pub fn capped(needed: Requirement, cap: Autonomy, tool: &str, risk: RiskClass) -> Requirement {
    match (cap, needed) {
        (_, Requirement::Refuse(r)) => Requirement::Refuse(r),
        (Autonomy::ReadOnly, _) if risk != RiskClass::Read => Requirement::Refuse(format!(
            "the session's mode is read_only: '{tool}' has side effects and is not run"
        )),
        (Autonomy::Supervised, Requirement::Run) if risk == RiskClass::Write => Requirement::Ask(
            format!("the session's mode is supervised: '{tool}' changes files or state"),
        ),
        (_, needed) => needed,
    }
}

/// Whether this call writes only the agent's own memory or a file the policy resolves into its
/// own workspace (a sibling grant, a path outside, a link leading out: no).
fn writes_only_own(policy: &SecurityPolicy, tool: &str, arguments: &serde_json::Value) -> bool {
    if OWN_MEMORY_WRITES.contains(&tool) {
        return true;
    }
    if !FILE_WRITES.contains(&tool) {
        return false;
    }
    let Some(path) = arguments.get("path").and_then(|p| p.as_str()) else {
        return false;
    };
    policy
        .can_write(std::path::Path::new(path))
        .is_ok_and(|r| r.tier == warren_security::Tier::Workspace)
}

/// The rule behind [`requirement_for`], on the two policy values it reads: `tool` (of risk
/// `risk`) at `autonomy` with `always_ask`.
fn requirement(
    autonomy: Autonomy,
    always_ask: &[String],
    tool: &str,
    risk: RiskClass,
) -> Requirement {
    let listed = always_ask.iter().any(|t| t == "*" || t == tool);
    match autonomy {
        Autonomy::ReadOnly if risk != RiskClass::Read => Requirement::Refuse(format!(
            "autonomy is read_only: '{tool}' has side effects and is not run"
        )),
        _ if listed => Requirement::Ask(format!("'{tool}' is listed in always_ask")),
        Autonomy::Supervised if risk == RiskClass::Write => Requirement::Ask(format!(
            "supervised autonomy: '{tool}' changes files or state"
        )),
        _ => Requirement::Run,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(autonomy: Autonomy, always_ask: &[&str]) -> (Autonomy, Vec<String>) {
        (autonomy, always_ask.iter().map(|s| s.to_string()).collect())
    }

    fn requirement(p: &(Autonomy, Vec<String>), tool: &str, risk: RiskClass) -> Requirement {
        super::requirement(p.0, &p.1, tool, risk)
    }

    #[test]
    fn autonomy_levels_decide_what_is_asked() {
        use Requirement::*;
        let ro = profile(Autonomy::ReadOnly, &[]);
        assert_eq!(requirement(&ro, "file_read", RiskClass::Read), Run);
        assert!(matches!(
            requirement(&ro, "file_write", RiskClass::Write),
            Refuse(_)
        ));
        assert!(matches!(
            requirement(&ro, "shell", RiskClass::Execute),
            Refuse(_)
        ));
        let sup = profile(Autonomy::Supervised, &[]);
        assert_eq!(requirement(&sup, "file_read", RiskClass::Read), Run);
        assert!(matches!(
            requirement(&sup, "file_write", RiskClass::Write),
            Ask(_)
        ));
        assert_eq!(requirement(&sup, "shell", RiskClass::Execute), Run);
        let full = profile(Autonomy::Full, &["shell"]);
        assert_eq!(requirement(&full, "file_write", RiskClass::Write), Run);
        assert!(matches!(
            requirement(&full, "shell", RiskClass::Execute),
            Ask(_)
        ));
    }

    #[tokio::test]
    async fn no_answer_in_time_is_denied() {
        struct Never;
        impl Approver for Never {
            fn ask(&self, _r: ApprovalRequest) -> BoxFuture<'_, ApprovalDecision> {
                Box::pin(std::future::pending())
            }
        }
        let req = ApprovalRequest {
            agent: "a".parse().unwrap(),
            tool: "t".into(),
            arguments: serde_json::json!({}),
            reason: "r".into(),
            session: None,
        };
        let d = ask_with_timeout(&Never, req, Duration::from_millis(10)).await;
        assert_eq!(d, ApprovalDecision::TimedOut);
    }
}
