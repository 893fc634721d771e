//! The ACP handlers: `initialize`, `session/new`, `session/load`, `session/prompt`,
//! `session/set_mode` and `session/cancel`. Handlers run inside the connection's dispatch loop,
//! so a prompt's turn runs on a spawned task (it waits for permission answers that only the
//! loop can deliver).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, ContentBlock, ContentChunk, FileSystemCapabilities,
    Implementation, InitializeRequest, InitializeResponse, LoadSessionRequest, LoadSessionResponse,
    NewSessionRequest, NewSessionResponse, PromptRequest, PromptResponse, SessionId,
    SessionNotification, SessionUpdate, SetSessionModeRequest, SetSessionModeResponse, StopReason,
    ToolCall, ToolCallContent, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, Client, ConnectTo, Error, ErrorCode};
use serde_json::json;
use warren_core::{AgentAlias, SessionKey};
use warren_runtime::{
    AgentHost, CancelToken, Channel, TurnError, TurnEvent, TurnEvents, TurnOutcome, TurnRequest,
};
use warren_security::SecurityPolicy;
use warren_store::acp::{AcpSession, AcpSessionStore, NewAcpSession, Restore};
use warren_tools::{FileTransport, ToolContext};

use crate::approver::{ClientApprover, Tracker};
use crate::files::{ClientFiles, allowed_mode, mode_autonomy, mode_id, modes};

/// Transcript roles of `acp_transcript` rows written by the server.
pub(crate) const USER: &str = "user";
pub(crate) const AGENT: &str = "agent";
/// A finished tool call: JSON `{"id", "name", "arguments", "ok", "content"}`.
pub(crate) const TOOL: &str = "tool";

/// Where a server's turns go: its own process's host, or the daemon's current generation (a
/// connection outlives reloads; the old generation's host cancels its turns after the grace).
#[derive(Clone)]
pub enum Hosts {
    Fixed(Arc<AgentHost>),
    Current(Arc<Mutex<Arc<AgentHost>>>),
}

impl Hosts {
    fn get(&self) -> Arc<AgentHost> {
        match self {
            Hosts::Fixed(host) => Arc::clone(host),
            Hosts::Current(current) => {
                Arc::clone(&current.lock().unwrap_or_else(|p| p.into_inner()))
            }
        }
    }
}

/// One `warren acp` process: one agent, its sessions, the turns running now.
pub struct Server {
    hosts: Hosts,
    alias: AgentAlias,
    policy: SecurityPolicy,
    store: AcpSessionStore,
    /// Cancel tokens of the running turns, by ACP session id (process-local, STATE-20).
    running: Mutex<HashMap<String, CancelToken>>,
    /// The file methods the client offered in `initialize`.
    client_fs: Mutex<FileSystemCapabilities>,
}

