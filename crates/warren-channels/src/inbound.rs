//! From the inbox to the door (issue 38 §1–3): each stored row is decided once — a sender who
//! may not talk is refused (no reply; the owners are asked once, Allow / Block), a group
//! message not addressed to the bot is ignored, a command is answered by the channel, and a
//! message becomes exactly one turn through the engine's one door ([`AgentHost::submit`]) in
//! the sender's session. The row is `turn_started` (committed) before the turn is submitted,
//! and `done` with its reply queued in one transaction when it ends. Turns of one session run
//! in arrival order; turns of different sessions run side by side. A non-owner's message
//! marks the turn untrusted (the taint rule).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::task::JoinHandle;
use warren_config::schema::channels::{SessionScope, TelegramChannel};
use warren_core::SessionKey;
use warren_runtime::approval::Approver;
use warren_runtime::cancel::CancelToken;
use warren_runtime::host::{AgentHost, TurnRequest};
use warren_runtime::turn::taint::Taint;
use warren_runtime::turn::{Channel, TurnEvents};
use warren_store::channels::{ChannelStore, ChannelStoreError, InboxRow, Outbound};

/// Who a sender is to a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Listed in `owners`: may talk, decides on new senders, does not taint a turn.
    Owner,
    /// Listed in `allow` or allowed by an owner: may talk; the turn is untrusted.
    Allowed,
    /// Blocked by an owner: refused, no reply.
    Blocked,
    /// Never decided: refused, no reply; the owners are asked.
    Unknown,
}

/// `sender`'s standing on channel `name` with `config`, from the config lists and the store.
pub fn standing(
    store: &ChannelStore,
    name: &str,
    config: &TelegramChannel,
    sender: &str,
) -> Result<Standing, ChannelStoreError> {
    if config.owners.iter().any(|o| o == sender) {
        return Ok(Standing::Owner);
    }
    let decided = store.sender(name, sender)?.map(|s| s.status);
    Ok(match decided.as_deref() {
        Some("blocked") => Standing::Blocked,
        Some("allowed") => Standing::Allowed,
        _ if config.allow.iter().any(|a| a == sender) => Standing::Allowed,
        _ => Standing::Unknown,
    })
}

/// The conversation scope of `row` under `scope` (the part of the session key after the bot).
pub fn scope_of(row: &InboxRow, scope: SessionScope) -> String {
    let thread = row
        .thread_id
        .as_deref()
        .map(|t| format!("_t{t}"))
        .unwrap_or_default();
    match scope {
        SessionScope::PerSender => format!("{}_{}{thread}", row.chat_id, row.sender_id),
        SessionScope::PerChat => format!("{}{thread}", row.chat_id),
        SessionScope::Shared => "all".to_string(),
    }
}

/// The session key of a scope's generation: `tg_<bot>_<scope>[_n<generation>]`.
pub fn session_key(short: &str, scope: &str, generation: i64) -> String {
    let base = format!("tg_{short}_{scope}");
    if generation > 0 {
        format!("{base}_n{generation}")
    } else {
        base
    }
}

/// Shows the typing action in a chat (and topic).
pub type Typing = Arc<dyn Fn(&str, Option<&str>) + Send + Sync>;
/// Answers a button press (its query id) with a toast.
pub type Toast = Arc<dyn Fn(&str, &str) + Send + Sync>;

/// What the worker shares with its turn tasks.
pub(crate) struct Worker {
    /// `telegram.<name>`.
    pub name: String,
    /// `<name>`.
    pub short: String,
    pub config: TelegramChannel,
    pub host: Arc<AgentHost>,
    pub store: Arc<ChannelStore>,
    /// Wakes the sender when a reply is queued.
    pub queued: Arc<tokio::sync::Notify>,
    /// Shows the typing action (best effort; never a reply).
    pub typing: Typing,
    /// Answers a button press with a toast (best effort).
    pub toast: Toast,
    /// Where media files come from (issue 38 §5: the bot's API).
    pub files: Arc<dyn crate::media::FileSource>,
    /// The last turn task of each session (the next one waits for it) and its cancel token.
    pub running: Mutex<HashMap<String, (JoinHandle<()>, CancelToken)>>,
}

