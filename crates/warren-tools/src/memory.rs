//! The memory tools `memory_store`, `memory_recall` and `memory_forget` (MEM-1/2). Each holds
//! only the agent's scoped handle (`Arc<dyn Memory>` from `create_memory_for_agent`), so a tool
//! can never read or write more than its agent's grants allow, whatever the model sends.
//!
//! Bad input is answered, not swallowed: over-long content, empty keys and queries with no
//! words come back as `invalid arguments` naming the problem; a store that is down (e.g. the
//! PostgreSQL server) is a `Failed` call, and the agent's other tools keep working.

use std::sync::Arc;

use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use warren_config::schema::MemoryBackendKind;
use warren_memory::{MAX_LIMIT, Memory, MemoryError, NewEntry, Provenance, RecallQuery, Trust};

use crate::context::{CallOrigin, ReceiptHookError, ToolContext};
use crate::taint::Taint;
use crate::tool::{BoxFuture, RiskClass, Tool, ToolError, ToolOutput};

/// Default number of recall results.
pub const DEFAULT_RECALL_LIMIT: usize = 5;

/// The three memory tools bound to `memory`.
pub fn memory_tools(memory: Arc<dyn Memory>) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(MemoryStoreTool(Arc::clone(&memory))),
        Arc::new(MemoryRecallTool(Arc::clone(&memory))),
        Arc::new(MemoryForgetTool(memory)),
    ]
}

fn tool_error(e: MemoryError) -> ToolError {
    match e {
        MemoryError::InvalidInput { .. } | MemoryError::InvalidQuery { .. } => {
            ToolError::InvalidArguments(e.to_string())
        }
        other => ToolError::Failed(other.to_string()),
    }
}

/// Who writes through a memory tool (issue 20 §3): the bound agent, in the running turn's
/// session and channel, as this tool call; `untrusted` once the turn has taken in untrusted
/// content (the taint marker), else `agent`.
pub fn tool_provenance(agent: &str) -> Provenance {
    let origin = CallOrigin::current();
    Provenance {
        trust: if Taint::first().is_some() {
            Trust::Untrusted
        } else {
            Trust::Agent
        },
        agent: Some(agent.to_string()),
        session: origin.session,
        channel: ToolContext::current().channel.map(str::to_string),
        tool_call: origin.tool_call,
        receipt: None,
    }
}

/// Provenance as a recall result shows it.
fn provenance_json(p: &Provenance) -> Value {
    let mut out = json!({ "trust": p.trust.as_str() });
    for (name, v) in [
        ("agent", &p.agent),
        ("session", &p.session),
        ("channel", &p.channel),
        ("tool_call", &p.tool_call),
        ("receipt", &p.receipt),
    ] {
        if let Some(v) = v {
            out[name] = json!(v);
        }
    }
    out
}

fn obj(args: &Value) -> Result<&serde_json::Map<String, Value>, ToolError> {
    args.as_object()
        .ok_or_else(|| ToolError::InvalidArguments("arguments must be a JSON object".into()))
}