impl Server {
    pub fn new(
        hosts: Hosts,
        alias: AgentAlias,
        policy: SecurityPolicy,
        store: AcpSessionStore,
    ) -> Self {
        Self {
            hosts,
            alias,
            policy,
            store,
            running: Mutex::new(HashMap::new()),
            client_fs: Mutex::new(FileSystemCapabilities::new()),
        }
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<String, CancelToken>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn initialize(&self, request: &InitializeRequest) -> InitializeResponse {
        *self.client_fs.lock().unwrap_or_else(|p| p.into_inner()) =
            request.client_capabilities.fs.clone();
        // Prompts: text and resource links (the ACP baseline); no images, audio or embedded
        // context. No MCP servers (Warren's MCP issue has not landed).
        InitializeResponse::new(ProtocolVersion::V1)
            .agent_capabilities(AgentCapabilities::new().load_session(true))
            .agent_info(Implementation::new("warren", env!("CARGO_PKG_VERSION")))
    }

    /// `session/new`: records the session for this agent with the working root the cwd rule
    /// allows; returns the notice to show when the client's cwd was replaced.
    fn new_session(
        &self,
        request: &NewSessionRequest,
    ) -> Result<(NewSessionResponse, Option<String>), Error> {
        let (cwd, notice) = cwd_rule(&self.policy, &request.cwd);
        let id = format!("acp-{}", uuid::Uuid::new_v4());
        let key = SessionKey::new(id.as_str()).map_err(internal)?;
        self.store
            .create(&NewAcpSession {
                id: id.clone(),
                agent: self.alias.clone(),
                cwd: cwd.display().to_string(),
                mode: None,
                transcript: Some(key.to_string()),
            })
            .map_err(internal)?;
        let meta = json!({"warren": {"agent": self.alias, "cwd": cwd, "cwd_notice": notice}});
        let response = NewSessionResponse::new(id)
            .modes(modes(self.policy.autonomy(), None))
            .meta(meta.as_object().cloned());
        Ok((response, notice))
    }

    /// The stored session `id`, if this server's agent owns it and it can be used.
    fn owned(&self, id: &SessionId) -> Result<AcpSession, Error> {
        match self.store.load(&id.0).map_err(internal)? {
            Restore::Missing => Err(Error::new(
                ErrorCode::from(-32002),
                format!("ACP session '{id}' does not exist"),
            )),
            Restore::Tombstoned(s) => Err(Error::new(
                ErrorCode::INVALID_PARAMS,
                format!("ACP session '{id}' was {}; start a new session", s.state),
            )),
            Restore::Restorable(s) if s.agent != self.alias => Err(Error::new(
                ErrorCode::INVALID_PARAMS,
                format!(
                    "ACP session '{id}' belongs to agent '{}'; this server serves agent '{}' (SESS-1: a session is owned by one agent)",
                    s.agent, self.alias
                ),
            )),
            Restore::Restorable(s) => Ok(s),
        }
    }

    /// `session/load`: replays the stored transcript as `session/update` notifications.
    fn load_session(
        &self,
        request: &LoadSessionRequest,
        cx: &ConnectionTo<Client>,
    ) -> Result<LoadSessionResponse, Error> {
        let session = self.owned(&request.session_id)?;
        self.store.touch(&session.id).map_err(internal)?;
        let id = request.session_id.clone();
        for message in self.store.transcript(&session.id).map_err(internal)? {
            let update = match message.role.as_str() {
                USER => SessionUpdate::UserMessageChunk(ContentChunk::new(message.content.into())),
                AGENT => {
                    SessionUpdate::AgentMessageChunk(ContentChunk::new(message.content.into()))
                }
                TOOL => match serde_json::from_str::<serde_json::Value>(&message.content) {
                    Ok(v) => SessionUpdate::ToolCall(stored_tool_call(&v)),
                    Err(_) => continue,
                },
                _ => continue,
            };
            cx.send_notification(SessionNotification::new(id.clone(), update))?;
        }
        let meta = json!({"warren": {"agent": self.alias, "cwd": session.cwd}});
        Ok(LoadSessionResponse::new()
            .modes(modes(
                self.policy.autonomy(),
                mode_autonomy(session.mode.as_deref()),
            ))
            .meta(meta.as_object().cloned()))
    }

    /// `session/set_mode`: the session's autonomy from now on, never above the configured one.
    fn set_mode(&self, request: &SetSessionModeRequest) -> Result<SetSessionModeResponse, Error> {
        let session = self.owned(&request.session_id)?;
        let autonomy = allowed_mode(
            self.alias.as_str(),
            self.policy.autonomy(),
            &request.mode_id.0,
        )?;
        self.store
            .set_mode(&session.id, Some(mode_id(autonomy)))
            .map_err(internal)?;
        Ok(SetSessionModeResponse::new())
    }

    /// `session/cancel`: cancels the session's running turn, if any.
    fn cancel(&self, id: &SessionId) {
        if let Some(token) = self.running().get(&*id.0) {
            token.cancel();
        }
    }

    /// `session/prompt`: starts the turn on its own task; the response is sent when it ends.
    fn prompt(
        self: &Arc<Self>,
        request: PromptRequest,
        responder: Responder<PromptResponse>,
        cx: ConnectionTo<Client>,
    ) -> Result<(), Error> {
        let started = (|| {
            let session = self.owned(&request.session_id)?;
            let input = prompt_text(&request.prompt)?;
            let key = SessionKey::new(session.transcript.as_deref().unwrap_or(&session.id))
                .map_err(internal)?;
            let cancel = CancelToken::new();
            {
                let mut running = self.running();
                if running.contains_key(&session.id) {
                    return Err(Error::new(
                        ErrorCode::INVALID_REQUEST,
                        format!(
                            "a prompt is already running in ACP session '{}'; cancel it first",
                            session.id
                        ),
                    ));
                }
                running.insert(session.id.clone(), cancel.clone());
            }
            Ok((session, input, key, cancel))
        })();
        let (session, input, key, cancel) = match started {
            Ok(s) => s,
            Err(e) => return responder.respond_with_error(e),
        };
        let me = Arc::clone(self);
        let task_cx = cx.clone();
        cx.spawn(async move {
            let result = me
                .turn(&task_cx, request.session_id, &session, key, input, cancel)
                .await;
            me.running().remove(&session.id);
            match result {
                Ok(stop) => responder.respond(PromptResponse::new(stop)),
                Err(e) => responder.respond_with_error(e),
            }
        })
    }

    /// One prompt as one turn through the runtime's door.
    async fn turn(
        &self,
        cx: &ConnectionTo<Client>,
        id: SessionId,
        session: &AcpSession,
        key: SessionKey,
        input: String,
        cancel: CancelToken,
    ) -> Result<StopReason, Error> {
        self.store
            .append_transcript(&session.id, USER, &input)
            .map_err(internal)?;
        let tracker = Arc::new(Mutex::new(Tracker::default()));
        let request = TurnRequest {
            max_output_tokens: None,
            agent: self.alias.clone(),
            session: Some(key),
            channel: Channel::Acp,
            input,
            approver: Arc::new(ClientApprover::new(
                cx.clone(),
                id.clone(),
                Arc::clone(&tracker),
            )),
            cancel: cancel.clone(),
            events: events(cx.clone(), id.clone(), Arc::clone(&tracker)),
        };
        // What the turn's tools get from this session: the editor's files, the mode's cap.
        let fs = self
            .client_fs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let context = ToolContext {
            files: ClientFiles::new(cx.clone(), id.clone(), &fs)
                .map(|f| Arc::new(f) as Arc<dyn FileTransport>),
            autonomy_cap: mode_autonomy(session.mode.as_deref()),
            channel: None, // the door sets the turn's channel
        };
        let result: Result<TurnOutcome, TurnError> = context
            .scope(async {
                let turn = self.hosts.get().submit(request).await?;
                turn.finish().await
            })
            .await;
        // The transcript keeps what the client saw, in order, whatever the turn's end.
        let segments = std::mem::take(&mut tracker.lock().unwrap_or_else(|p| p.into_inner()).log);
        for (role, content) in segments {
            if let Err(e) = self.store.append_transcript(&session.id, role, &content) {
                tracing::warn!(session = %session.id, "ACP transcript: {e}");
            }
        }
        match result {
            _ if cancel.is_cancelled() => Ok(StopReason::Cancelled),
            Ok(outcome) if outcome.hit_iteration_cap => Ok(StopReason::MaxTurnRequests),
            Ok(_) => Ok(StopReason::EndTurn),
            Err(TurnError::Cancelled) => Ok(StopReason::Cancelled),
            Err(e) => Err(Error::internal_error().data(e.to_string())),
        }
    }
}

/// The turn's events as `session/update` notifications; the tracker keeps the transcript and
/// the announced calls (the approver names the call it asks about).
fn events(cx: ConnectionTo<Client>, id: SessionId, tracker: Arc<Mutex<Tracker>>) -> TurnEvents {
    Arc::new(move |event| {
        let update = {
            let mut t = tracker.lock().unwrap_or_else(|p| p.into_inner());
            match event {
                TurnEvent::TextDelta(text) => {
                    t.text(&text);
                    SessionUpdate::AgentMessageChunk(ContentChunk::new(text.into()))
                }
                TurnEvent::Notice(notice) => {
                    SessionUpdate::AgentThoughtChunk(ContentChunk::new(notice.into()))
                }
                TurnEvent::ToolCall(call) => {
                    t.announced.push(Arc::clone(&call));
                    SessionUpdate::ToolCall(
                        ToolCall::new(call.id.clone(), title(&call.name, &call.arguments))
                            .kind(kind(&call.name))
                            .status(ToolCallStatus::Pending)
                            .raw_input(call.arguments.clone()),
                    )
                }
                TurnEvent::ToolResult {
                    call, ok, content, ..
                } => {
                    t.announced.retain(|c| c.id != call.id);
                    t.tool(json!({
                        "id": call.id, "name": call.name, "arguments": call.arguments,
                        "ok": ok, "content": content,
                    }));
                    SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                        call.id.clone(),
                        ToolCallUpdateFields::new()
                            .status(if ok {
                                ToolCallStatus::Completed
                            } else {
                                ToolCallStatus::Failed
                            })
                            .content(vec![ToolCallContent::from(content)]),
                    ))
                }
                // This channel asks in place (`session/request_permission`).
                TurnEvent::ApprovalPending { .. } => return,
            }
        };
        if let Err(e) = cx.send_notification(SessionNotification::new(id.clone(), update)) {
            tracing::debug!("ACP session/update not sent: {e}");
        }
    })
}

