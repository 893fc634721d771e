//! LLM providers (SPEC LOOP-1, LOOP-2, LOOP-4): the [`Provider`] trait, the OpenAI-compatible
//! chat-completions client, the Anthropic Messages client, the `script` provider that replays a scripted conversation, and
//! [`Route`], a primary provider plus fallbacks with retries.
//!
//! A provider answers one [`ChatRequest`] with one [`ChatResponse`] (text, native tool calls,
//! usage), streaming text deltas to an [`EventSink`] as they arrive. What a route can do is
//! declared in [`Capabilities`]; the turn loop reads them to decide whether single-tool rounds
//! can be activated (LOOP-4).

mod anthropic;
mod error;
mod factory;
mod http;
mod openai;
mod route;
mod script;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use warren_core::{ChatMessage, ToolCall, ToolDefinition, Usage};

pub use anthropic::{ANTHROPIC_VERSION, AnthropicProvider};
pub use error::ProviderError;
pub use factory::{build_route, route_names};
pub use openai::OpenAiProvider;
pub use route::{Route, RouteAttempt, RouteResponse};
pub use script::{ScriptProvider, ScriptResponse, ScriptedCall};

/// A boxed future, so `Provider` stays object safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a provider route supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Tools are sent as native definitions and calls come back structured.
    pub native_tools: bool,
    /// The wire has a real control for "at most one tool call per response" (LOOP-2, LOOP-4).
    pub single_tool_control: bool,
    /// Text arrives as deltas while the response is generated.
    pub streaming: bool,
}

impl Capabilities {
    /// What both `self` and `other` support (a route supports what all its members do).
    pub fn and(self, other: Capabilities) -> Capabilities {
        Capabilities {
            native_tools: self.native_tools && other.native_tools,
            single_tool_control: self.single_tool_control && other.single_tool_control,
            streaming: self.streaming && other.streaming,
        }
    }
}

/// A cancellation flag shared between the caller and a provider call (checked between
/// streamed chunks; a cancelled call answers [`ProviderError::Cancelled`]).
#[derive(Debug, Clone, Default)]
pub struct CancelFlag(Arc<AtomicBool>);

impl CancelFlag {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// One request to a provider.
#[derive(Debug, Clone, Default)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    /// Native tool definitions; empty = a call without tools (shared: the same list goes
    /// out with every request of a turn).
    pub tools: Arc<Vec<ToolDefinition>>,
    /// Ask for at most one tool call in the response (`parallel_tool_calls: false`,
    /// `disable_parallel_tool_use: true`; LOOP-2).
    pub single_tool: bool,
    pub max_tokens: Option<u32>,
    pub cancel: CancelFlag,
}

/// A streamed piece of a response.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    TextDelta(String),
}

/// Receives streamed events (called from the thread reading the stream).
pub type EventSink = Arc<dyn Fn(StreamEvent) + Send + Sync>;

/// A sink that drops every event.
pub fn no_events() -> EventSink {
    Arc::new(|_| {})
}

/// A complete response.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatResponse {
    pub text: String,
    /// Native tool calls, in the model's order.
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
}

/// An LLM provider.
pub trait Provider: Send + Sync {
    /// The `[providers.<name>]` name (used in errors, the trace and the cost ledger).
    fn name(&self) -> &str;
    fn capabilities(&self) -> Capabilities;
    fn chat(
        &self,
        request: Arc<ChatRequest>,
        events: EventSink,
    ) -> BoxFuture<'_, Result<ChatResponse, ProviderError>>;
}
