//! Approvals on the phone (issue 38 §4, BEYOND-16): a channel's [`ApprovalWatcher`] puts every
//! pending approval it routes — each one when the channel is listed in `[approvals] notify`,
//! else its own turns' — on its owners' phones: one message per owner naming the agent, the
//! tool, its arguments (summarised and redacted with the config's redactor), the session that
//! asked and why, with Approve / Deny buttons. A press comes back through the inbox
//! ([`press`]) and decides the approval through the engine's one path
//! ([`PendingApprovals::decide_by`], as `POST /api/approvals/{id}` does), naming the owner who
//! pressed (kept in the trace). A press by anyone who is not an owner is refused with a toast
//! and the approval stays pending. No answer within the risk profile's `approval_timeout_secs`
//! is a deny (the engine's timeout). Once an approval is settled, each prompt is edited to
//! show the outcome and its buttons are dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::json;
use warren_config::Redactor;
use warren_config::schema::channels::TelegramChannel;
use warren_runtime::approval::ApprovalDecision;
use warren_runtime::host::AgentHost;
use warren_runtime::pending::{ApprovalWatcher, PendingApprovals, PendingView, Settled};

use crate::platform::PlatformError;

/// How the watcher reaches a chat (the Telegram adapter implements it on its Bot API client;
/// this module stays below the adapter). Blocking: called on blocking threads.
pub trait Messenger: Send + Sync {
    /// Sends `text` with inline keyboard `markup` (JSON) to `chat`; the message id.
    fn send(&self, chat: &str, text: &str, markup: &str) -> Result<i64, PlatformError>;
    /// Replaces message `message` of `chat` with `text` and drops its keyboard.
    fn edit(&self, chat: &str, message: i64, text: &str) -> Result<(), PlatformError>;
}

/// Characters of the arguments shown in a prompt.
const ARGUMENTS_SHOWN: usize = 600;

/// One prompt's messages and, once settled, its outcome.
#[derive(Default)]
struct Prompt {
    text: String,
    /// (chat, message id) of each prompt sent so far.
    messages: Vec<(String, i64)>,
    /// The outcome line, once settled.
    outcome: Option<String>,
    /// Every owner's send has been tried.
    sent: bool,
}

/// The approval watcher of one Telegram channel.
pub struct PhoneApprovals {
    /// `telegram.<name>`.
    name: String,
    /// `<name>`: this channel's own sessions start `tg_<name>_`.
    short: String,
    owners: Vec<String>,
    /// Listed in `[approvals] notify`: every approval, not only this channel's own.
    everything: bool,
    api: Arc<dyn Messenger>,
    redactor: Redactor,
    /// Approval timeout by agent (its risk profile's), for the prompt.
    timeouts: HashMap<String, u64>,
    prompts: Mutex<HashMap<String, Prompt>>,
}

impl std::fmt::Debug for PhoneApprovals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PhoneApprovals")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The watchers of one generation's channels; dropping it unregisters them.
#[derive(Debug)]
pub struct Registered {
    pending: Arc<PendingApprovals>,
    ids: Vec<u64>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        for id in &self.ids {
            self.pending.unwatch(*id);
        }
    }
}

/// Registers a watcher for every running channel of `host`'s config that has owners (`bots`:
/// each started channel's short name and its messenger).
pub fn register(host: &AgentHost, bots: Vec<(String, Arc<dyn Messenger>)>) -> Registered {
    let config = host.snapshot().config();
    let redactor = Redactor::from_config(config);
    let timeouts: HashMap<String, u64> = config
        .agents()
        .map(|(alias, agent)| {
            (
                alias.to_string(),
                config.risk_profile_of(agent).approval_timeout_secs,
            )
        })
        .collect();
    let pending = Arc::clone(host.approvals());
    let mut ids = Vec::new();
    for (short, messenger) in bots {
        let Some(channel) = config.channels.telegram.get(&short) else {
            continue;
        };
        let name = format!("telegram.{short}");
        if channel.owners.is_empty() {
            if config.approvals.notifies(&name) {
                tracing::warn!(channel = %name, "[approvals] notify names a channel without owners: nobody is asked there");
            }
            continue;
        }
        let watcher = PhoneApprovals::new(
            &name,
            &short,
            channel,
            messenger,
            config.approvals.notifies(&name),
            redactor.clone(),
            timeouts.clone(),
        );
        ids.push(watch(&pending, watcher));
    }
    Registered { pending, ids }
}