/// A stored tool call, replayed by `session/load` as a finished `tool_call`.
fn stored_tool_call(v: &serde_json::Value) -> ToolCall {
    let name = v["name"].as_str().unwrap_or("tool");
    let status = if v["ok"].as_bool().unwrap_or(false) {
        ToolCallStatus::Completed
    } else {
        ToolCallStatus::Failed
    };
    ToolCall::new(
        v["id"].as_str().unwrap_or("").to_string(),
        title(name, &v["arguments"]),
    )
    .kind(kind(name))
    .status(status)
    .raw_input(v["arguments"].clone())
    .content(vec![ToolCallContent::from(
        v["content"].as_str().unwrap_or("").to_string(),
    )])
}

/// What the editor shows for a call: the tool and its main argument.
pub(crate) fn title(name: &str, arguments: &serde_json::Value) -> String {
    let main = ["path", "command", "operation", "key", "query"]
        .iter()
        .find_map(|k| arguments.get(k).and_then(|v| v.as_str()));
    match main {
        Some(m) => format!("{name} {m}"),
        None => name.to_string(),
    }
}

pub(crate) fn kind(name: &str) -> ToolKind {
    match name {
        "file_read" | "memory_recall" => ToolKind::Read,
        "file_write" | "file_edit" | "memory_store" => ToolKind::Edit,
        "memory_forget" => ToolKind::Delete,
        "shell" | "git_operations" => ToolKind::Execute,
        "memory_search" => ToolKind::Search,
        _ => ToolKind::Other,
    }
}

