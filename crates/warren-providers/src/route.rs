//! A provider route: the selected provider plus its fallbacks, each retried with exponential
//! backoff on HTTP 429, 5xx and timeouts (a server's `Retry-After` is honoured up to a minute) (LOOP-4 for capabilities: a route supports what
//! every reachable member supports).
//!
//! Fallback happens on any failure but cancellation. Each failed attempt is reported in the
//! response so the caller can log it.

use std::sync::Arc;
use std::time::Duration;

use crate::{Capabilities, ChatRequest, ChatResponse, EventSink, Provider, ProviderError};

/// Longest `Retry-After` honoured; a server asking for more is treated as this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// One member of a route with its retry settings.
struct Member {
    provider: Arc<dyn Provider>,
    max_retries: u32,
    backoff: Duration,
}

/// A primary provider and its fallbacks, tried in order.
pub struct Route {
    members: Vec<Member>,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.members.iter().map(|m| m.provider.name()))
            .finish()
    }
}

/// A failed attempt on the way to the answer.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteAttempt {
    pub provider: String,
    pub error: ProviderError,
}

/// The answer and who gave it.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteResponse {
    pub response: ChatResponse,
    /// The provider that answered.
    pub provider: String,
    pub failed_attempts: Vec<RouteAttempt>,
}

impl Route {
    pub fn new() -> Self {
        Self {
            members: Vec::new(),
        }
    }

    /// Adds a member; the first one added is the primary.
    pub fn with(
        mut self,
        provider: Arc<dyn Provider>,
        max_retries: u32,
        backoff: Duration,
    ) -> Self {
        self.members.push(Member {
            provider,
            max_retries,
            backoff,
        });
        self
    }

    /// The provider names, primary first.
    pub fn names(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| m.provider.name().to_string())
            .collect()
    }

    /// The primary's name.
    pub fn primary(&self) -> &str {
        self.members.first().map_or("", |m| m.provider.name())
    }

    /// What every member supports (LOOP-4: the selected route AND every reachable fallback).
    pub fn capabilities(&self) -> Capabilities {
        self.members
            .iter()
            .map(|m| m.provider.capabilities())
            .reduce(Capabilities::and)
            .unwrap_or(Capabilities {
                native_tools: false,
                single_tool_control: false,
                streaming: false,
            })
    }

    /// Members lacking single-tool support (for the LOOP-4 notice).
    pub fn lacking_single_tool_control(&self) -> Vec<String> {
        self.members
            .iter()
            .filter(|m| !m.provider.capabilities().single_tool_control)
            .map(|m| m.provider.name().to_string())
            .collect()
    }

    /// Sends `request` along the route.
    pub async fn chat(
        &self,
        request: Arc<ChatRequest>,
        events: EventSink,
    ) -> Result<RouteResponse, ProviderError> {
        let mut failed = Vec::new();
        for member in &self.members {
            let mut attempt = 0;
            loop {
                if request.cancel.is_cancelled() {
                    return Err(ProviderError::Cancelled);
                }
                match member
                    .provider
                    .chat(Arc::clone(&request), Arc::clone(&events))
                    .await
                {
                    Ok(response) => {
                        return Ok(RouteResponse {
                            response,
                            provider: member.provider.name().to_string(),
                            failed_attempts: failed,
                        });
                    }
                    Err(ProviderError::Cancelled) => return Err(ProviderError::Cancelled),
                    Err(error) => {
                        let retry = error.is_retryable() && attempt < member.max_retries;
                        tracing::warn!(
                            provider = member.provider.name(),
                            attempt,
                            retry,
                            "provider call failed: {error}"
                        );
                        failed.push(RouteAttempt {
                            provider: member.provider.name().to_string(),
                            error,
                        });
                        if !retry {
                            break;
                        }
                        // The server's Retry-After wins over our backoff, up to MAX_RETRY_AFTER.
                        let backoff = member.backoff.saturating_mul(1 << attempt.min(10));
                        let delay = failed
                            .last()
                            .and_then(|a: &RouteAttempt| a.error.retry_after())
                            .map_or(backoff, |ra| ra.min(MAX_RETRY_AFTER).max(backoff));
                        tokio::time::sleep(delay).await;
                        attempt += 1;
                    }
                }
            }
        }
        Err(ProviderError::AllFailed {
            attempts: failed.into_iter().map(|a| a.error).collect(),
        })
    }
}

impl Default for Route {
    fn default() -> Self {
        Self::new()
    }
}
