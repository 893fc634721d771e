//! The loop of one turn (LOOP-1..7): the prompt, the history, the rounds of provider call
//! and tool calls, the cap's summary call, and where the turn's new messages go (the session,
//! appended per round, or nowhere for a detached turn). See the [`super`] docs for the rules.

use std::sync::Arc;

use serde_json::json;
use warren_core::{AgentAlias, ChatMessage, SessionKey};
use warren_providers::{ChatRequest, EventSink, StreamEvent};
use warren_store::sessions::{NewMessage, Page, SessionError, SessionHandle};

use super::{AgentRunner, HISTORY_LIMIT, TurnError, TurnEvent, TurnIo, TurnOutcome, taint};
use crate::history;
use crate::prompt::system_prompt;
use crate::sessions::ClaimedSession;
use crate::toolparse::{protocol_instructions, recover_tool_calls};

impl AgentRunner {
    /// Runs one user turn of the claimed session `session`: takes history from and appends
    /// the turn to `sessions` (assistant tool-call messages and their results are appended per
    /// round). Entry points reach this through [`crate::AgentHost::submit`].
    pub async fn chat(
        &self,
        sessions: &SessionHandle,
        session: &ClaimedSession,
        user_message: &str,
        io: &TurnIo,
    ) -> Result<TurnOutcome, TurnError> {
        // SESS-1: only a session claimed for this agent (the claim refused another owner's).
        session.check(&self.alias)?;
        // Issue 36 §7: a ledger that cannot take the turn's cost refuses it before the user's
        // message is stored.
        self.services.costs.usable()?;
        let key = session.key();
        // The prompt (identity files off the async workers, memory recall) is built while
        // the session's history loads.
        let (loaded, system) = tokio::join!(
            sessions.load(key.clone(), Page::Last(HISTORY_LIMIT)),
            self.system_prompt(user_message)
        );
        let history = history::repair(loaded?.messages.iter().map(history::decode).collect());
        let mut sink = Sink::Session {
            sessions,
            key,
            agent: &self.alias,
        };
        let (outcome, _) = self
            .run_turn(system, history, user_message, Some(key), io, &mut sink)
            .await?;
        Ok(outcome)
    }

    /// Runs one user turn over `history` without a session store (benchmarks, subturns).
    pub async fn run_detached(
        &self,
        history: Vec<ChatMessage>,
        user_message: &str,
        io: &TurnIo,
    ) -> Result<(TurnOutcome, Vec<ChatMessage>), TurnError> {
        let system = self.system_prompt(user_message).await;
        self.run_turn(system, history, user_message, None, io, &mut Sink::Detached)
            .await
    }

    /// The system prompt of a turn answering `user_message` (LOOP-1), with the `<tool_call>`
    /// protocol appended when the route has no native tools.
    async fn system_prompt(&self, user_message: &str) -> String {
        let mut system = system_prompt(&self.identity, self.kit.memory(), user_message).await;
        if let Some((root, bundles)) = &self.skills {
            let (root, bundles) = (root.clone(), bundles.clone());
            let listed =
                tokio::task::spawn_blocking(move || crate::skills::prompt_section(&root, &bundles))
                    .await
                    .unwrap_or_default();
            system.push_str(&listed);
        }
        if !self.route.capabilities().native_tools {
            system.push('\n');
            // MCP tools included (the list the turn will offer; started here on a first turn).
            let (definitions, _) = self.turn_tools().await;
            system.push_str(&protocol_instructions(&definitions));
        }
        system
    }

    async fn run_turn(
        &self,
        system: String,
        history: Vec<ChatMessage>,
        user_message: &str,
        session: Option<&SessionKey>,
        io: &TurnIo,
        sink: &mut Sink<'_>,
    ) -> Result<(TurnOutcome, Vec<ChatMessage>), TurnError> {
        let agent = &self.alias;
        let session_str = session.map(SessionKey::as_str);
        let trace = &self.services.trace;
        trace.emit_with(
            "turn_start",
            agent,
            session_str,
            || json!({"chars": user_message.len()}),
        );
        // Each turn starts untainted (issue 24 §4), but a subagent's turn, run inside its
        // parent's, shares the parent's marker: the child inherits what the parent took in,
        // and what the child takes in reaches the parent through its reply.
        let result = taint::Taint::carry(self.turn_inner(
            system,
            history,
            user_message,
            session_str,
            io,
            sink,
        ))
        .await;
        // The turn's cost records, written as each request returned, made durable at once
        // (STATE-14). A failure here does not undo the turn: it is reported.
        if let Err(e) = self.services.costs.sync() {
            tracing::warn!(agent = %agent, "{e}");
            trace.emit("error", agent, session_str, json!({"error": e.to_string()}));
        }
        match &result {
            Ok((o, _)) => trace.emit_with("turn_end", agent, session_str, || {
                json!({"provider_calls": o.provider_calls, "tool_calls": o.tool_calls,
                       "input_tokens": o.usage.input_tokens, "output_tokens": o.usage.output_tokens,
                       "hit_iteration_cap": o.hit_iteration_cap})
            }),
            Err(e) => trace.emit("error", agent, session_str, json!({"error": e.to_string()})),
        }
        result
    }