/// The prompt as the turn's input: text blocks, and resource links named by their URI.
fn prompt_text(blocks: &[ContentBlock]) -> Result<String, Error> {
    let mut text = String::new();
    for block in blocks {
        match block {
            ContentBlock::Text(t) => text.push_str(&t.text),
            ContentBlock::ResourceLink(link) => {
                if !text.is_empty() && !text.ends_with('\n') {
                    text.push('\n');
                }
                text.push_str(&format!("[{}]({})", link.name, link.uri));
            }
            _ => {
                return Err(Error::new(
                    ErrorCode::INVALID_PARAMS,
                    "this agent accepts text and resource links only (see the initialize capabilities)",
                ));
            }
        }
    }
    if text.trim().is_empty() {
        return Err(Error::new(ErrorCode::INVALID_PARAMS, "the prompt is empty"));
    }
    Ok(text)
}

/// The session's working root: the client's `cwd` when it lies inside the agent's workspace
/// or one of its grants (or anywhere not forbidden, for an agent with an unrestricted
/// filesystem); otherwise the workspace, with a notice saying so.
///
/// The check never follows a link: the path must be absolute with plain components only, and
/// below a root it is opened one component at a time through confined handles
/// (`RESOLVE_NO_SYMLINKS`), so a link leading out of the workspace is refused rather than
/// resolved. The cwd is only recorded and reported; tools resolve paths through the policy.
pub fn cwd_rule(policy: &SecurityPolicy, requested: &Path) -> (PathBuf, Option<String>) {
    let workspace = policy.workspace().to_path_buf();
    if let Some(asked) = plain_absolute(requested) {
        let forbidden = policy
            .forbidden_paths()
            .iter()
            .any(|f| asked.starts_with(f));
        let mut roots = vec![workspace.as_path()];
        roots.extend(
            policy
                .read_write_roots()
                .iter()
                .chain(policy.read_only_roots())
                .chain(policy.write_only_roots())
                .map(|g| g.root.as_path()),
        );
        let inside = roots.iter().any(|root| opens_below(root, &asked));
        if !forbidden && (inside || !policy.workspace_only()) {
            return (asked, None);
        }
    }
    let notice = format!(
        "the editor's working directory {} is outside agent '{}''s workspace and grants; this session works in {}",
        requested.display(),
        policy.alias(),
        workspace.display()
    );
    (workspace, Some(notice))
}

