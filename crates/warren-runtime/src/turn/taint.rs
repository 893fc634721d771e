//! The taint rule (issue 24 §4, PERM-2): once a turn has taken in untrusted content, every
//! later call with side effects in that turn needs the operator's approval, whatever the
//! autonomy, unless the agent's risk profile sets `taint = "off"`. The approval prompt names
//! the first untrusted input.
//!
//! The marker itself is [`Taint`] (in `warren-tools`, so tools below the runtime can mark it
//! and read it: an MCP tool marks its result, `memory_store` stores with trust `untrusted`
//! after it). The runtime gives each turn a fresh marker and marks it after a call whose
//! result is untrusted ([`untrusted_input`]): an `http_request` response, an MCP tool result
//! (`mcp__*`), a file read from a sibling agent's workspace, the output of a shell command that
//! reached the network through the agent's egress proxy. An entry point whose input comes
//! from a non-operator (a channel message) calls [`Taint::mark`] before the turn's first call.

use warren_core::ToolCall;
use warren_security::sandbox::Sandbox;
use warren_security::{SecurityPolicy, Tier};
use warren_tools::RiskClass;

pub use warren_tools::Taint;

use crate::approval::Requirement;
use crate::delegate::DELEGATE_TOOL;

/// The name of the tool whose responses are untrusted (issue 24 §1).
pub const HTTP_TOOL: &str = "http_request";
/// The prefix of MCP tools (`mcp__<server>__<tool>`, issue 23): their results are untrusted.
pub const MCP_PREFIX: &str = "mcp__";

/// What untrusted input the successful `call` of the agent with `policy` and `sandbox` brought
/// into the turn, if any.
pub fn untrusted_input(
    policy: &SecurityPolicy,
    sandbox: &Sandbox,
    call: &ToolCall,
) -> Option<String> {
    let arg = |k: &str| call.arguments.get(k).and_then(|v| v.as_str());
    match call.name.as_str() {
        "shell" => sandbox.take_egress_use().then(|| {
            format!(
                "the output of shell command '{}', which reached the network through the egress proxy",
                arg("command").unwrap_or("?")
            )
        }),
        HTTP_TOOL => Some(format!(
            "the http_request response from {}",
            arg("url").unwrap_or("?")
        )),
        name if name.starts_with(MCP_PREFIX) => Some(format!("the result of MCP tool '{name}'")),
        "file_read" => {
            let path = arg("path")?;
            let resolved = policy.can_read(std::path::Path::new(path)).ok()?;
            matches!(
                resolved.tier,
                Tier::ReadOnly | Tier::ReadWrite | Tier::WriteOnly
            )
            .then(|| format!("file '{path}' from another agent's workspace"))
        }
        _ => None,
    }
}

/// Whether `call` (of a tool of risk `risk`) has side effects: every tool that is not a
/// reader, `delegate`, and an `http_request` that is not a plain GET (a method other than GET
/// or HEAD, or a body).
pub fn side_effecting(call: &ToolCall, risk: RiskClass) -> bool {
    match call.name.as_str() {
        HTTP_TOOL => http_has_effects(&call.arguments),
        DELEGATE_TOOL => true,
        _ => risk != RiskClass::Read,
    }
}

/// The risk a call is judged at: a tool's own class, except that an `http_request` with side
/// effects counts as a write (so `read_only` refuses it and `supervised` asks).
pub fn effective_risk(call: &ToolCall, risk: RiskClass) -> RiskClass {
    if call.name == HTTP_TOOL && http_has_effects(&call.arguments) {
        RiskClass::Write
    } else {
        risk
    }
}

/// Whether an `http_request` with `arguments` may change something on the other side.
pub fn http_has_effects(arguments: &serde_json::Value) -> bool {
    let method = arguments
        .get("method")
        .and_then(|m| m.as_str())
        .unwrap_or("GET");
    let body = arguments
        .get("body")
        .is_some_and(|b| !b.is_null() && b.as_str() != Some(""));
    body || !(method.eq_ignore_ascii_case("GET") || method.eq_ignore_ascii_case("HEAD"))
}

/// `needed` for `call` after the taint rule: a side-effecting call in a tainted turn asks
/// (a refusal stays a refusal; an existing question names the untrusted input too).
pub fn apply(
    policy: &SecurityPolicy,
    needed: Requirement,
    call: &ToolCall,
    risk: RiskClass,
) -> Requirement {
    if !policy.taint() || !side_effecting(call, risk) {
        return needed;
    }
    let Some(first) = Taint::first() else {
        return needed;
    };
    let why = format!(
        "this turn took in untrusted content (first: {first}) and '{}' has side effects (taint rule; risk profile taint = \"off\" turns it off)",
        call.name
    );
    match needed {
        Requirement::Refuse(r) => Requirement::Refuse(r),
        Requirement::Ask(reason) => Requirement::Ask(format!("{reason}; {why}")),
        Requirement::Run => Requirement::Ask(why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(name: &str, arguments: serde_json::Value) -> ToolCall {
        ToolCall {
            id: "c1".into(),
            name: name.into(),
            arguments,
        }
    }

    #[test]
    fn plain_gets_are_reads_and_everything_else_has_effects() {
        let get = call(HTTP_TOOL, json!({"url": "http://a/"}));
        assert!(!side_effecting(&get, RiskClass::Read));
        let head = call(HTTP_TOOL, json!({"url": "http://a/", "method": "head"}));
        assert!(!side_effecting(&head, RiskClass::Read));
        let post = call(HTTP_TOOL, json!({"url": "http://a/", "method": "POST"}));
        assert!(side_effecting(&post, RiskClass::Read));
        let get_body = call(HTTP_TOOL, json!({"url": "http://a/", "body": "x"}));
        assert!(side_effecting(&get_body, RiskClass::Read));
        assert!(side_effecting(
            &call(DELEGATE_TOOL, json!({})),
            RiskClass::Read
        ));
        assert!(side_effecting(
            &call("file_write", json!({})),
            RiskClass::Write
        ));
        assert!(side_effecting(
            &call("shell", json!({})),
            RiskClass::Execute
        ));
        assert!(!side_effecting(
            &call("file_read", json!({})),
            RiskClass::Read
        ));
    }
}
