//! A request as a turn: its agent (the model), its session (the `X-Warren-Session` header, else
//! one per token, `user` and model) and its input (the last user message), with the earlier
//! messages checked against the session's stored conversation ([`super::history`]). Shared by
//! `/v1/chat/completions` and `/v1/responses`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use sha2::{Digest, Sha256};
use warren_core::{AgentAlias, Role, SessionKey};
use warren_runtime::{CancelToken, Channel, TurnEvents, TurnRequest};
use warren_store::sessions::{Page, SessionHandle, SessionMeta};

use super::history::{InMessage, Visible, check_history, conversation, repeated_reply};
use super::retry::{self, Answer, Pending, Recent};
use super::threads::{self, Threads};
use super::{MAX_USER, OpenAiError, SESSION_HEADER, agent_of_model};
use crate::auth::Caller;
use crate::state::AppState;
use crate::turns::turn_error;

/// The body of a request; one over the limit (413) or unreadable answers in OpenAI's shape.
pub(super) fn read_body(
    route: &str,
    body: Result<Bytes, BytesRejection>,
) -> Result<Bytes, OpenAiError> {
    body.map_err(|e| {
        OpenAiError::new(
            e.status(),
            "invalid_body",
            format!("{route}: {}", e.body_text()),
        )
    })
}

/// Client tools are refused: the agent's tools are Warren's (issue 27 §2).
pub(super) fn refuse_client_tools(
    tools_sent: bool,
    tool_choice: Option<&serde_json::Value>,
) -> Result<(), OpenAiError> {
    if tools_sent {
        return Err(OpenAiError::bad(
            "tools",
            "client_tools_unsupported",
            "client-side tools are not supported: the agent's tools are Warren's and run inside Warren (omit `tools`)",
        ));
    }
    if let Some(choice) = tool_choice
        && !(choice.is_null() || choice == "none" || choice == "auto")
    {
        return Err(OpenAiError::bad(
            "tool_choice",
            "client_tools_unsupported",
            "tool_choice can only be \"none\" or \"auto\": the agent's tools are Warren's",
        ));
    }
    Ok(())
}

/// A request placed: the agent, the session and the turn's input.
pub(super) struct Placed {
    pub route: &'static str,
    pub alias: AgentAlias,
    pub session: SessionKey,
    pub input: String,
    /// The request's [`retry::fingerprint`].
    pub fingerprint: [u8; 32],
    /// The earlier attempt a retry repeats ([`retry`]).
    pub repeat: Option<Repeat>,
    /// The client's `max_tokens` / `max_completion_tokens` / `max_output_tokens`: passed to
    /// the provider for this turn.
    pub max_output_tokens: Option<u32>,
    /// A conversation without a named session ([`threads`]): remembered once answered.
    pub thread: Option<Thread>,
}

/// A conversation placed by its content ([`threads`]).
#[derive(Clone)]
pub(super) struct Thread {
    threads: Arc<Threads>,
    prefix: String,
    /// The conversation as the client holds it: its earlier messages and its input.
    conversation: Vec<Visible>,
}

impl Thread {
    /// Remembers that `session` holds this conversation followed by the reply `text` (as the
    /// client shows it), so the client's next request continues it.
    pub fn remember(&self, session: &SessionKey, text: &str) {
        let messages = self
            .conversation
            .iter()
            .map(|m| (m.role, m.text.as_str()))
            .chain([(Role::Assistant, text)]);
        let digest = threads::digest(&self.prefix, messages);
        self.threads.remember(digest, session.clone());
    }
}

/// The earlier attempt a retried request repeats.
pub(super) enum Repeat {
    /// Started through `/v1` and remembered: running, or answered.
    Joined(Pending),
    /// The stored reply of the session's last exchange.
    Stored(String),
}

