//! One unattended turn through the turn door, for the callers no operator sits behind (cron
//! jobs, SOP turn steps): the first call that needs approval is denied, the turn is cancelled
//! and the reason kept, so the run fails saying which call wanted approval — unless approvers
//! sit on a channel (`[approvals] notify`, issue 38 §4): then the call waits for their answer
//! like any other entry point's. Likewise one unattended tool call ([`tool_call`]: a cron
//! command job, an SOP tool step).

use std::sync::{Arc, Mutex};

use warren_core::{AgentAlias, SessionKey};
use warren_tools::ToolError;

use warren_runtime::agent::AgentKit;
use warren_runtime::approval::{ApprovalDecision, ApprovalRequest, Approver, BoxFuture};
use warren_runtime::cancel::CancelToken;
use warren_runtime::host::{AgentHost, TurnRequest};
use warren_runtime::mcp::ServerState;
use warren_runtime::turn::taint::MCP_PREFIX;
use warren_runtime::turn::{Channel, TurnError, TurnEvent, TurnOutcome};

/// What an unattended turn left behind.
pub(crate) struct Unattended {
    pub outcome: Result<TurnOutcome, TurnError>,
    /// Why the turn was stopped: the first call that asked for approval.
    pub asked: Option<String>,
    /// Every tool receipt the turn produced, streamed or in the outcome, once each.
    pub receipts: Vec<String>,
}

/// Denies every approval and remembers the first reason; cancels the turn at the first ask.
struct NoApprovals {
    asked: Mutex<Option<String>>,
    cancel: CancelToken,
    /// The end of the refusal text: who never runs a call unapproved, and what to do.
    refusal: &'static str,
}

impl Approver for NoApprovals {
    fn ask(&self, request: ApprovalRequest) -> BoxFuture<'_, ApprovalDecision> {
        let mut asked = self.asked.lock().unwrap_or_else(|p| p.into_inner());
        if asked.is_none() {
            *asked = Some(format!(
                "'{}' needs the operator's approval ({}); {}",
                request.tool, request.reason, self.refusal
            ));
        }
        self.cancel.cancel();
        Box::pin(async { ApprovalDecision::Denied })
    }
}

/// Runs `input` as one turn of `agent` in `session` (channel `cron`) with no operator; a
/// session name that is not a valid key fails the turn. `refusal` ends the text a denied
/// approval gives, e.g. "a scheduled run never runs it unapproved".
pub(crate) async fn turn(
    host: &Arc<AgentHost>,
    agent: AgentAlias,
    session: &str,
    input: String,
    cancel: &CancelToken,
    refusal: &'static str,
) -> Unattended {
    let session = match SessionKey::sanitize(session) {
        Ok(s) => s,
        Err(e) => {
            return Unattended {
                outcome: Err(e.into()),
                asked: None,
                receipts: Vec::new(),
            };
        }
    };
    let approver = Arc::new(NoApprovals {
        asked: Mutex::new(None),
        cancel: cancel.clone(),
        refusal,
    });
    // Issue 38 §4: with approvers on a channel (`[approvals] notify`), the turn waits for their
    // answer through the process's pending approvals like any other entry point's.
    let asks_phones =
        !host.snapshot().config().approvals.notify.is_empty() && host.approvals().watched();
    let decider: Arc<dyn Approver> = if asks_phones {
        Arc::clone(host.approvals()) as Arc<dyn Approver>
    } else {
        Arc::clone(&approver) as Arc<dyn Approver>
    };
    let streamed = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&streamed);
    let request = TurnRequest {
        max_output_tokens: None,
        agent,
        session: Some(session),
        channel: Channel::Cron,
        input,
        approver: decider,
        cancel: cancel.clone(),
        events: Arc::new(move |event| {
            if let TurnEvent::ToolResult {
                receipt: Some(r), ..
            } = event
            {
                seen.lock().unwrap_or_else(|p| p.into_inner()).push(r);
            }
        }),
    };
    let outcome = match host.submit(request).await {
        Ok(turn) => turn.finish().await,
        Err(e) => Err(e),
    };
    let asked = approver
        .asked
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let mut receipts: Vec<String> = streamed.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if let Ok(outcome) = &outcome {
        receipts.extend(outcome.receipts.iter().map(|(_, r)| r.clone()));
    }
    receipts.dedup();
    Unattended {
        outcome,
        asked,
        receipts,
    }
}

