//! The worst case of a request before it is sent (issue 16 §4): its prompt's tokens estimated
//! from its text, and what tokens cost at a model's rate.

use warren_config::schema::ModelRate;
use warren_providers::ChatRequest;

/// The size of one request before it is sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Estimate {
    /// Estimated from the text of the messages and tool definitions.
    pub prompt_tokens: u64,
    /// The request's `max_tokens`, if it sets one.
    pub max_tokens: Option<u32>,
}

/// What `input` and `output` tokens cost at `rate`, in USD.
pub(super) fn price(rate: &ModelRate, input: u64, output: u64) -> f64 {
    (input as f64 * rate.input_per_mtok + output as f64 * rate.output_per_mtok) / 1_000_000.0
}

/// A conservative token estimate of `request`'s prompt: a token per 3 bytes of text (English
/// averages about 4; code and JSON are denser) plus a few per message and tool. No tokenizer
/// is used: the provider's count replaces this after the call.
pub fn estimate(request: &ChatRequest) -> Estimate {
    let mut bytes = 0usize;
    for m in &request.messages {
        bytes += 16 + m.content.len();
        for c in &m.tool_calls {
            bytes += c.id.len() + c.name.len() + json_len(&c.arguments);
        }
    }
    bytes += tool_bytes(&request.tools);
    Estimate {
        prompt_tokens: (bytes as u64).div_ceil(3),
        max_tokens: request.max_tokens,
    }
}

/// The estimated size of a tool list. A runner sends the same list (one `Arc`) on every call of
/// a turn, so the walk over its JSON schemas is done once per list and thread, not per call.
fn tool_bytes(tools: &std::sync::Arc<Vec<warren_core::ToolDefinition>>) -> usize {
    use std::cell::RefCell;
    use std::sync::Arc;
    type Measured = Option<(Arc<Vec<warren_core::ToolDefinition>>, usize)>;
    thread_local! {
        static LAST: RefCell<Measured> = const { RefCell::new(None) };
    }
    LAST.with(|last| {
        if let Some((list, bytes)) = &*last.borrow()
            && Arc::ptr_eq(list, tools)
        {
            return *bytes;
        }
        let bytes = tools
            .iter()
            .map(|t| 32 + t.name.len() + t.description.len() + json_len(&t.parameters))
            .sum();
        *last.borrow_mut() = Some((Arc::clone(tools), bytes));
        bytes
    })
}

/// About the length of `v` as JSON text, without writing it.
fn json_len(v: &serde_json::Value) -> usize {
    use serde_json::Value;
    match v {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 8,
        Value::String(s) => s.len() + 2,
        Value::Array(a) => 2 + a.iter().map(|x| json_len(x) + 1).sum::<usize>(),
        Value::Object(o) => {
            2 + o
                .iter()
                .map(|(k, x)| k.len() + 4 + json_len(x))
                .sum::<usize>()
        }
    }
}