impl PhoneApprovals {
    fn new(
        name: &str,
        short: &str,
        channel: &TelegramChannel,
        api: Arc<dyn Messenger>,
        everything: bool,
        redactor: Redactor,
        timeouts: HashMap<String, u64>,
    ) -> Self {
        Self {
            name: name.to_string(),
            short: short.to_string(),
            owners: channel.owners.clone(),
            everything,
            api,
            redactor,
            timeouts,
            prompts: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Prompt>> {
        self.prompts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this channel asks about `view`.
    fn routes(&self, view: &PendingView) -> bool {
        self.everything
            || view
                .session
                .as_deref()
                .is_some_and(|s| s.starts_with(&format!("tg_{}_", self.short)))
    }

    /// The prompt's text.
    pub fn text(&self, view: &PendingView) -> String {
        let arguments = self
            .redactor
            .redact(&view.arguments.to_string())
            .into_owned();
        let mut shown: String = arguments.chars().take(ARGUMENTS_SHOWN).collect();
        if shown.len() < arguments.len() {
            shown.push('…');
        }
        let timeout = self
            .timeouts
            .get(view.agent.as_str())
            .map_or_else(String::new, |s| format!(" within {s}s"));
        format!(
            "Approval needed ({id})\nAgent: {agent}\nTool: {tool}\nArguments: {shown}\nAsked by: {who}\nWhy: {why}\n\nApprove or Deny{timeout}; no answer is a deny.",
            id = view.id,
            agent = view.agent,
            tool = view.tool,
            who = view.session.as_deref().unwrap_or("(no session)"),
            why = self.redactor.redact(&view.reason),
        )
    }

    /// Sends the prompt to every owner (blocking), then edits them at once if the approval was
    /// settled meanwhile.
    fn send_all(self: &Arc<Self>, id: &str, text: &str) {
        let markup = json!({"inline_keyboard": [[
            {"text": "Approve", "callback_data": format!("approve:{id}")},
            {"text": "Deny", "callback_data": format!("deny:{id}")},
        ]]})
        .to_string();
        for owner in &self.owners {
            match self.api.send(owner, text, &markup) {
                Ok(message) => {
                    self.lock()
                        .entry(id.to_string())
                        .or_default()
                        .messages
                        .push((owner.clone(), message));
                }
                Err(e) => {
                    tracing::warn!(channel = %self.name, approval = id, "the approval prompt was not delivered: {e}")
                }
            }
        }
        let late = {
            let mut prompts = self.lock();
            let prompt = prompts.entry(id.to_string()).or_default();
            prompt.sent = true;
            let late = prompt
                .outcome
                .clone()
                .map(|o| (std::mem::take(&mut prompt.messages), o));
            if late.is_some() {
                prompts.remove(id);
            }
            late
        };
        if let Some((messages, outcome)) = late {
            self.edit_all(text, &messages, &outcome);
        }
    }

    /// Shows `outcome` under each prompt and drops its buttons (blocking).
    fn edit_all(&self, text: &str, messages: &[(String, i64)], outcome: &str) {
        for (chat, message) in messages {
            if let Err(e) = self
                .api
                .edit(chat, *message, &format!("{text}\n\n{outcome}"))
            {
                tracing::warn!(channel = %self.name, "the approval prompt was not updated: {e}");
            }
        }
    }
}

fn blocking(f: impl FnOnce() + Send + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => drop(rt.spawn_blocking(f)),
        Err(_) => drop(std::thread::spawn(f)),
    }
}

/// The line a settled prompt shows.
fn outcome_line(settled: &Settled) -> String {
    let by = settled
        .by
        .as_deref()
        .map(|b| format!(" by {}", b.rsplit(':').next().unwrap_or(b)))
        .unwrap_or_default();
    match settled.decision {
        ApprovalDecision::Approved => format!("✅ Approved{by}."),
        ApprovalDecision::Denied => format!("❌ Denied{by}."),
        ApprovalDecision::TimedOut | ApprovalDecision::NoOperator => {
            "⌛ No answer in time: denied.".to_string()
        }
    }
}

/// The watcher as registered: an [`Arc`] so its sends can run on blocking threads.
struct Shared(Arc<PhoneApprovals>);

impl ApprovalWatcher for Shared {
    fn pending(&self, view: &PendingView) {
        if !self.0.routes(view) {
            return;
        }
        let text = self.0.text(view);
        self.0.lock().insert(
            view.id.clone(),
            Prompt {
                text: text.clone(),
                ..Prompt::default()
            },
        );
        let (me, id) = (Arc::clone(&self.0), view.id.clone());
        blocking(move || me.send_all(&id, &text));
    }

    fn settled(&self, id: &str, settled: &Settled) {
        let outcome = outcome_line(settled);
        let ready = {
            let mut prompts = self.0.lock();
            let Some(prompt) = prompts.get_mut(id) else {
                return;
            };
            if prompt.sent {
                prompts.remove(id).map(|p| (p.text, p.messages))
            } else {
                // The sender edits what it sends once it is done.
                prompt.outcome = Some(outcome.clone());
                None
            }
        };
        if let Some((text, messages)) = ready {
            let me = Arc::clone(&self.0);
            blocking(move || me.edit_all(&text, &messages, &outcome));
        }
    }
}

/// Whether a press by `sender` may decide (the approvers are the channel's owners). The check
/// can be switched off only in this module's tests, to show the attack it stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    Owners,
    #[cfg(test)]
    Off,
}

/// What a press did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Press {
    /// Decided: the toast and the inbox note.
    Decided { toast: String, note: String },
    /// Not decided (a non-approver, or no longer pending): the toast and the note.
    Refused { toast: String, note: String },
}

