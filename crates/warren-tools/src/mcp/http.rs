//! The streamable HTTP transport of a `url` server (MCP 2025-03-26 "Streamable HTTP"): each
//! client message is one POST (`Accept: application/json, text/event-stream`, the session id
//! the server gave at `initialize` as `Mcp-Session-Id`, the configured headers); the answer is
//! `202 Accepted`, one JSON message, or an SSE stream whose events carry the server's messages.
//!
//! The requests go through the agent's [`HttpEgress`] (the daemon's `http_request` client): the
//! URL's host must pass the agent's network allowlist and address rule (no SSRF by DNS), the
//! connection goes to the checked addresses, the body is capped by the policy and the reply is
//! scrubbed of secrets, and each request is an `egress` trace event. The optional GET stream
//! for server-initiated messages is not opened (a server's `tools/list_changed` over it is not
//! seen; tools are listed at each start).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::channel::mpsc;
use futures::{SinkExt, StreamExt};
use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, ErrorData, ServerJsonRpcMessage, ServerResult,
};

use crate::{HttpCall, HttpEgress};

/// Why one POST to a `url` server got no JSON-RPC messages (answered to the caller as a
/// JSON-RPC error naming the cause).
#[derive(Debug, thiserror::Error)]
enum ExchangeError {
    #[error("cannot encode the message: {0}")]
    Encode(serde_json::Error),
    #[error(transparent)]
    Egress(#[from] crate::EgressRefused),
    #[error("{url} answered HTTP {status}: {text}")]
    Status {
        url: String,
        status: u16,
        text: String,
    },
    #[error(
        "{url} answered more than the agent's response cap ([agents.<alias>.network] max_response_bytes)"
    )]
    TooLarge { url: String },
    #[error("{url} sent a message that is not JSON-RPC: {source}")]
    NotJsonRpc {
        url: String,
        source: serde_json::Error,
    },
}

/// One server endpoint and its session.
pub(crate) struct Endpoint {
    url: String,
    headers: Vec<(String, String)>,
    egress: Arc<dyn HttpEgress>,
    session: Mutex<Option<String>>,
    version: Mutex<Option<String>>,
}

/// The (sink, stream) pair `rmcp` serves over, for `url` with `headers`.
pub(crate) fn transport(
    url: String,
    headers: Vec<(String, String)>,
    egress: Arc<dyn HttpEgress>,
) -> (
    mpsc::Sender<ClientJsonRpcMessage>,
    mpsc::Receiver<ServerJsonRpcMessage>,
) {
    let (out_tx, mut out_rx) = mpsc::channel::<ClientJsonRpcMessage>(16);
    let (in_tx, in_rx) = mpsc::channel::<ServerJsonRpcMessage>(64);
    let endpoint = Arc::new(Endpoint {
        url,
        headers,
        egress,
        session: Mutex::new(None),
        version: Mutex::new(None),
    });
    tokio::spawn(async move {
        while let Some(message) = out_rx.next().await {
            let initialize = matches!(
                &message,
                ClientJsonRpcMessage::Request(r)
                    if matches!(r.request, ClientRequest::InitializeRequest(_))
            );
            let job = {
                let endpoint = Arc::clone(&endpoint);
                let tx = in_tx.clone();
                async move { endpoint.post(message, tx).await }
            };
            // The session id comes with the initialize answer: later POSTs wait for it.
            if initialize {
                job.await;
            } else {
                tokio::spawn(job);
            }
        }
        endpoint.close().await;
    });
    (out_tx, in_rx)
}

impl Endpoint {
    fn headers(&self) -> BTreeMap<String, String> {
        let mut headers: BTreeMap<String, String> = self.headers.iter().cloned().collect();
        headers.insert(
            "accept".into(),
            "application/json, text/event-stream".into(),
        );
        if let Some(session) = self
            .session
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            headers.insert("mcp-session-id".into(), session);
        }
        if let Some(version) = self
            .version
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            headers.insert("mcp-protocol-version".into(), version);
        }
        headers
    }

    /// POSTs `message`; what the server answers goes to `tx` (a failed request is answered
    /// with a JSON-RPC error naming the cause, so the caller sees it).
    async fn post(
        &self,
        message: ClientJsonRpcMessage,
        mut tx: mpsc::Sender<ServerJsonRpcMessage>,
    ) {
        let id = match &message {
            ClientJsonRpcMessage::Request(r) => Some(r.id.clone()),
            _ => None,
        };
        let result = self.exchange(&message).await;
        let messages = match result {
            Ok(messages) => messages,
            Err(e) => match id {
                Some(id) => vec![ServerJsonRpcMessage::error(
                    ErrorData::internal_error(e.to_string(), None),
                    Some(id),
                )],
                None => Vec::new(),
            },
        };
        for m in messages {
            if let ServerJsonRpcMessage::Response(r) = &m
                && let ServerResult::InitializeResult(init) = &r.result
            {
                *self.version.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(init.protocol_version.as_str().to_string());
            }
            if tx.send(m).await.is_err() {
                break;
            }
        }
    }

    async fn exchange(
        &self,
        message: &ClientJsonRpcMessage,
    ) -> Result<Vec<ServerJsonRpcMessage>, ExchangeError> {
        let body = serde_json::to_string(message).map_err(ExchangeError::Encode)?;
        let mut headers = self.headers();
        headers.insert("content-type".into(), "application/json".into());
        let reply = self
            .egress
            .send(HttpCall {
                method: "POST".into(),
                url: self.url.clone(),
                headers,
                body: Some(body),
            })
            .await?;
        let header = |name: &str| {
            reply
                .headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        if let Some(session) = header("mcp-session-id") {
            *self.session.lock().unwrap_or_else(|p| p.into_inner()) = Some(session);
        }
        if reply.status >= 400 {
            let text: String = reply.body.chars().take(300).collect();
            return Err(ExchangeError::Status {
                url: self.url.clone(),
                status: reply.status,
                text,
            });
        }
        if reply.status == 202 || reply.body.trim().is_empty() {
            return Ok(Vec::new());
        }
        if reply.truncated {
            return Err(ExchangeError::TooLarge {
                url: self.url.clone(),
            });
        }
        let sse = header("content-type").is_some_and(|t| t.starts_with("text/event-stream"));
        let payloads = if sse {
            warren_core::sse::events(&reply.body)
        } else {
            vec![reply.body.clone()]
        };
        payloads
            .iter()
            .filter(|p| !p.trim().is_empty())
            .map(|p| {
                serde_json::from_str::<ServerJsonRpcMessage>(p).map_err(|source| {
                    ExchangeError::NotJsonRpc {
                        url: self.url.clone(),
                        source,
                    }
                })
            })
            .collect()
    }

    /// Ends the session (`DELETE` with its id), if the server gave one.
    async fn close(&self) {
        let Some(session) = self
            .session
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        else {
            return;
        };
        let mut headers: BTreeMap<String, String> = self.headers.iter().cloned().collect();
        headers.insert("mcp-session-id".into(), session);
        let _ = self
            .egress
            .send(HttpCall {
                method: "DELETE".into(),
                url: self.url.clone(),
                headers,
                body: None,
            })
            .await;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sse_events_are_split_and_multiline_data_joined() {
        let body = "event: message\ndata: {\"a\":1}\n\n: comment\ndata: x\ndata:y\n\nid: 3\n";
        assert_eq!(
            warren_core::sse::events(body),
            vec!["{\"a\":1}".to_string(), "x\ny".to_string()]
        );
    }
}