/// How an unattended tool call ended.
pub(crate) enum ToolCall {
    /// The tool ran and succeeded (a command exited 0): its output.
    Done(serde_json::Value),
    /// Refused, not run for want of approval, failed, or a command that exited non-zero or
    /// was killed: why, with the tool's output when it ran.
    Failed {
        error: String,
        output: Option<serde_json::Value>,
    },
    Cancelled,
}

/// Runs tool `name` of `agent` with `args` and no operator (a cron command job, an SOP tool
/// step): the agent's own tool, so its policy, sandbox, timeout and output caps; the policy
/// decides as for a model's call, and a call that needs approval fails with `refusal` and never
/// runs. A command (the shell tool) that exits non-zero or is killed fails with its status.
pub(crate) async fn tool_call(
    host: &Arc<AgentHost>,
    agent: &AgentAlias,
    name: &str,
    args: serde_json::Value,
    cancel: &CancelToken,
    refusal: &'static str,
) -> ToolCall {
    let failed = |error: String| ToolCall::Failed {
        error,
        output: None,
    };
    let runner = match host.runner(agent).await {
        Ok(r) => r,
        Err(e) => return failed(e.to_string()),
    };
    // A built-in tool, or one of the agent's MCP tools (its servers started here if no turn
    // has started them), as a model's call would find it.
    let tool = match runner.find_tool(name).await {
        Ok(t) => t,
        Err(_) if name.starts_with(MCP_PREFIX) => {
            return failed(missing_mcp_tool(runner.kit(), agent, name));
        }
        Err(e) => return failed(e.to_string()),
    };
    let needs_approval =
        |reason: &str| format!("'{name}' needs the operator's approval ({reason}); {refusal}");
    // The gate of a model's call (autonomy, `always_ask`, the taint rule, PERM-2's action
    // window); what needs approval is refused here, never run.
    let call = warren_core::ToolCall {
        id: String::new(),
        name: name.to_string(),
        arguments: args,
    };
    let unattended = |reason: String| async move { Err(needs_approval(&reason)) };
    if let Err(stopped) = runner.gate(&call, tool.risk(), None, unattended).await {
        return failed(
            stopped.answer(|reason| format!("'{name}' refused by the runtime: {reason}")),
        );
    }
    let output = tokio::select! {
        r = tool.execute(call.arguments) => r,
        () = cancel.cancelled() => return ToolCall::Cancelled,
    };
    warren_runtime::metrics::tool_call(agent.as_str(), name, output.is_ok());
    if let Err(e) = &output {
        runner.count_denial(e);
    }
    // Scrubbed of every configured secret like a turn's result (issue 35 §4): an SOP step's
    // output may feed a later agent step, a cron job's output its run record.
    let scrubber = runner.scrubber();
    let mut content = match output {
        Ok(out) => out.content,
        Err(ToolError::ApprovalRequired(reason)) => return failed(needs_approval(&reason)),
        Err(e) => return failed(scrubber.scrub_owned(&format!("tool '{name}': {e}"))),
    };
    scrubber.scrub_value(&mut content);
    match content.get("exit_code").map(serde_json::Value::as_i64) {
        None | Some(Some(0)) => ToolCall::Done(content),
        Some(code) => ToolCall::Failed {
            error: match code {
                Some(c) => format!("the command exited with status {c}"),
                None => "the command was killed (timeout or signal)".into(),
            },
            output: Some(content),
        },
    }
}

