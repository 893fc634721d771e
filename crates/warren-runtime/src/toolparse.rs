//! Tool calls recovered from text (LOOP-1, LOOP-5), for models that write calls into their
//! answer instead of using native tool calling. The documented form is one JSON object per
//! `<tool_call>` block:
//!
//! ```text
//! <tool_call>{"name": "file_read", "arguments": {"path": "notes.md"}}</tool_call>
//! ```
//!
//! Only calls naming a known tool are recovered; the blocks are removed from the text.
//! Recovered calls get ids `text_call_<n>`.

use warren_core::ToolCall;

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// The calls found in `text` (naming tools in `known`) and the text without their blocks.
pub fn recover_tool_calls(text: &str, known: &[String]) -> (Vec<ToolCall>, String) {
    let mut calls = Vec::new();
    let mut rest = String::new();
    let mut cursor = text;
    while let Some(start) = cursor.find(OPEN) {
        let after = &cursor[start + OPEN.len()..];
        let Some(end) = after.find(CLOSE) else { break };
        let body = after[..end].trim();
        let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
        let call = parsed.as_ref().and_then(|v| {
            let name = v.get("name")?.as_str()?;
            if !known.iter().any(|k| k == name) {
                return None;
            }
            let arguments = match v.get("arguments") {
                Some(serde_json::Value::String(s)) => serde_json::from_str(s).ok()?,
                Some(a) => a.clone(),
                None => serde_json::json!({}),
            };
            Some(ToolCall {
                id: format!("text_call_{}", calls.len()),
                name: name.to_string(),
                arguments,
            })
        });
        match call {
            Some(c) => {
                rest.push_str(&cursor[..start]);
                calls.push(c);
            }
            None => rest.push_str(&cursor[..start + OPEN.len() + end + CLOSE.len()]),
        }
        cursor = &after[end + CLOSE.len()..];
    }
    rest.push_str(cursor);
    (calls, rest.trim().to_string())
}

/// The system-prompt section describing the text protocol (for routes without native tools).
pub fn protocol_instructions(tools: &[warren_core::ToolDefinition]) -> String {
    let mut out = String::from(
        "To use a tool, write exactly one block per call:\n<tool_call>{\"name\": \"<tool>\", \"arguments\": {...}}</tool_call>\nAvailable tools:\n",
    );
    for t in tools {
        out.push_str(&format!(
            "- {}: {} (arguments schema: {})\n",
            t.name, t.description, t.parameters
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn recovers_known_calls_and_keeps_other_text() {
        let known = vec!["file_read".to_string()];
        let text = "Sure.\n<tool_call>{\"name\":\"file_read\",\"arguments\":{\"path\":\"a\"}}</tool_call>\n<tool_call>{\"name\":\"rm_rf\",\"arguments\":{}}</tool_call> done";
        let (calls, rest) = recover_tool_calls(text, &known);
        assert_eq!(
            calls,
            vec![ToolCall {
                id: "text_call_0".into(),
                name: "file_read".into(),
                arguments: json!({"path": "a"})
            }]
        );
        assert!(rest.starts_with("Sure."));
        assert!(rest.contains("rm_rf"), "unknown tools stay text: {rest}");
    }
}