impl Placed {
    /// The answer: the earlier attempt's when this request repeats one (one that failed is run
    /// again), else that of a new turn through the door, which runs to its end on its own task
    /// ([`Recent::track`]). `events` sees a new turn's events only.
    pub async fn answer(
        &self,
        state: &AppState,
        recent: &Recent,
        events: TurnEvents,
    ) -> Result<Pending, OpenAiError> {
        let route = self.route;
        match &self.repeat {
            Some(Repeat::Stored(reply)) => {
                return Ok(answered(Answer {
                    reply: reply.clone(),
                    input_tokens: 0,
                    output_tokens: 0,
                }));
            }
            Some(Repeat::Joined(pending)) => {
                if let Ok(answer) = retry::wait(pending.clone()).await {
                    return Ok(answered(answer));
                }
            }
            None => {}
        }
        let fail = move |e: &warren_runtime::TurnError| OpenAiError::from(turn_error(route, e));
        let turn = state
            .host()
            .submit(self.turn(state, events))
            .await
            .map_err(|e| fail(&e))?;
        let (thread, session) = (self.thread.clone(), self.session.clone());
        let remember = move |answer: &Answer| {
            if let Some(thread) = thread {
                thread.remember(&session, &answer.reply);
            }
        };
        Ok(recent.track(self.session.clone(), self.fingerprint, turn, fail, remember))
    }

    /// The request for the runtime's door (the one way every entry point runs a turn).
    pub fn turn(&self, state: &AppState, events: TurnEvents) -> TurnRequest {
        TurnRequest {
            agent: self.alias.clone(),
            session: Some(self.session.clone()),
            channel: Channel::Gateway,
            input: self.input.clone(),
            max_output_tokens: self.max_output_tokens,
            approver: Arc::clone(state.host().approvals()) as _,
            cancel: CancelToken::new(),
            events,
        }
    }
}

/// A client's cap on output tokens (`param` names its field): at least 1.
pub(super) fn output_cap(param: &str, cap: Option<u32>) -> Result<Option<u32>, OpenAiError> {
    match cap {
        Some(0) => Err(OpenAiError::bad(
            param,
            "invalid_max_tokens",
            format!("{param} must be at least 1"),
        )),
        cap => Ok(cap),
    }
}

/// What a request asks: its agent (`model`), its messages (named `field` in errors:
/// `messages`, `input`) and its `user`.
pub(super) struct Ask<'a> {
    pub route: &'static str,
    pub model: &'a str,
    pub field: &'static str,
    pub messages: &'a [InMessage],
    pub user: Option<&'a str>,
}

/// An answer already known.
fn answered(answer: Answer) -> Pending {
    tokio::sync::watch::channel(Some(Ok(answer))).1
}