/// Why the MCP tool `name` (`mcp__<server>__<tool>`) of `agent` was not found once its
/// servers were started: no such server, the server down, or the server not offering it.
/// Nothing checks these names before a run (the server's tool list is only known once it runs).
fn missing_mcp_tool(kit: &AgentKit, agent: &AgentAlias, name: &str) -> String {
    let rest = name.strip_prefix(MCP_PREFIX).unwrap_or(name);
    let (server, tool) = rest.split_once("__").unwrap_or((rest, ""));
    let servers = kit.mcp().map(|m| m.status()).unwrap_or_default();
    let Some(status) = servers.iter().find(|s| s.name == server) else {
        let names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
        let names = if names.is_empty() {
            "it has none".to_string()
        } else {
            format!("it has {}", names.join(", "))
        };
        return format!(
            "tool '{name}': agent '{agent}' has no MCP server '{server}' ({names}; \
             [agents.{agent}.mcp.servers.{server}] would add it)"
        );
    };
    if status.tools.iter().any(|t| t == name) {
        return format!(
            "tool '{name}': MCP server '{server}' offers '{tool}' but the risk profile of agent \
             '{agent}' does not allow it"
        );
    }
    let why = status
        .last_error
        .as_deref()
        .map(|e| format!(": {e}"))
        .unwrap_or_default();
    match status.state {
        ServerState::Running => format!(
            "tool '{name}': MCP server '{server}' of agent '{agent}' offers no tool '{tool}' \
             (its tools: {})",
            status.tools.join(", ")
        ),
        state => format!(
            "tool '{name}': MCP server '{server}' of agent '{agent}' is not running ({}{why}), \
             so its tool '{tool}' cannot run",
            match state {
                ServerState::NotStarted => "not started",
                ServerState::Starting => "still starting",
                ServerState::Down => "down",
                ServerState::Stopped => "stopped",
                ServerState::Unsupported => "a url server with no egress to reach it",
                ServerState::Running => "running",
            }
        ),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;
    use warren_config::{ConfigStore, InstallRoot};
    use warren_testkit::fake_llm::{FakeCall, FakeOpenAi, FakeReply};

    use super::*;
    use warren_runtime::approval::DenyAll;
    use warren_runtime::host::event_channel;

    /// A host of an install root in a temp dir whose config.toml is `config` (the unit tests
    /// of the policy gate: an unattended call's here, a turn's in `turn::calls`).
    pub(crate) fn host_of(config: &str) -> (tempfile::TempDir, InstallRoot, Arc<AgentHost>) {
        let dir = tempfile::tempdir().unwrap();
        let root = InstallRoot::at(dir.path().join("warren"));
        root.ensure_layout().unwrap();
        std::fs::write(root.config_file(), config).unwrap();
        let snapshot = ConfigStore::load(root.clone()).unwrap().snapshot();
        let host = Arc::new(AgentHost::for_process(&root, snapshot).unwrap());
        (dir, root, host)
    }

    /// The `[providers.fake]` table of `fake`: no retries, so each pushed reply answers one
    /// request.
    pub(crate) fn fake_provider(fake: &FakeOpenAi) -> String {
        format!(
            "{}\nmax_retries = 0\n",
            fake.provider_toml("fake", "sk-test")
        )
    }

    /// PERM-2 (issue 14 §4): the tool calls cron command jobs and SOP tool steps run without a
    /// turn count in the same `max_actions_per_hour` window as the agent's turns: after a turn
    /// through the door used one of 2 actions, one unattended call runs and the next is refused
    /// without running, naming the limit and when it frees.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unattended_tool_calls_count_in_the_agents_actions_per_hour_perm2() {
        let fake = FakeOpenAi::start().unwrap();
        let (_dir, root, host) = host_of(&format!(
            "[agents.ada]\nprovider = \"fake\"\nmodel = \"gpt-test\"\nrisk_profile = \"open\"\n\
             [risk_profiles.open]\nautonomy = \"full\"\nmax_actions_per_hour = 2\n{}",
            fake_provider(&fake)
        ));
        let ada = AgentAlias::new("ada").unwrap();
        let write = |path: &str| json!({"path": path, "content": "x"});

        fake.push(FakeReply::calls(
            "",
            vec![FakeCall::new("c1", "file_write", write("turn.md"))],
        ));
        fake.push(FakeReply::text("wrote it"));
        let (events, _rx) = event_channel();
        let turn = host
            .submit(TurnRequest {
                max_output_tokens: None,
                agent: ada.clone(),
                session: None,
                channel: Channel::Cli,
                input: "write".into(),
                approver: Arc::new(DenyAll),
                cancel: CancelToken::new(),
                events,
            })
            .await
            .unwrap();
        assert_eq!(turn.finish().await.unwrap().tool_calls, 1);

        let call = |path: &'static str| {
            let host = Arc::clone(&host);
            let ada = ada.clone();
            async move {
                tool_call(
                    &host,
                    &ada,
                    "file_write",
                    write(path),
                    &CancelToken::new(),
                    "a scheduled run never runs it unapproved",
                )
                .await
            }
        };
        assert!(matches!(call("second.md").await, ToolCall::Done(_)));
        let ToolCall::Failed { error, output } = call("third.md").await else {
            panic!("the third action of the hour ran");
        };
        assert!(
            error.contains("max_actions_per_hour = 2") && error.contains("possible in"),
            "{error}"
        );
        assert!(output.is_none());
        let workspace = root.agent_workspace(&ada);
        assert!(workspace.join("turn.md").exists() && workspace.join("second.md").exists());
        assert!(!workspace.join("third.md").exists(), "the refused call ran");
    }

    /// An unattended call's output is scrubbed like a turn's (issue 35 §4): a secret a
    /// rewritten program left in a file comes back from `file_read` redacted, while the tool's
    /// own output (the guard off) holds it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unattended_tool_result_is_scrubbed_of_secrets_issue35() {
        const SECRET: &str = "ghp_UnattendedSecretValue_4242";
        let (_dir, root, host) = host_of(&format!(
            "[agents.ada]\nprovider = \"idle\"\nmodel = \"m\"\nrisk_profile = \"open\"\n\
             [providers.idle]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
             [risk_profiles.open]\nautonomy = \"full\"\n\
             [secrets.gh]\nvalue = \"{SECRET}\"\nhosts = [\"api.github.com\"]\n"
        ));
        let ada = AgentAlias::new("ada").unwrap();
        let workspace = root.agent_workspace(&ada);
        std::fs::create_dir_all(&workspace).unwrap();
        std::fs::write(workspace.join("leak.txt"), format!("token={SECRET}\n")).unwrap();
        let args = json!({"path": "leak.txt"});
        let runner = host.runner(&ada).await.unwrap();
        let raw = runner.kit().run_tool("file_read", args.clone(), true).await;
        let raw = raw.unwrap().unwrap().content.to_string();
        assert!(
            raw.contains(SECRET),
            "guard off: the tool returns it: {raw}"
        );
        let out = tool_call(&host, &ada, "file_read", args, &CancelToken::new(), "never").await;
        let ToolCall::Done(content) = out else {
            panic!("the read failed");
        };
        let text = content.to_string();
        assert!(
            text.contains("token=[redacted]") && !text.contains(SECRET),
            "{text}"
        );
    }

    /// The unattended gate is the turn's: an `http_request` that may change something on the
    /// other side (a POST) counts as a write, so under `supervised` it needs approval, and an
    /// SOP tool step or cron command job fails without sending it. The unattended copy judged
    /// the tool's own class (a read) and sent the POST unapproved.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unattended_http_post_needs_approval_like_a_turns_issue24() {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let mut line = String::new();
                let _ = BufReader::new(&stream).read_line(&mut line);
                seen.lock().unwrap().push(line);
                let _ = (&stream).write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                );
            }
        });
        let (_dir, _root, host) = host_of(&format!(
            // The provider is never called: an unattended tool call asks no model.
            "[agents.ada]\nprovider = \"idle\"\nmodel = \"m\"\nrisk_profile = \"careful\"\n\
             [providers.idle]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
             api_key = \"sk-test\"\n\
             [agents.ada.network]\nallow = [\"127.0.0.1:{port}\"]\n\
             [risk_profiles.careful]\nautonomy = \"supervised\"\n"
        ));
        let ada = AgentAlias::new("ada").unwrap();
        let call = |method: &str| {
            let host = Arc::clone(&host);
            let ada = ada.clone();
            let args = json!({"url": format!("http://127.0.0.1:{port}/hook"), "method": method});
            async move {
                tool_call(
                    &host,
                    &ada,
                    "http_request",
                    args,
                    &CancelToken::new(),
                    "an SOP step never runs it unapproved",
                )
                .await
            }
        };
        // A plain GET is a read: it runs (the server is reachable, so a refused POST is the
        // gate's doing).
        match call("GET").await {
            ToolCall::Done(_) => {}
            ToolCall::Failed { error, .. } => panic!("the GET failed: {error}"),
            ToolCall::Cancelled => panic!("the GET was cancelled"),
        }
        let ToolCall::Failed { error, output } = call("POST").await else {
            panic!("the POST ran unapproved");
        };
        assert!(
            error.starts_with("'http_request' needs the operator's approval (")
                && error.ends_with("; an SOP step never runs it unapproved"),
            "{error}"
        );
        assert!(output.is_none());
        let requests = requests.lock().unwrap().clone();
        assert_eq!(requests, vec!["GET /hook HTTP/1.1\r\n".to_string()]);
    }
}