/// `path` when it is absolute and made of plain components only (no `.`, `..`).
fn plain_absolute(path: &Path) -> Option<PathBuf> {
    use std::path::Component;
    if !path.is_absolute() {
        return None;
    }
    path.components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
        .then(|| path.to_path_buf())
}

/// Whether `asked` is `root` or a directory below it reachable without following a link.
fn opens_below(root: &Path, asked: &Path) -> bool {
    let Ok(rel) = asked.strip_prefix(root) else {
        return false;
    };
    let Ok(Some(dir)) = warren_config::confined::ConfinedDir::open_root(root) else {
        return false;
    };
    rel.as_os_str().is_empty() || matches!(dir.open_dir(rel, false), Ok(Some(_)))
}

/// Whether the transport failed because the client closed its end (EPIPE / reset).
fn hung_up(e: &Error) -> bool {
    let text = format!("{e} {:?}", e.data);
    ["Broken pipe", "Connection reset"]
        .iter()
        .any(|needle| text.contains(needle))
}

fn internal(e: impl std::fmt::Display) -> Error {
    Error::internal_error().data(e.to_string())
}

/// Serves `server` on `transport` (stdin/stdout, or a daemon socket connection) until the
/// client closes the connection.
pub async fn serve(
    server: Server,
    transport: impl ConnectTo<Agent> + 'static,
) -> anyhow::Result<()> {
    let server = Arc::new(server);
    let s_mode = Arc::clone(&server);
    let (s_init, s_new, s_load, s_prompt, s_cancel) = (
        Arc::clone(&server),
        Arc::clone(&server),
        Arc::clone(&server),
        Arc::clone(&server),
        Arc::clone(&server),
    );
    Agent
        .v1()
        .name("warren")
        .on_receive_request(
            async move |request: InitializeRequest, responder, _cx| {
                responder.respond(s_init.initialize(&request))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: NewSessionRequest, responder, cx: ConnectionTo<Client>| match s_new
                .new_session(&request)
            {
                Ok((response, notice)) => {
                    let id = response.session_id.clone();
                    responder.respond(response)?;
                    if let Some(notice) = notice {
                        cx.send_notification(SessionNotification::new(
                            id,
                            SessionUpdate::AgentMessageChunk(ContentChunk::new(
                                format!("Note: {notice}.\n").into(),
                            )),
                        ))?;
                    }
                    Ok(())
                }
                Err(e) => responder.respond_with_error(e),
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: LoadSessionRequest, responder, cx: ConnectionTo<Client>| {
                match s_load.load_session(&request, &cx) {
                    Ok(response) => responder.respond(response),
                    Err(e) => responder.respond_with_error(e),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: PromptRequest, responder, cx: ConnectionTo<Client>| {
                s_prompt.prompt(request, responder, cx)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: SetSessionModeRequest, responder, _cx| match s_mode
                .set_mode(&request)
            {
                Ok(response) => responder.respond(response),
                Err(e) => responder.respond_with_error(e),
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |notification: CancelNotification, _cx| {
                s_cancel.cancel(&notification.session_id);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_to(transport)
        .await
        .or_else(|e| {
            // The editor hung up while a last update was on its way: the session simply ended.
            if hung_up(&e) {
                tracing::debug!("ACP client closed the connection: {e}");
                Ok(())
            } else {
                Err(anyhow::anyhow!("ACP connection: {e}"))
            }
        })
}