/// Resolves the model, reads the messages, picks the session and checks the earlier messages
/// against its stored conversation (409 `history_mismatch` naming the first differing index).
/// A retry of the session's latest turn is told apart here ([`retry`]): with the SDK's retry
/// count, or when it resends earlier messages that only line up as that same request.
pub(super) async fn place(
    state: &AppState,
    recent: &Recent,
    threads: &Arc<Threads>,
    caller: &Caller,
    headers: &HeaderMap,
    ask: Ask<'_>,
) -> Result<Placed, OpenAiError> {
    let Ask {
        route,
        model,
        field,
        messages,
        user,
    } = ask;
    let alias = agent_of_model(state, model)?;
    let (earlier, input) = conversation(field, messages)?;
    let fingerprint = retry::fingerprint(route, &alias, &earlier, &input);
    let marked = retry::marked_retry(headers);
    let session = match session_of(headers, caller, user, &alias)? {
        Derived::Named(key) => key,
        Derived::Hashed { key, legacy } => {
            if owned_by(route, state, &legacy, &alias).await? {
                legacy
            } else {
                key
            }
        }
        Derived::Thread => {
            let request = ThreadRequest {
                route,
                prefix: threads::prefix(&caller.token_hash, &alias),
                alias,
                earlier,
                input,
                fingerprint,
                marked,
            };
            return place_thread(state, recent, threads, request).await;
        }
    };
    let placed = |repeat| Placed {
        route,
        alias: alias.clone(),
        session: session.clone(),
        input: input.clone(),
        fingerprint,
        repeat,
        max_output_tokens: None,
        thread: None,
    };
    if (marked || !earlier.is_empty())
        && let Some(pending) = recent.find(&session, &fingerprint)
    {
        return Ok(placed(Some(Repeat::Joined(pending))));
    }
    let Some(stored) = stored_conversation(route, state, &session, &alias).await? else {
        return Ok(placed(None)); // another agent's session: the door refuses it
    };
    let repeated = repeated_reply(&earlier, &input, &stored).map(str::to_string);
    match (check_history(&earlier, &stored), repeated) {
        (_, Some(reply)) if marked => Ok(placed(Some(Repeat::Stored(reply)))),
        (Ok(()), _) => Ok(placed(None)),
        // Resent earlier messages that line up only as the last exchange's request.
        (Err(_), Some(reply)) => Ok(placed(Some(Repeat::Stored(reply)))),
        (Err(d), None) => Err(OpenAiError {
            param: Some(format!("{field}[{}]", d.index)),
            ..OpenAiError::new(
                StatusCode::CONFLICT,
                "history_mismatch",
                format!(
                    "{route}: {field}[{}] does not match session '{session}': {}; send only the new user message, the conversation exactly as answered, or use another session (header {SESSION_HEADER} or another `user`)",
                    d.index, d.reason
                ),
            )
        }),
    }
}

/// A request without a named session, as [`place`] read it.
struct ThreadRequest {
    route: &'static str,
    prefix: String,
    alias: AgentAlias,
    earlier: Vec<(usize, Visible)>,
    input: String,
    fingerprint: [u8; 32],
    marked: bool,
}

/// Places a request without a named session ([`threads`]): in the session whose conversation
/// its earlier messages are, when that session is not running another request's turn and its
/// stored conversation lines up ([`check_history`]); else in a new session, whose first turn
/// quotes the earlier messages so the agent answers in context. Never 409: an edited
/// conversation is a new one. Retries join their attempt as in [`place`]; the SDK's retry of a
/// first message finds the session that message started.
async fn place_thread(
    state: &AppState,
    recent: &Recent,
    threads: &Arc<Threads>,
    request: ThreadRequest,
) -> Result<Placed, OpenAiError> {
    let ThreadRequest {
        route,
        prefix,
        alias,
        earlier,
        input,
        fingerprint,
        marked,
    } = request;
    let thread = Thread {
        threads: Arc::clone(threads),
        prefix: prefix.clone(),
        conversation: earlier
            .iter()
            .map(|(_, m)| m.clone())
            .chain([Visible {
                role: Role::User,
                text: input.clone(),
            }])
            .collect(),
    };
    let placed = |session: SessionKey, input: String, repeat| Placed {
        route,
        alias: alias.clone(),
        session,
        input,
        fingerprint,
        repeat,
        max_output_tokens: None,
        thread: Some(thread.clone()),
    };
    let found = if earlier.is_empty() {
        // A first message: a new conversation, unless it is the SDK's retry of one.
        marked
            .then(|| threads.started(&prefix, &fingerprint))
            .flatten()
    } else {
        let want = threads::digest(
            &prefix,
            earlier.iter().map(|(_, m)| (m.role, m.text.as_str())),
        );
        match threads.find(&want) {
            Some(key) => Some(key),
            None if threads.needs_scan(&prefix) => {
                scan(route, state, threads, &prefix, &alias).await?;
                threads.find(&want)
            }
            None => None,
        }
    };
    if let Some(session) = found {
        if (marked || !earlier.is_empty())
            && let Some(pending) = recent.find(&session, &fingerprint)
        {
            return Ok(placed(session, input, Some(Repeat::Joined(pending))));
        }
        if let Some(stored) = stored_conversation(route, state, &session, &alias).await? {
            let repeated = repeated_reply(&earlier, &input, &stored).map(str::to_string);
            let lines_up = check_history(&earlier, &stored).is_ok();
            match repeated {
                Some(reply) if marked || !lines_up => {
                    return Ok(placed(session, input, Some(Repeat::Stored(reply))));
                }
                _ if lines_up && !recent.running(&session) => {
                    return Ok(placed(session, input.clone(), None));
                }
                _ => {} // another request's turn runs there, or it went on: a branch
            }
        }
    }
    let session = new_session(&prefix)?;
    if earlier.is_empty() {
        threads.start(&prefix, &fingerprint, session.clone());
    }
    let seeded = threads::seeded_input(&earlier, &input);
    Ok(placed(session, seeded, None))
}