/// A button press `data` by `sender` on channel `name` with approvers `owners`: `None` when
/// it is not an approval button (`approve:<id>` / `deny:<id>`).
pub fn press(
    pending: &PendingApprovals,
    name: &str,
    owners: &[String],
    sender: &str,
    data: &str,
    guard: Guard,
) -> Option<Press> {
    let (verb, id) = data.split_once(':')?;
    let approve = match verb {
        "approve" => true,
        "deny" => false,
        _ => return None,
    };
    let approver = owners.iter().any(|o| o == sender);
    if guard == Guard::Owners && !approver {
        return Some(Press::Refused {
            toast: "Only this bot's approvers can decide this.".into(),
            note: format!("an approval button ({id}) pressed by {sender}, who is not an approver"),
        });
    }
    let by = format!("{name}:{sender}");
    Some(match pending.decide_by(id, approve, &by) {
        Ok(()) => {
            let word = if approve { "Approved" } else { "Denied" };
            Press::Decided {
                toast: format!("{word}."),
                note: format!("approval {id} {} by {by}", word.to_lowercase()),
            }
        }
        Err(e) => Press::Refused {
            toast: "This approval was already decided or has expired.".into(),
            note: e.to_string(),
        },
    })
}

/// Registers `watcher` (in the [`Shared`] wrapper: its sends need an `Arc` of it).
fn watch(pending: &PendingApprovals, watcher: PhoneApprovals) -> u64 {
    pending.watch(Arc::new(Shared(Arc::new(watcher))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_runtime::approval::{ApprovalRequest, Approver};

    fn request() -> ApprovalRequest {
        ApprovalRequest {
            agent: "main".parse().unwrap(),
            tool: "file_write".into(),
            arguments: json!({"path": "notes.md", "content": "token sk-live-abcdefgh12345678"}),
            reason: "supervised autonomy: 'file_write' changes files or state".into(),
            session: Some("tg_home_7_7".into()),
        }
    }

    async fn listed(pending: &PendingApprovals) -> String {
        loop {
            if let Some(v) = pending.list().first() {
                return v.id.clone();
            }
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn only_approvers_decide_and_without_the_guard_a_stranger_would_have_approved_issue38() {
        let owners = vec!["7".to_string()];
        for guard in [Guard::Owners, Guard::Off] {
            let pending = Arc::new(PendingApprovals::new());
            let asking = {
                let p = Arc::clone(&pending);
                tokio::spawn(async move { p.ask(request()).await })
            };
            let id = listed(&pending).await;
            let data = format!("approve:{id}");
            let by_stranger = press(&pending, "telegram.home", &owners, "99", &data, guard);
            match guard {
                Guard::Owners => {
                    assert!(
                        matches!(by_stranger, Some(Press::Refused { .. })),
                        "{by_stranger:?}"
                    );
                    assert_eq!(pending.list().len(), 1, "the approval stays pending");
                    let by_owner = press(&pending, "telegram.home", &owners, "7", &data, guard);
                    assert!(
                        matches!(by_owner, Some(Press::Decided { .. })),
                        "{by_owner:?}"
                    );
                    assert_eq!(pending.decided_by(&id).as_deref(), Some("telegram.home:7"));
                }
                Guard::Off => {
                    // The attack the guard stops: a stranger's press approves the call.
                    assert!(
                        matches!(by_stranger, Some(Press::Decided { .. })),
                        "{by_stranger:?}"
                    );
                }
            }
            assert_eq!(asking.await.ok(), Some(ApprovalDecision::Approved));
        }
        let pending = PendingApprovals::new();
        assert_eq!(
            press(
                &pending,
                "telegram.home",
                &owners,
                "7",
                "allow:99",
                Guard::Owners
            ),
            None
        );
        assert!(matches!(
            press(
                &pending,
                "telegram.home",
                &owners,
                "7",
                "deny:apr-42",
                Guard::Owners
            ),
            Some(Press::Refused { .. })
        ));
    }

    #[test]
    fn the_prompt_names_agent_tool_arguments_asker_and_why_with_secrets_redacted_issue38() {
        let channel: TelegramChannel = toml::from_str(
            "agent = \"main\"\nowners = [\"7\"]\napi_base = \"http://127.0.0.1:1\"\n",
        )
        .unwrap();
        struct Nowhere;
        impl Messenger for Nowhere {
            fn send(
                &self,
                _: &str,
                _: &str,
                _: &str,
            ) -> Result<i64, crate::platform::PlatformError> {
                Err(crate::platform::PlatformError::new(
                    "sendMessage",
                    "nowhere",
                ))
            }
            fn edit(&self, _: &str, _: i64, _: &str) -> Result<(), crate::platform::PlatformError> {
                Err(crate::platform::PlatformError::new(
                    "sendMessage",
                    "nowhere",
                ))
            }
        }
        let watcher = PhoneApprovals::new(
            "telegram.home",
            "home",
            &channel,
            Arc::new(Nowhere),
            false,
            Redactor::new(["sk-live-abcdefgh12345678"]),
            HashMap::from([("main".to_string(), 120)]),
        );
        let request = request();
        let view = PendingView {
            id: "apr-3".into(),
            agent: request.agent.clone(),
            tool: request.tool.clone(),
            arguments: request.arguments.clone(),
            reason: request.reason.clone(),
            session: request.session.clone(),
            created_unix: 0,
        };
        let text = watcher.text(&view);
        for part in [
            "apr-3",
            "Agent: main",
            "Tool: file_write",
            "notes.md",
            "Asked by: tg_home_7_7",
            "Why: supervised",
            "within 120s",
        ] {
            assert!(text.contains(part), "{part} missing from {text}");
        }
        assert!(!text.contains("sk-live-abcdefgh12345678"), "{text}");
        assert!(watcher.routes(&view), "its own channel's turn");
        let cron = PendingView {
            session: Some("cron-backup-1".into()),
            ..view
        };
        assert!(
            !watcher.routes(&cron),
            "another entry point's, without [approvals] notify"
        );
    }
}