fn string<'a>(
    args: &'a serde_json::Map<String, Value>,
    name: &str,
    required: bool,
) -> Result<Option<&'a str>, ToolError> {
    match args.get(name) {
        None | Some(Value::Null) if !required => Ok(None),
        None | Some(Value::Null) => {
            Err(ToolError::InvalidArguments(format!("'{name}' is required")))
        }
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(ToolError::InvalidArguments(format!(
            "'{name}' must be a string, not {}",
            kind(other)
        ))),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn instant(
    args: &serde_json::Map<String, Value>,
    name: &str,
) -> Result<Option<OffsetDateTime>, ToolError> {
    string(args, name, false)?
        .map(|s| {
            OffsetDateTime::parse(s, &Rfc3339).map_err(|e| {
                ToolError::InvalidArguments(format!(
                    "'{name}' must be an RFC 3339 time like 2026-01-31T12:00:00Z: {e}"
                ))
            })
        })
        .transpose()
}

/// `memory_store`: remember a fact under a key (replaces an earlier value of the key).
pub struct MemoryStoreTool(Arc<dyn Memory>);

impl Tool for MemoryStoreTool {
    fn name(&self) -> &'static str {
        "memory_store"
    }
    fn description(&self) -> &'static str {
        "Remember something under a key (storing the same key again replaces it; the earlier \
         version is kept for undo). Category defaults to \"core\" (long-term facts); use e.g. \
         \"daily\" for notes of the day. Pass expected_version (from memory_recall; 0 for a new \
         key) to store only if nobody changed the key since you read it."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "key": {"type": "string", "description": "Short unique name of the memory"},
                "content": {"type": "string", "description": "What to remember (at most 64 KiB)"},
                "category": {"type": "string", "description": "Category name, default \"core\""},
                "session": {"type": "string", "description": "Session this belongs to, if any"},
                "expected_version": {"type": "integer", "minimum": 0, "description": "Store only if the key is at this version now (0: only if it does not exist)"}
            },
            "required": ["key", "content"],
            "additionalProperties": false
        })
    }
    fn risk(&self) -> RiskClass {
        RiskClass::Write
    }
    fn execute(&self, args: Value) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let args = obj(&args)?;
            let key = string(args, "key", true)?.unwrap_or_default();
            let content = string(args, "content", true)?.unwrap_or_default();
            let expected = match args.get("expected_version") {
                None | Some(Value::Null) => None,
                Some(v) => Some(v.as_u64().ok_or_else(|| {
                    ToolError::InvalidArguments(
                        "'expected_version' must be an integer of 0 or more".into(),
                    )
                })?),
            };
            let agent = self.0.agent().as_str();
            let entry = NewEntry::new(
                agent,
                key,
                content,
                string(args, "category", false)?,
                string(args, "session", false)?,
            )
            .map_err(tool_error)?
            .with_provenance(tool_provenance(agent))
            .expecting(expected);
            let stored = self.0.store(entry).await.map_err(tool_error)?;
            let persisted = self.0.backend() != MemoryBackendKind::None;
            if persisted {
                // The call's receipt is signed after this returns: record it with the version.
                let (memory, key, version) =
                    (Arc::clone(&self.0), stored.key.clone(), stored.version);
                CallOrigin::on_receipt(Box::new(move |receipt| {
                    Box::pin(async move {
                        memory
                            .attach_receipt(key, version, receipt)
                            .await
                            .map(|_| ())
                            .map_err(|e| ReceiptHookError {
                                what: "memory receipt",
                                source: Box::new(e),
                            })
                    })
                }));
            }
            let mut out = json!({
                "stored": persisted,
                "key": stored.key,
                "category": stored.category,
                "version": stored.version,
                "trust": stored.provenance.trust.as_str(),
            });
            if !persisted {
                out["note"] =
                    json!("memory is disabled for this agent (backend \"none\"); nothing was kept");
            }
            Ok(ToolOutput::json(out))
        })
    }
}

/// `memory_recall`: search what this agent (and the agents it may read) remembered.
pub struct MemoryRecallTool(Arc<dyn Memory>);

impl Tool for MemoryRecallTool {
    fn name(&self) -> &'static str {
        "memory_recall"
    }
    fn description(&self) -> &'static str {
        "Search memories by keywords (any word may match; best matches first). An empty query \
         or \"*\" lists the most recent memories. Words only: no search operators."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Keywords; \"word*\" matches a prefix"},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_RECALL_LIMIT},
                "session": {"type": "string"},
                "since": {"type": "string", "description": "RFC 3339 time; only memories created at or after it"},
                "until": {"type": "string", "description": "RFC 3339 time; only memories created at or before it"}
            },
            "required": ["query"],
            "additionalProperties": false
        })
    }
    fn risk(&self) -> RiskClass {
        RiskClass::Read
    }
    fn execute(&self, args: Value) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let args = obj(&args)?;
            let text = string(args, "query", true)?.unwrap_or_default();
            let limit = match args.get("limit") {
                None | Some(Value::Null) => DEFAULT_RECALL_LIMIT,
                Some(v) => v
                    .as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        ToolError::InvalidArguments(format!(
                            "'limit' must be an integer from 1 to {MAX_LIMIT}"
                        ))
                    })?,
            };
            let query = RecallQuery {
                text: text.to_string(),
                limit,
                session: string(args, "session", false)?.map(str::to_string),
                since: instant(args, "since")?,
                until: instant(args, "until")?,
            };
            let hits = self.0.recall(query).await.map_err(tool_error)?;
            let results: Vec<Value> = hits
                .into_iter()
                .map(|h| {
                    json!({
                        "agent": h.entry.agent,
                        "key": h.entry.key,
                        "content": h.entry.content,
                        "category": h.entry.category,
                        "session": h.entry.session,
                        "updated_at": h.entry.updated_at.format(&Rfc3339).unwrap_or_default(),
                        "version": h.entry.version,
                        "provenance": provenance_json(&h.entry.provenance),
                        "score": h.score,
                    })
                })
                .collect();
            Ok(ToolOutput::json(json!({ "results": results })))
        })
    }
}

/// `memory_forget`: delete one of this agent's own memories.
pub struct MemoryForgetTool(Arc<dyn Memory>);