    /// The turn itself; returns the outcome and the turn's new messages (user message first).
    ///
    /// The conversation lives in ONE shared request for the whole turn: each round appends to
    /// it in place (the provider has dropped its handle by the time the call returns, so
    /// `Arc::make_mut` does not copy), instead of copying the history into a new request per
    /// round.
    async fn turn_inner(
        &self,
        system: String,
        history: Vec<ChatMessage>,
        user_message: &str,
        session: Option<&str>,
        io: &TurnIo,
        sink: &mut Sink<'_>,
    ) -> Result<(TurnOutcome, Vec<ChatMessage>), TurnError> {
        let (cancel, events) = (&io.cancel, &io.events);
        let agent = &self.alias;
        let mut outcome = TurnOutcome::default();
        let caps = self.route.capabilities();
        let (tools, known) = self.turn_tools().await;
        let no_tools = Arc::new(Vec::new());

        // LOOP-3/4: single-tool rounds only when every member of the route supports them.
        let single =
            self.behaviour.single_tool_rounds && caps.single_tool_control && caps.native_tools;
        if self.behaviour.single_tool_rounds && !single {
            let lacking = self.route.lacking_single_tool_control();
            let notice = format!(
                "single-tool rounds are configured but provider(s) {} of the route cannot limit a response to one tool call; this turn uses batch tool rounds (LOOP-4)",
                if lacking.is_empty() {
                    self.route.names().join(", ")
                } else {
                    lacking.join(", ")
                }
            );
            self.services
                .trace
                .emit("notice", agent, session, json!({"notice": notice}));
            events(TurnEvent::Notice(notice.clone()));
            outcome.notices.push(notice);
        }

        let mut messages =
            Vec::with_capacity(history.len() + 4 + 2 * self.max_iterations() as usize);
        messages.push(ChatMessage::system(system));
        messages.extend(history);
        let mut user = ChatMessage::user(user_message);
        // Issue 38 §5: images the submitter attached go with the user's message (not stored).
        user.images = crate::attachments::Attachments::take();
        sink.push(&user).await?;
        let first_new = messages.len();
        messages.push(user);
        let mut request = Arc::new(ChatRequest {
            model: self.model.clone(),
            messages,
            single_tool: single && caps.native_tools && !tools.is_empty(),
            tools: if caps.native_tools {
                Arc::clone(&tools)
            } else {
                Arc::clone(&no_tools)
            },
            max_tokens: io.max_output_tokens,
            cancel: cancel.provider_flag(),
        });

        let max = self.max_iterations();
        let text_sink: EventSink = {
            let events = Arc::clone(events);
            Arc::new(move |StreamEvent::TextDelta(t)| events(TurnEvent::TextDelta(t)))
        };
        for _iteration in 0..max {
            if cancel.is_cancelled() {
                return Err(TurnError::Cancelled);
            }
            let (response, provider) = self
                .call_provider(&request, session, io, &text_sink, &mut outcome)
                .await?;
            let mut calls = response.tool_calls;
            let mut text = response.text;
            if calls.is_empty() {
                let (recovered, rest) = recover_tool_calls(&text, &known);
                if !recovered.is_empty() {
                    calls = recovered;
                    text = rest;
                }
            }
            if calls.is_empty() {
                let answer = ChatMessage::assistant(text);
                sink.push(&answer).await?;
                outcome.reply.clone_from(&answer.content);
                let messages = &mut Arc::make_mut(&mut request).messages;
                messages.push(answer);
                return Ok((outcome, messages.split_off(first_new)));
            }
            if single && calls.len() > 1 {
                // LOOP-5: nothing runs, nothing enters history; the usage was billed (LOOP-6).
                self.mark_last_rejected(session, &provider);
                return Err(TurnError::SingleToolViolation {
                    agent: agent.to_string(),
                    provider,
                    count: calls.len(),
                });
            }
            let (calls, results) = self
                .run_calls(calls, &known, session, io, &mut outcome)
                .await;
            let round_call = ChatMessage::assistant_calls(text, calls);
            sink.push(&round_call).await?;
            let messages = &mut Arc::make_mut(&mut request).messages;
            messages.push(round_call);
            for r in results {
                sink.push(&r).await?;
                messages.push(r);
            }
            if cancel.is_cancelled() {
                return Err(TurnError::Cancelled);
            }
        }

        // The cap: one last call without tools, asking for a summary.
        outcome.hit_iteration_cap = true;
        {
            let last = Arc::make_mut(&mut request);
            last.messages.push(ChatMessage::system(format!(
                "You have reached the limit of {max} tool rounds (max_tool_iterations) for this turn. Do not call tools. Summarise what you did, what the results were and what is left to do."
            )));
            last.tools = no_tools;
            last.single_tool = false;
        }
        let (response, _) = self
            .call_provider(&request, session, io, &text_sink, &mut outcome)
            .await?;
        let (_, text) = recover_tool_calls(&response.text, &known);
        let answer = ChatMessage::assistant(text);
        sink.push(&answer).await?;
        outcome.reply.clone_from(&answer.content);
        let messages = &mut Arc::make_mut(&mut request).messages;
        messages.push(answer);
        let mut new = messages.split_off(first_new);
        // The cap notice is the loop's instruction to the model, not part of the conversation.
        new.retain(|m| m.role != warren_core::Role::System);
        Ok((outcome, new))
    }
}

/// Where a turn's new messages go as they are made: the session backend (appended per round,
/// so a crash loses at most the running round), or nowhere (a detached turn returns them).
enum Sink<'s> {
    Session {
        sessions: &'s SessionHandle,
        key: &'s SessionKey,
        agent: &'s AgentAlias,
    },
    Detached,
}

impl Sink<'_> {
    async fn push(&mut self, message: &ChatMessage) -> Result<(), SessionError> {
        match self {
            Sink::Session {
                sessions,
                key,
                agent,
            } => {
                let stored =
                    NewMessage::new(message.role, history::encode(message)).by((*agent).clone());
                sessions.append((*key).clone(), stored).await?;
                Ok(())
            }
            Sink::Detached => Ok(()),
        }
    }
}