/// A new session of a token's conversations with one model: `prefix` and 16 random hex digits.
fn new_session(prefix: &str) -> Result<SessionKey, OpenAiError> {
    let mut buf = [0u8; 8];
    let _ = getrandom::fill(&mut buf);
    SessionKey::new(format!("{prefix}{}", warren_core::hex::encode(&buf))).map_err(|e| {
        OpenAiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            e.to_string(),
        )
    })
}

/// Reads the stored sessions of `prefix` owned by `alias` (after a restart: the digests live in
/// memory) and remembers every answered point of their conversations, newest session last so
/// it wins a tie.
async fn scan(
    route: &str,
    state: &AppState,
    threads: &Threads,
    prefix: &str,
    alias: &AgentAlias,
) -> Result<(), OpenAiError> {
    let sessions = state
        .host()
        .chat_sessions()
        .await
        .map_err(|e| unavailable(route, e))?;
    let list = sessions
        .run(|b| b.list())
        .await
        .map_err(|e| unavailable(route, e))?;
    let mine = list
        .into_iter()
        .rev()
        .filter(|m| m.key.as_str().starts_with(prefix) && m.agent.as_ref() == Some(alias));
    for meta in mine {
        let history = sessions
            .load(meta.key.clone(), Page::All)
            .await
            .map_err(|e| unavailable(route, e))?;
        let visible = visible_of(&history);
        for (i, m) in visible.iter().enumerate() {
            if m.role == Role::Assistant {
                let upto = visible.get(..=i).unwrap_or_default();
                threads.remember(threads::digest_stored(prefix, upto), meta.key.clone());
            }
        }
    }
    Ok(())
}

/// `prefix` and 24 random hex digits (`chatcmpl-...`, `resp_...`).
pub(super) fn random_id(prefix: &str) -> String {
    let mut buf = [0u8; 12];
    let _ = getrandom::fill(&mut buf);
    format!("{prefix}{}", warren_core::hex::encode(&buf))
}

/// Names the session in the response's `X-Warren-Session` header.
pub(super) fn with_session(mut response: Response, key: &SessionKey) -> Response {
    if let Ok(v) = HeaderValue::from_str(key.as_str()) {
        response.headers_mut().insert(SESSION_HEADER, v);
    }
    response
}

/// A request's session as [`session_of`] derives it.
enum Derived {
    /// Named by the `X-Warren-Session` header.
    Named(SessionKey),
    /// One per token, `user` and model; `legacy` is the key before issue 35 (token and `user`
    /// only), still used when its row exists and the model's agent owns it.
    Hashed { key: SessionKey, legacy: SessionKey },
    /// Neither header nor `user`: the session is found by the conversation ([`threads`]).
    Thread,
}

