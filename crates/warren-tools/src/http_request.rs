//! The `http_request` tool (issue 24 §1): an HTTP request the DAEMON makes for the agent (not
//! its sandbox), through the agent's egress ([`HttpEgress`], built by the runtime): the
//! `[agents.<alias>.network] allow` list, the DNS re-check, redirects only within the list,
//! the credential broker's `{{secret:NAME}}` placeholders and the response cap. What comes back
//! to the model has been scrubbed of every secret by the egress; this module only shapes it.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::json;

use crate::tool::{BoxFuture, RiskClass, Tool, ToolError, ToolOutput, parse_args};

/// One request as the model asked for it (placeholders not yet substituted).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpCall {
    #[serde(default = "get")]
    pub method: String,
    pub url: String,
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    pub body: Option<String>,
}

fn get() -> String {
    "GET".into()
}

/// What the egress answers (already scrubbed of secrets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpReply {
    /// The URL that answered (after redirects within the allowlist).
    pub url: String,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// The body was longer than the policy's cap and was cut.
    pub truncated: bool,
}

/// Why the egress made no call or got no answer: the egress's sentence for the model, naming
/// the rule or host at fault. It is text because the egress scrubs every secret out of it
/// before it leaves the daemon (a refused URL may carry a key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EgressRefused(pub String);

/// The daemon side of `http_request`: the agent's allowlist, broker and trace.
pub trait HttpEgress: Send + Sync {
    /// Makes `call`; an error is scrubbed and names the rule at fault.
    fn send(&self, call: HttpCall) -> BoxFuture<'_, Result<HttpReply, EgressRefused>>;
}

/// `http_request`, bound to one agent's egress.
pub struct HttpRequest {
    egress: Arc<dyn HttpEgress>,
}

impl HttpRequest {
    pub fn new(egress: Arc<dyn HttpEgress>) -> Self {
        Self { egress }
    }
}

/// Methods the tool sends.
const METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

impl Tool for HttpRequest {
    fn name(&self) -> &'static str {
        "http_request"
    }
    fn description(&self) -> &'static str {
        "Make an HTTP request from the daemon to a host on this agent's network allowlist. Put credentials as {{secret:NAME}} in the URL or a header: the daemon substitutes the value only for that secret's hosts (over https unless the secret allows http), and you never see it. The response's status, headers and text body (capped) come back."
    }
    fn parameters(&self) -> serde_json::Value {
        json!({"type": "object", "additionalProperties": false, "required": ["url"], "properties": {
            "method": {"type": "string", "enum": METHODS},
            "url": {"type": "string", "description": "http:// or https:// URL"},
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "body": {"type": "string"}
        }})
    }
    fn risk(&self) -> RiskClass {
        // A GET reads; a request with effects (another method, a body) is a side effect for the
        // taint rule, which the runtime applies per call.
        RiskClass::Read
    }
    fn execute(&self, args: serde_json::Value) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let mut call: HttpCall = parse_args(args)?;
            call.method = call.method.to_ascii_uppercase();
            if !METHODS.contains(&call.method.as_str()) {
                return Err(ToolError::InvalidArguments(format!(
                    "method '{}' is not one of {}",
                    call.method,
                    METHODS.join(", ")
                )));
            }
            let reply = self
                .egress
                .send(call)
                .await
                .map_err(|e| ToolError::Failed(e.0))?;
            let headers: serde_json::Map<String, serde_json::Value> = reply
                .headers
                .into_iter()
                .map(|(k, v)| (k, serde_json::Value::String(v)))
                .collect();
            Ok(ToolOutput::json(json!({
                "url": reply.url,
                "status": reply.status,
                "headers": headers,
                "body": reply.body,
                "truncated": reply.truncated,
            })))
        })
    }
}