fn payload(row: &InboxRow) -> Value {
    row.payload
        .as_deref()
        .and_then(|p| serde_json::from_str(p).ok())
        .unwrap_or(Value::Null)
}

fn notice(row: &InboxRow, purpose: &str, text: String) -> Outbound {
    Outbound {
        inbox_id: Some(row.id),
        purpose: purpose.to_string(),
        chat_id: row.chat_id.clone(),
        thread_id: row.thread_id.clone(),
        text,
        markup: None,
        plain: true,
    }
}

/// The text an interrupted turn's sender gets after a restart.
pub(crate) fn interrupted_notice(row: &InboxRow) -> Outbound {
    notice(
        row,
        "notice",
        "Warren restarted while answering this message; the turn was not run again. Send it once more if you still need an answer.".to_string(),
    )
}

impl Worker {
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&ChannelStore) -> Result<T, ChannelStoreError> + Send + 'static,
    ) -> Result<T, ChannelStoreError> {
        let store = Arc::clone(&self.store);
        match tokio::task::spawn_blocking(move || f(&store)).await {
            Ok(r) => r,
            Err(e) => Err(ChannelStoreError::Db {
                path: std::path::PathBuf::from("data/channels/channels.db"),
                cause: format!("the store task failed: {e}"),
            }),
        }
    }

    /// Decides every row still `received`, oldest first.
    pub async fn drain(self: &Arc<Self>) -> Result<(), ChannelStoreError> {
        let name = self.name.clone();
        let rows = self.blocking(move |s| s.received(&name)).await?;
        for row in rows {
            self.decide(row).await?;
        }
        Ok(())
    }

    async fn close(
        &self,
        row: &InboxRow,
        state: &'static str,
        note: String,
        out: Vec<Outbound>,
    ) -> Result<(), ChannelStoreError> {
        let (name, id) = (self.name.clone(), row.id);
        self.blocking(move |s| s.close_without_turn(&name, id, state, &note, &out))
            .await?;
        self.queued.notify_one();
        Ok(())
    }

    async fn decide(self: &Arc<Self>, row: InboxRow) -> Result<(), ChannelStoreError> {
        let (name, config, sender) = (
            self.name.clone(),
            self.config.clone(),
            row.sender_id.clone(),
        );
        let standing = self
            .blocking(move |s| standing(s, &name, &config, &sender))
            .await?;
        if row.kind == "callback" {
            return self.button(&row, standing).await;
        }
        if payload(&row)["addressed"] == false && self.config.groups.require_mention {
            return self
                .close(
                    &row,
                    "ignored",
                    "a group message not addressed to the bot".into(),
                    Vec::new(),
                )
                .await;
        }
        match standing {
            Standing::Blocked => {
                self.close(&row, "refused", "blocked sender".into(), Vec::new())
                    .await
            }
            Standing::Unknown => self.stranger(&row).await,
            Standing::Owner | Standing::Allowed if row.kind == "command" => {
                self.command(&row, standing).await
            }
            Standing::Owner | Standing::Allowed => self.turn(row, standing).await,
        }
    }

    /// An unknown sender: refused without a reply; each owner asked once (Allow / Block).
    async fn stranger(&self, row: &InboxRow) -> Result<(), ChannelStoreError> {
        let (name, sender, sender_name) = (
            self.name.clone(),
            row.sender_id.clone(),
            row.sender_name.clone(),
        );
        let first = self
            .blocking(move |s| s.note_pending(&name, &sender, &sender_name))
            .await?;
        let mut prompts = Vec::new();
        if first {
            let who = if row.sender_name.is_empty() {
                row.sender_id.clone()
            } else {
                format!("{} ({})", row.sender_name, row.sender_id)
            };
            let excerpt: String = row.text.chars().take(200).collect();
            let markup = json!({"inline_keyboard": [[
                {"text": "Allow", "callback_data": format!("allow:{}", row.sender_id)},
                {"text": "Block", "callback_data": format!("block:{}", row.sender_id)},
            ]]});
            for owner in &self.config.owners {
                prompts.push(Outbound {
                    inbox_id: Some(row.id),
                    purpose: format!("prompt:{owner}"),
                    chat_id: owner.clone(),
                    thread_id: None,
                    text: format!(
                        "{who} wants to talk to {}:\n\n\"{excerpt}\"\n\nAllow or Block? (or `warren channels allow|block {} {}`)",
                        self.config.agent, self.short, row.sender_id
                    ),
                    markup: Some(markup.to_string()),
                    plain: true,
                });
            }
        }
        self.close(
            row,
            "refused",
            "unknown sender (no reply; the owners were asked)".into(),
            prompts,
        )
        .await
    }

    /// A button: `allow:<id>` / `block:<id>` from an owner decides a sender; anyone else's
    /// press is refused.
    async fn button(&self, row: &InboxRow, standing: Standing) -> Result<(), ChannelStoreError> {
        let query = payload(row)["callback_query_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        // Issue 38 §4: Approve / Deny on an approval prompt (crate::approvals).
        let guard = crate::approvals::Guard::Owners;
        match crate::approvals::press(
            self.host.approvals(),
            &self.name,
            &self.config.owners,
            &row.sender_id,
            &row.text,
            guard,
        ) {
            Some(crate::approvals::Press::Decided { toast, note }) => {
                (self.toast)(&query, &toast);
                let (name, id) = (self.name.clone(), row.id);
                return self
                    .blocking(move |s| s.finish_turn(&name, id, Some(&note), None))
                    .await;
            }
            Some(crate::approvals::Press::Refused { toast, note }) => {
                (self.toast)(&query, &toast);
                return self.close(row, "refused", note, Vec::new()).await;
            }
            None => {}
        }
        let decision = row
            .text
            .split_once(':')
            .filter(|(verb, _)| matches!(*verb, "allow" | "block"));
        let Some((verb, target)) = decision else {
            (self.toast)(&query, "This button is no longer valid.");
            return self
                .close(
                    row,
                    "ignored",
                    format!("unknown button '{}'", row.text),
                    Vec::new(),
                )
                .await;
        };
        if standing != Standing::Owner {
            (self.toast)(&query, "Only the bot's owners can decide this.");
            return self
                .close(
                    row,
                    "refused",
                    format!("a button press by non-owner {}", row.sender_id),
                    Vec::new(),
                )
                .await;
        }
        let status = if verb == "allow" {
            "allowed"
        } else {
            "blocked"
        };
        let (name, who) = (self.name.clone(), target.to_string());
        self.blocking(move |s| s.set_sender(&name, &who, status))
            .await?;
        (self.toast)(&query, &format!("{target} {status}"));
        let (name, id) = (self.name.clone(), row.id);
        let note = format!("sender {target} {status} by owner {}", row.sender_id);
        self.blocking(move |s| s.finish_turn(&name, id, Some(&note), None))
            .await
    }

    /// The scope and session key of `row` now.
    async fn session_of(&self, row: &InboxRow) -> Result<(String, String), ChannelStoreError> {
        let scope = scope_of(row, self.config.session);
        let (name, s2) = (self.name.clone(), scope.clone());
        let generation = self.blocking(move |s| s.generation(&name, &s2)).await?;
        let key = session_key(&self.short, &scope, generation);
        Ok((scope, key))
    }

    async fn command(&self, row: &InboxRow, standing: Standing) -> Result<(), ChannelStoreError> {
        let (scope, key) = self.session_of(row).await?;
        let text = match row.text.as_str() {
            "/new" => {
                let (name, s2) = (self.name.clone(), scope.clone());
                let generation = self
                    .blocking(move |s| s.next_generation(&name, &s2))
                    .await?;
                format!(
                    "New session started ({}).",
                    session_key(&self.short, &scope, generation)
                )
            }
            "/stop" => {
                let running = self
                    .running
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(&key)
                    .filter(|(task, _)| !task.is_finished())
                    .map(|(_, cancel)| cancel.clone());
                match running {
                    Some(cancel) => {
                        cancel.cancel();
                        "Stopped the running turn.".to_string()
                    }
                    None => "Nothing is running.".to_string(),
                }
            }
            "/status" => {
                let trust = if standing == Standing::Owner {
                    "owner"
                } else {
                    "allowed sender (turns are untrusted)"
                };
                format!("Agent: {}\nSession: {key}\nYou: {trust}", self.config.agent)
            }
            _ => format!("Hi! You are talking to {}.", self.config.agent),
        };
        let (name, id) = (self.name.clone(), row.id);
        let reply = notice(row, "reply", text);
        self.blocking(move |s| s.finish_turn(&name, id, None, Some(&reply)))
            .await?;
        self.queued.notify_one();
        Ok(())
    }

    /// Claims the row for its one turn, then runs it after the session's previous turn.
    async fn turn(
        self: &Arc<Self>,
        row: InboxRow,
        standing: Standing,
    ) -> Result<(), ChannelStoreError> {
        let (_, key) = self.session_of(&row).await?;
        let session = match SessionKey::sanitize(&key) {
            Ok(s) => s,
            Err(e) => {
                return self
                    .close(&row, "refused", format!("no session key: {e}"), Vec::new())
                    .await;
            }
        };
        let (id, k2) = (row.id, key.clone());
        if !self.blocking(move |s| s.start_turn(id, &k2)).await? {
            return Ok(());
        }
        let cancel = CancelToken::new();
        let worker = Arc::clone(self);
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        // Sessions whose turns all ended are forgotten (the map holds running work only).
        running.retain(|k, (task, _)| k == &key || !task.is_finished());
        let previous = running.remove(&key).map(|(task, _)| task);
        let turn_cancel = cancel.clone();
        let task = tokio::spawn(async move {
            if let Some(previous) = previous {
                let _ = previous.await;
            }
            worker.run_turn(row, session, standing, turn_cancel).await;
        });
        running.insert(key, (task, cancel));
        Ok(())
    }

    async fn run_turn(
        &self,
        row: InboxRow,
        session: SessionKey,
        standing: Standing,
        cancel: CancelToken,
    ) {
        (self.typing)(&row.chat_id, row.thread_id.as_deref());
        // Issue 38 §5: media saved into the workspace and attached (crate::media).
        let intake = crate::media::Intake {
            files: &self.files,
            host: &self.host,
            store: &self.store,
            name: &self.name,
            config: &self.config,
        };
        let Some((input, images)) = crate::media::take_media(intake, &row).await else {
            self.queued.notify_one();
            return;
        };
        let request = TurnRequest {
            agent: self.config.agent.clone(),
            session: Some(session),
            channel: Channel::Telegram,
            input,
            // Issue 38 §4: the process's pending approvals (the owners' phones, the API).
            approver: Arc::clone(self.host.approvals()) as Arc<dyn Approver>,
            cancel,
            events: Arc::new(|_| {}) as TurnEvents,
            // The provider's own cap (`providers.<name>.max_output_tokens`).
            max_output_tokens: None,
        };
        let source = format!(
            "a message from {} sender {} ({}), who is not an owner",
            self.name, row.sender_id, row.sender_name
        );
        let host = Arc::clone(&self.host);
        let outcome = Taint::scope(async move {
            if standing != Standing::Owner {
                Taint::mark(source);
            }
            match warren_runtime::attachments::Attachments::scope(images, host.submit(request))
                .await
            {
                Ok(turn) => turn.finish().await,
                Err(e) => Err(e),
            }
        })
        .await;
        let (text, note) = match outcome {
            Ok(o) if o.reply.trim().is_empty() => ("(no answer)".to_string(), None),
            Ok(o) => (o.reply, None),
            Err(e) => {
                let why = e.to_string();
                let text = if standing == Standing::Owner {
                    format!("The agent could not answer: {why}")
                } else {
                    "Sorry, the agent could not answer this message.".to_string()
                };
                (text, Some(why))
            }
        };
        let reply = Outbound {
            plain: false,
            ..notice(&row, "reply", text)
        };
        let (name, id) = (self.name.clone(), row.id);
        let stored = self
            .blocking(move |s| s.finish_turn(&name, id, note.as_deref(), Some(&reply)))
            .await;
        if let Err(e) = stored {
            tracing::error!(channel = %self.name, "the reply of inbox row {id} was not stored: {e}");
        }
        self.queued.notify_one();
    }
}