/// The session of a request: the `X-Warren-Session` header, else one per token, `user` and
/// model (issue 35 §7: with the model left out, one `user` talking to two agents met the first
/// agent's session and got 409), else (no `user`, or an empty one) found by the conversation
/// (issue 37 §2).
fn session_of(
    headers: &HeaderMap,
    caller: &Caller,
    user: Option<&str>,
    alias: &AgentAlias,
) -> Result<Derived, OpenAiError> {
    if let Some(value) = headers.get(SESSION_HEADER) {
        let value = value.to_str().unwrap_or_default();
        return SessionKey::new(value).map(Derived::Named).map_err(|e| {
            OpenAiError::bad(
                SESSION_HEADER,
                "invalid_session",
                format!("header {SESSION_HEADER}: {e}"),
            )
        });
    }
    let user = user.unwrap_or_default();
    if user.chars().count() > MAX_USER {
        return Err(OpenAiError::bad(
            "user",
            "invalid_user",
            format!("at most {MAX_USER} characters"),
        ));
    }
    if user.is_empty() {
        return Ok(Derived::Thread);
    }
    let key = |model: Option<&AgentAlias>| {
        let mut hash = Sha256::new();
        hash.update(caller.token_hash.as_bytes());
        hash.update([0]);
        hash.update(user.as_bytes());
        if let Some(model) = model {
            hash.update([0]);
            hash.update(model.as_str().as_bytes());
        }
        let hex = warren_core::hex::encode(&hash.finalize());
        SessionKey::new(format!("oai-{}", hex.get(..24).unwrap_or(&hex))).map_err(|e| {
            OpenAiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
                e.to_string(),
            )
        })
    };
    Ok(Derived::Hashed {
        key: key(Some(alias))?,
        legacy: key(None)?,
    })
}

/// 503: the chat sessions cannot be read.
fn unavailable(route: &str, e: impl std::fmt::Display) -> OpenAiError {
    OpenAiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "sessions_unavailable",
        format!("{route}: {e}"),
    )
}

/// The chat sessions and the stored row of session `key` (`None` when there is none).
async fn session_meta(
    route: &str,
    state: &AppState,
    key: &SessionKey,
) -> Result<(SessionHandle, Option<SessionMeta>), OpenAiError> {
    let sessions = state
        .host()
        .chat_sessions()
        .await
        .map_err(|e| unavailable(route, e))?;
    let k = key.clone();
    let meta = sessions
        .run(move |b| b.meta(&k))
        .await
        .map_err(|e| unavailable(route, e))?;
    Ok((sessions, meta))
}

/// Whether session `key` exists and belongs to `alias`.
async fn owned_by(
    route: &str,
    state: &AppState,
    key: &SessionKey,
    alias: &AgentAlias,
) -> Result<bool, OpenAiError> {
    let (_, meta) = session_meta(route, state, key).await?;
    Ok(meta.is_some_and(|m| m.agent.as_ref() == Some(alias)))
}

/// The stored conversation of `key` (user messages and final replies), or `None` when the
/// session belongs to another agent (the door refuses it).
async fn stored_conversation(
    route: &str,
    state: &AppState,
    key: &SessionKey,
    alias: &AgentAlias,
) -> Result<Option<Vec<Visible>>, OpenAiError> {
    let (sessions, meta) = session_meta(route, state, key).await?;
    match meta {
        None => return Ok(Some(Vec::new())),
        Some(m) if m.agent.as_ref().is_some_and(|a| a != alias) => return Ok(None),
        Some(_) => {}
    }
    let history = sessions
        .load(key.clone(), Page::All)
        .await
        .map_err(|e| unavailable(route, e))?;
    Ok(Some(visible_of(&history)))
}

/// A stored history as a client shows it: user messages and final replies.
fn visible_of(history: &warren_store::sessions::History) -> Vec<Visible> {
    history
        .messages
        .iter()
        .map(warren_runtime::history::decode)
        .filter(|m| m.role == Role::User || (m.role == Role::Assistant && m.tool_calls.is_empty()))
        .map(|m| Visible {
            role: m.role,
            text: m.content,
        })
        .collect()
}