impl Tool for MemoryForgetTool {
    fn name(&self) -> &'static str {
        "memory_forget"
    }
    fn description(&self) -> &'static str {
        "Delete one of your own memories by key. Memories of other agents cannot be deleted."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"key": {"type": "string"}},
            "required": ["key"],
            "additionalProperties": false
        })
    }
    fn risk(&self) -> RiskClass {
        RiskClass::Write
    }
    fn execute(&self, args: Value) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
        Box::pin(async move {
            let args = obj(&args)?;
            let key = string(args, "key", true)?.unwrap_or_default().trim();
            if key.is_empty() {
                return Err(ToolError::InvalidArguments(
                    "'key' must not be empty".into(),
                ));
            }
            let forgotten = self.0.forget(key.to_string()).await.map_err(tool_error)?;
            Ok(ToolOutput::json(
                json!({ "key": key, "forgotten": forgotten }),
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Value, json};
    use warren_core::AgentAlias;
    use warren_memory::{AgentScopedMemory, Memory, SqliteStore};

    use super::*;

    type R = Result<(), Box<dyn std::error::Error>>;

    async fn store_in_turn(tools: &[Arc<dyn Tool>], key: &str, tainted: bool) -> R {
        let store = tools
            .iter()
            .find(|t| t.name() == "memory_store")
            .ok_or("no tool")?;
        let context = ToolContext {
            channel: Some("gateway"),
            ..ToolContext::default()
        };
        let origin = CallOrigin::new(Some("http-main".into()), Some(format!("call-{key}")));
        context
            .scope(Taint::scope(async {
                if tainted {
                    Taint::mark("the http_request response from http://example.test/");
                }
                origin
                    .scope(store.execute(json!({"key": key, "content": format!("fact {key}")})))
                    .await
            }))
            .await?;
        Ok(())
    }

    /// Issue 20 §3 with the taint rule (issue 24 §4): what a tainted turn stores is
    /// `untrusted`, an untainted turn's is `agent`; recall shows the version and every
    /// provenance field the runtime handed the tool.
    #[tokio::test]
    async fn a_tainted_turn_stores_untrusted_memory_and_recall_shows_provenance() -> R {
        let dir = tempfile::tempdir()?;
        let sqlite = Arc::new(SqliteStore::open(&dir.path().join("memory.db"))?);
        let memory: Arc<dyn Memory> = Arc::new(AgentScopedMemory::new(
            sqlite,
            AgentAlias::new("main")?,
            vec![],
            None,
        ));
        let tools = memory_tools(Arc::clone(&memory));
        store_in_turn(&tools, "web", true).await?;
        store_in_turn(&tools, "own", false).await?;

        let recall = tools
            .iter()
            .find(|t| t.name() == "memory_recall")
            .ok_or("no tool")?;
        let out = recall.execute(json!({"query": "fact"})).await?;
        let results = out.content["results"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let of = |key: &str| -> Value {
            results
                .iter()
                .find(|r| r["key"] == key)
                .cloned()
                .unwrap_or(Value::Null)
        };
        assert_eq!(
            of("web")["provenance"],
            json!({"trust": "untrusted", "agent": "main", "session": "http-main",
                   "channel": "gateway", "tool_call": "call-web"}),
            "{results:?}"
        );
        assert_eq!(of("web")["version"], 1);
        assert_eq!(of("own")["provenance"]["trust"], "agent", "{results:?}");
        // Outside a turn, nothing to record but the agent.
        let bare = memory.get("own".into()).await?.ok_or("gone")?;
        assert_eq!(bare.provenance.tool_call.as_deref(), Some("call-own"));
        Ok(())
    }

    #[tokio::test]
    async fn a_stale_expected_version_is_a_failed_call_naming_both_versions() -> R {
        let dir = tempfile::tempdir()?;
        let sqlite = Arc::new(SqliteStore::open(&dir.path().join("memory.db"))?);
        let memory: Arc<dyn Memory> = Arc::new(AgentScopedMemory::new(
            sqlite,
            AgentAlias::new("main")?,
            vec![],
            None,
        ));
        let tools = memory_tools(memory);
        let store = tools
            .iter()
            .find(|t| t.name() == "memory_store")
            .ok_or("no tool")?;
        let first = store
            .execute(json!({"key": "k", "content": "one", "expected_version": 0}))
            .await?;
        assert_eq!(first.content["version"], 1);
        let err = store
            .execute(json!({"key": "k", "content": "two", "expected_version": 0}))
            .await
            .err()
            .map(|e| e.to_string());
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("version 1, not the expected 0")),
            "{err:?}"
        );
        let bad = store
            .execute(json!({"key": "k", "content": "x", "expected_version": -1}))
            .await;
        assert!(
            matches!(bad, Err(ToolError::InvalidArguments(_))),
            "{bad:?}"
        );
        Ok(())
    }
}
