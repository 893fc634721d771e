//! One metered provider request of a turn (STATE-14, issue 16 §3/§4): its worst case reserved
//! against the cost limits before the call (the provider is not called when it could cross
//! one), the route's answer traced and billed after, and an empty answer never taken as a
//! reply.

use std::sync::Arc;

use serde_json::json;
use warren_providers::{ChatRequest, EventSink, ProviderError};

use super::{AgentRunner, TurnError, TurnEvent, TurnIo, TurnOutcome};

impl AgentRunner {
    /// One metered provider request: its worst case reserved against the limits before (the
    /// provider is not called when it could cross one), its usage recorded after.
    pub(super) async fn call_provider(
        &self,
        request: &Arc<ChatRequest>,
        session: Option<&str>,
        io: &TurnIo,
        text_sink: &EventSink,
        outcome: &mut TurnOutcome,
    ) -> Result<(warren_providers::ChatResponse, String), TurnError> {
        let (cancel, events) = (&io.cancel, &io.events);
        let agent = &self.alias;
        let policy = self.kit.policy();
        let caps = crate::cost::AgentCaps {
            max_cost_per_day_usd: Some(policy.max_cost_per_day_usd()),
            max_tokens_per_day: policy.max_tokens_per_day(),
        };
        let reservation = self.services.costs.reserve(
            agent,
            caps,
            &self.model,
            crate::cost::estimate(request),
        )?;
        let started = crate::telemetry::span_start();
        let call = self.route.chat(Arc::clone(request), Arc::clone(text_sink));
        let routed = tokio::select! {
            biased;
            r = call => r,
            () = cancel.cancelled() => return Err(TurnError::Cancelled),
        };
        let routed = match routed {
            Ok(r) => r,
            Err(ProviderError::Cancelled) => return Err(TurnError::Cancelled),
            Err(e) => {
                let primary = self.route.names().into_iter().next().unwrap_or_default();
                crate::telemetry::provider_failed(&primary, &self.model, started, "provider");
                self.empty_answer_notice(&e, session, io);
                return Err(e.into());
            }
        };
        let trace = &self.services.trace;
        for failed in &routed.failed_attempts {
            crate::telemetry::provider_failed(&failed.provider, &self.model, started, "provider");
            trace.emit(
                "provider_call",
                agent,
                session,
                json!({"provider": failed.provider, "model": self.model, "ok": false, "error": failed.error.to_string()}),
            );
        }
        let usage = routed.response.usage;
        outcome.usage.add(usage);
        outcome.provider_calls += 1;
        trace.emit_with("provider_call", agent, session, || {
            json!({"provider": routed.provider, "model": self.model, "ok": true,
                   "single_tool": request.single_tool, "tools": request.tools.len(),
                   "tool_calls": routed.response.tool_calls.len(),
                   "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens})
        });
        // Recorded (to the ledger, or in memory with `[cost] enabled = false`) before the
        // reservation is released: the actual usage replaces the worst case.
        let record = self.services.costs.record(
            &self.alias,
            session,
            &routed.provider,
            &self.model,
            usage,
            false,
        )?;
        drop(reservation);
        let (provider, response) = (&routed.provider, &routed.response);
        crate::telemetry::provider_call(
            agent,
            provider,
            &self.model,
            started,
            usage,
            record.cost_usd,
            request,
            response,
        );
        if let Some(notice) =
            self.services
                .costs
                .warning(agent, caps.max_cost_per_day_usd, record.cost_usd)
        {
            trace.emit("cost_warning", agent, session, json!({"notice": notice}));
            events(TurnEvent::Notice(notice.clone()));
            outcome.notices.push(notice);
        }
        // Issue 16 §3: no text and no tool call is never a silent success (the OpenAI provider
        // already asked again unstreamed; this catches every other kind).
        if routed.response.text.trim().is_empty() && routed.response.tool_calls.is_empty() {
            let e = ProviderError::EmptyAnswer {
                provider: routed.provider,
                detail: String::new(),
            };
            self.empty_answer_notice(&e, session, io);
            return Err(e.into());
        }
        Ok((routed.response, routed.provider))
    }

    /// The notice ending a turn whose provider gave an empty answer (issue 16 §3).
    fn empty_answer_notice(&self, error: &ProviderError, session: Option<&str>, io: &TurnIo) {
        if let Some(provider) = error.empty_answer_from() {
            let notice = format!(
                "provider '{provider}' gave an empty answer (no text, no tool call): the turn ends without a reply"
            );
            let agent = &self.alias;
            self.services
                .trace
                .emit("notice", agent, session, json!({"notice": notice}));
            (io.events)(TurnEvent::Notice(notice));
        }
    }

    pub(super) fn mark_last_rejected(&self, session: Option<&str>, provider: &str) {
        self.services.trace.emit(
            "error",
            &self.alias,
            session,
            json!({"provider": provider, "error": "single-tool violation: response rejected, usage billed"}),
        );
    }
}
