//! `warren acp` end to end (issue 19): the real binary as a child process, driven by the
//! official `agent-client-protocol` crate's client side (a real ACP peer), over the local fake
//! OpenAI server. Prompts run as turns with permissions asked through the client, cancel stops
//! a streaming turn, `session/load` in a fresh process replays the history, a session belongs
//! to one agent, and agent delete is refused while a server is live (SESS-3, SESS-4, LIFE-4).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    CancelNotification, ContentBlock, InitializeRequest, InitializeResponse, LoadSessionRequest,
    NewSessionRequest, NewSessionResponse, PromptRequest, RequestPermissionOutcome,
    RequestPermissionRequest, RequestPermissionResponse, SelectedPermissionOutcome, SessionId,
    SessionNotification, SessionUpdate, StopReason, ToolCallStatus,
};
use agent_client_protocol::{AcpAgent, AcpAgentConfig, Agent, Client};
use serde_json::json;
use warren_config::InstallRoot;
use warren_core::AgentAlias;
use warren_store::acp::{AcpLive, AcpSessionStore};
use warren_testkit::fake_llm::{FakeCall, FakeOpenAi, FakeReply};
use warren_testkit::{TempRoot, text};

type R = Result<(), Box<dyn std::error::Error>>;
type Acp<T> = Result<T, agent_client_protocol::Error>;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_warren"))
}

fn config(fake: &FakeOpenAi) -> String {
    format!(
        r#"
[runtime]
default_agent = "main"

[agents.main]
provider = "fake"
model = "gpt-test"
risk_profile = "careful"

[agents.other]
provider = "fake"
model = "gpt-test"
risk_profile = "careful"

[risk_profiles.careful]
autonomy = "supervised"
approval_timeout_secs = 5

[providers.fake]
kind = "openai"
base_url = "{}"
api_key = "sk-acp-secret-value"
retry_backoff_ms = 1
"#,
        fake.base_url()
    )
}

fn alias(a: &str) -> AgentAlias {
    AgentAlias::new(a).unwrap_or_else(|e| panic!("{e}"))
}

/// What the test client saw: every `session/update`, and the permission requests it answered.
#[derive(Default)]
struct Seen {
    updates: Vec<(SessionId, SessionUpdate)>,
    asked: Vec<RequestPermissionRequest>,
    /// Answers to give, in order: an option id prefix ("allow" / "reject"), or "hold" to
    /// never answer (the responder is kept, unanswered).
    answers: Vec<&'static str>,
    held: Vec<agent_client_protocol::v1::Responder<RequestPermissionResponse>>,
}

impl Seen {
    fn updates_of(&self, id: &SessionId) -> Vec<SessionUpdate> {
        self.updates
            .iter()
            .filter(|(s, _)| s == id)
            .map(|(_, u)| u.clone())
            .collect()
    }
}

fn text_of(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(t) => t.text.clone(),
        _ => String::new(),
    }
}

fn agent_text(updates: &[SessionUpdate]) -> String {
    updates
        .iter()
        .filter_map(|u| match u {
            SessionUpdate::AgentMessageChunk(c) => Some(text_of(&c.content)),
            _ => None,
        })
        .collect()
}

/// Runs `warren --config-dir ROOT acp ARGS...` and `main` against it as an ACP client.
fn with_acp<T>(
    root: &Path,
    args: &[&str],
    seen: Arc<Mutex<Seen>>,
    main: impl AsyncFnOnce(ConnectionTo<Agent>) -> Acp<T>,
) -> Acp<T> {
    let mut all = vec!["--config-dir".to_string(), root.display().to_string()];
    all.push("acp".into());
    all.extend(args.iter().map(|a| a.to_string()));
    let agent = AcpAgent::new(AcpAgentConfig::new(bin()).args(all));
    let (on_update, on_ask) = (Arc::clone(&seen), seen);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(agent_client_protocol::Error::into_internal_error)?;
    runtime.block_on(
        Client
            .v1()
            .on_receive_notification(
                async move |n: SessionNotification, _cx| {
                    let mut s = on_update.lock().unwrap_or_else(|p| p.into_inner());
                    s.updates.push((n.session_id, n.update));
                    Ok(())
                },
                agent_client_protocol::on_receive_notification!(),
            )
            .on_receive_request(
                async move |request: RequestPermissionRequest, responder, _cx| {
                    let answer = {
                        let mut s = on_ask.lock().unwrap_or_else(|p| p.into_inner());
                        s.asked.push(request.clone());
                        if s.answers.is_empty() {
                            "reject"
                        } else {
                            s.answers.remove(0)
                        }
                    };
                    if answer == "hold" {
                        on_ask
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .held
                            .push(responder);
                        return Ok(());
                    }
                    let option = request
                        .options
                        .iter()
                        .find(|o| o.option_id.0.starts_with(answer))
                        .map(|o| o.option_id.clone());
                    let outcome = match option {
                        Some(id) => {
                            RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(id))
                        }
                        None => RequestPermissionOutcome::Cancelled,
                    };
                    responder.respond(RequestPermissionResponse::new(outcome))
                },
                agent_client_protocol::on_receive_request!(),
            )
            .connect_with(agent, main),
    )
}

async fn initialize(cx: &ConnectionTo<Agent>) -> Acp<InitializeResponse> {
    cx.send_request(InitializeRequest::new(ProtocolVersion::V1))
        .block_task()
        .await
}

async fn new_session(cx: &ConnectionTo<Agent>, cwd: &Path) -> Acp<NewSessionResponse> {
    cx.send_request(NewSessionRequest::new(cwd))
        .block_task()
        .await
}

async fn prompt(cx: &ConnectionTo<Agent>, id: &SessionId, text: &str) -> Acp<StopReason> {
    Ok(cx
        .send_request(PromptRequest::new(id.clone(), vec![text.into()]))
        .block_task()
        .await?
        .stop_reason)
}

async fn wait_for(seen: &Arc<Mutex<Seen>>, what: impl Fn(&Seen) -> bool) -> Acp<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if what(&seen.lock().unwrap_or_else(|p| p.into_inner())) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(agent_client_protocol::Error::internal_error().data("timed out waiting for updates"))
}

fn workspace(root: &Path, a: &str) -> PathBuf {
    InstallRoot::at(root).agent_workspace(&alias(a))
}

#[test]
fn acp_prompt_asks_permission_cancels_and_a_fresh_process_loads_the_history() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    root.write_config(&config(&fake))?;
    // Prompt 1: a write the client allows. Prompt 2: a write the client rejects.
    fake.push(FakeReply::calls(
        "I'll write it.",
        vec![FakeCall::new(
            "c1",
            "file_write",
            json!({"path": "notes.md", "content": "allowed\n"}),
        )],
    ));
    fake.push(FakeReply::text("Wrote notes.md."));
    fake.push(FakeReply::calls(
        "",
        vec![FakeCall::new(
            "c2",
            "file_write",
            json!({"path": "rejected.md", "content": "no\n"}),
        )],
    ));
    fake.push(FakeReply::text("The write was rejected."));
    // Prompt 3: a slow stream the client cancels.
    fake.push(FakeReply::Chat {
        text: (0..200).map(|i| format!("word{i} ")).collect(),
        calls: Vec::new(),
        usage: (10, 200),
        chunk_delay: Duration::from_millis(100),
    });

    let seen = Arc::new(Mutex::new(Seen {
        answers: vec!["allow", "reject"],
        ..Seen::default()
    }));
    let s = Arc::clone(&seen);
    let (id, cancel_ms) = with_acp(root.path(), &[], Arc::clone(&seen), async |cx| {
        let init = initialize(&cx).await?;
        assert!(init.agent_capabilities.load_session, "{init:?}");
        // A cwd outside the workspace and grants is replaced by the workspace, and said so.
        let new = new_session(&cx, Path::new("/")).await?;
        let id = new.session_id.clone();
        let meta = serde_json::to_value(&new.meta)?;
        assert_eq!(
            meta["warren"]["cwd"].as_str().map(PathBuf::from),
            Some(workspace(root.path(), "main")),
            "{meta}"
        );
        wait_for(&s, |s| {
            agent_text(&s.updates_of(&id)).contains("outside agent 'main'")
        })
        .await?;

        // Allowed: the file is written, the call goes pending -> completed.
        assert_eq!(prompt(&cx, &id, "write notes").await?, StopReason::EndTurn);
        // Rejected: nothing written, the call fails.
        assert_eq!(
            prompt(&cx, &id, "write another").await?,
            StopReason::EndTurn
        );

        // Cancel mid-stream.
        let before = agent_text(&s.lock().unwrap_or_else(|p| p.into_inner()).updates_of(&id));
        let running = cx.send_request(PromptRequest::new(
            id.clone(),
            vec!["tell a long story".into()],
        ));
        wait_for(&s, |s| {
            agent_text(&s.updates_of(&id))[before.len()..].contains("word1 ")
        })
        .await?;
        let asked = Instant::now();
        cx.send_notification(CancelNotification::new(id.clone()))?;
        let stop = running.block_task().await?.stop_reason;
        let cancel_ms = asked.elapsed().as_millis();
        assert_eq!(stop, StopReason::Cancelled);
        let streamed = agent_text(&s.lock().unwrap_or_else(|p| p.into_inner()).updates_of(&id));
        assert!(
            !streamed.contains("word199"),
            "the stream went on after cancel"
        );
        Ok((id, cancel_ms))
    })?;
    eprintln!("cancel → Cancelled stop reason in {cancel_ms} ms");
    assert!(cancel_ms < 3000, "cancel took {cancel_ms} ms");

    let ws = workspace(root.path(), "main");
    assert_eq!(std::fs::read_to_string(ws.join("notes.md"))?, "allowed\n");
    assert!(!ws.join("rejected.md").exists(), "a rejected write ran");
    {
        let seen = seen.lock().unwrap_or_else(|p| p.into_inner());
        assert_eq!(seen.asked.len(), 2, "one permission request per write");
        assert_eq!(&*seen.asked[0].tool_call.tool_call_id.0, "c1");
        assert_eq!(&*seen.asked[1].tool_call.tool_call_id.0, "c2");
        let updates = seen.updates_of(&id);
        let status = |call: &str| {
            updates.iter().rev().find_map(|u| match u {
                SessionUpdate::ToolCallUpdate(t) if &*t.tool_call_id.0 == call => t.fields.status,
                _ => None,
            })
        };
        assert_eq!(status("c1"), Some(ToolCallStatus::Completed));
        assert_eq!(status("c2"), Some(ToolCallStatus::Failed));
        assert!(
            updates
                .iter()
                .any(|u| matches!(u, SessionUpdate::ToolCall(t)
                if &*t.tool_call_id.0 == "c1" && t.status == ToolCallStatus::Pending)),
            "the call is announced before it runs"
        );
        assert!(agent_text(&updates).contains("Wrote notes.md."));
    }

    // A fresh process loads the session and replays its history, in order.
    let replay = Arc::new(Mutex::new(Seen::default()));
    let r = Arc::clone(&replay);
    let load_id = id.clone();
    with_acp(root.path(), &[], Arc::clone(&replay), async |cx| {
        initialize(&cx).await?;
        cx.send_request(LoadSessionRequest::new(load_id.clone(), Path::new("/")))
            .block_task()
            .await?;
        // The turn after a load continues the same history.
        assert_eq!(
            prompt(&cx, &load_id, "still there?").await?,
            StopReason::EndTurn
        );
        Ok(())
    })?;
    let r = r.lock().unwrap_or_else(|p| p.into_inner());
    let updates = r.updates_of(&id);
    let users: Vec<String> = updates
        .iter()
        .filter_map(|u| match u {
            SessionUpdate::UserMessageChunk(c) => Some(text_of(&c.content)),
            _ => None,
        })
        .collect();
    assert_eq!(
        users,
        vec!["write notes", "write another", "tell a long story"],
        "{updates:?}"
    );
    let replayed_calls: Vec<(String, ToolCallStatus)> = updates
        .iter()
        .filter_map(|u| match u {
            SessionUpdate::ToolCall(t) => Some((t.tool_call_id.0.to_string(), t.status)),
            _ => None,
        })
        .collect();
    assert_eq!(
        replayed_calls,
        vec![
            ("c1".to_string(), ToolCallStatus::Completed),
            ("c2".to_string(), ToolCallStatus::Failed)
        ]
    );
    let said = agent_text(&updates);
    assert!(
        said.contains("Wrote notes.md.") && said.contains("word1 "),
        "{said}"
    );
    // The history the provider saw after the load includes the earlier turns.
    let last = fake.requests().pop().ok_or("no provider request")?;
    assert!(
        last.body.to_string().contains("write notes"),
        "history was not loaded"
    );

    // Another agent cannot load main's session.
    let other = with_acp(root.path(), &["-a", "other"], Arc::default(), async |cx| {
        initialize(&cx).await?;
        cx.send_request(LoadSessionRequest::new(id.clone(), Path::new("/")))
            .block_task()
            .await
            .map(|_| ())
    });
    let e = other.err().ok_or("agent 'other' loaded main's session")?;
    assert!(e.to_string().contains("belongs to agent 'main'"), "{e}");
    Ok(())
}

#[test]
fn acp_a_permission_nobody_answers_is_denied_after_the_profile_timeout() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    root.write_config(
        &config(&fake).replace("approval_timeout_secs = 5", "approval_timeout_secs = 1"),
    )?;
    fake.push(FakeReply::calls(
        "",
        vec![FakeCall::new(
            "c9",
            "file_write",
            json!({"path": "late.md", "content": "late\n"}),
        )],
    ));
    fake.push(FakeReply::text("Nobody answered."));
    let seen = Arc::new(Mutex::new(Seen {
        answers: vec!["hold"],
        ..Seen::default()
    }));
    let (id, waited) = with_acp(root.path(), &[], Arc::clone(&seen), async |cx| {
        initialize(&cx).await?;
        let id = new_session(&cx, Path::new("/")).await?.session_id;
        let started = Instant::now();
        assert_eq!(prompt(&cx, &id, "write late").await?, StopReason::EndTurn);
        Ok((id, started.elapsed()))
    })?;
    eprintln!(
        "unanswered permission denied after {} ms",
        waited.as_millis()
    );
    assert!(
        waited >= Duration::from_secs(1),
        "denied before the timeout"
    );
    assert!(!workspace(root.path(), "main").join("late.md").exists());
    let seen = seen.lock().unwrap_or_else(|p| p.into_inner());
    assert_eq!(seen.asked.len(), 1);
    let failed = seen.updates_of(&id).into_iter().any(|u| {
        matches!(&u, SessionUpdate::ToolCallUpdate(t)
            if &*t.tool_call_id.0 == "c9"
                && t.fields.status == Some(ToolCallStatus::Failed)
                && format!("{:?}", t.fields.content).contains("no approval arrived in time"))
    });
    assert!(failed, "{:?}", seen.updates_of(&id));
    Ok(())
}

/// `sleep` processes whose command line is exactly `sleep ARG`.
fn sleeping(arg: &str) -> usize {
    let want = format!("sleep\0{arg}\0");
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == want.as_bytes())
                })
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn acp_cancel_stops_a_running_tool_process() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    root.write_config(
        &(config(&fake)
            + "\n[agents.napper]\nprovider = \"fake\"\nmodel = \"gpt-test\"\nrisk_profile = \"napper\"\n\n[risk_profiles.napper]\nautonomy = \"full\"\nallowed_commands = [\"sleep\"]\n"),
    )?;
    fake.push(FakeReply::calls(
        "",
        vec![FakeCall::new(
            "c5",
            "shell",
            json!({"command": "sleep 31.25"}),
        )],
    ));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s = Arc::clone(&seen);
    let (stop, took) = with_acp(
        root.path(),
        &["-a", "napper"],
        Arc::clone(&seen),
        async |cx| {
            initialize(&cx).await?;
            let id = new_session(&cx, Path::new("/")).await?.session_id;
            let running = cx.send_request(PromptRequest::new(id.clone(), vec!["nap".into()]));
            wait_for(&s, |s| {
                s.updates_of(&id)
                    .iter()
                    .any(|u| matches!(u, SessionUpdate::ToolCall(t) if &*t.tool_call_id.0 == "c5"))
            })
            .await?;
            let deadline = Instant::now() + Duration::from_secs(20);
            while sleeping("31.25") == 0 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let asked = Instant::now();
            cx.send_notification(CancelNotification::new(id.clone()))?;
            let stop = running.block_task().await?.stop_reason;
            Ok((stop, asked.elapsed()))
        },
    )?;
    eprintln!(
        "cancel with a running tool → stop reason in {} ms",
        took.as_millis()
    );
    assert_eq!(stop, StopReason::Cancelled);
    assert!(took < Duration::from_secs(5), "cancel waited {took:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while sleeping("31.25") > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        sleeping("31.25"),
        0,
        "the cancelled tool process is still running"
    );
    Ok(())
}

#[test]
fn acp_cwd_is_kept_inside_the_workspace_or_a_grant_and_replaced_elsewhere() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    root.write_config(&(config(&fake) + "\n[agents.main.workspace.access]\nother = \"Read\"\n"))?;
    let ws = workspace(root.path(), "main");
    let granted = workspace(root.path(), "other");
    std::fs::create_dir_all(ws.join("src"))?;
    std::fs::create_dir_all(&granted)?;
    // A symlink inside the workspace that leads out of it does not let the cwd out.
    std::os::unix::fs::symlink("/etc", ws.join("escape"))?;
    let asked = [
        ws.join("src"),
        granted.clone(),
        ws.join("escape"),
        PathBuf::from("src"),
        root.path().join("data"),
    ];
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s = Arc::clone(&seen);
    let metas = with_acp(root.path(), &[], Arc::clone(&seen), async |cx| {
        initialize(&cx).await?;
        let mut metas = Vec::new();
        for cwd in &asked {
            let new = new_session(&cx, cwd).await?;
            metas.push(
                serde_json::to_value(&new.meta)
                    .map_err(agent_client_protocol::Error::into_internal_error)?,
            );
        }
        // The three replaced ones are also said in their threads.
        wait_for(&s, |s| {
            s.updates
                .iter()
                .filter(|(_, u)| agent_text(std::slice::from_ref(u)).contains("outside agent"))
                .count()
                == 3
        })
        .await?;
        Ok(metas)
    })?;
    let kept = |i: usize| -> Result<(), Box<dyn std::error::Error>> {
        let m = &metas[i];
        assert_eq!(
            m["warren"]["cwd"].as_str().map(PathBuf::from),
            Some(std::fs::canonicalize(&asked[i])?),
            "{m}"
        );
        assert!(m["warren"]["cwd_notice"].is_null(), "{m}");
        Ok(())
    };
    kept(0)?;
    kept(1)?;
    for (i, m) in metas.iter().enumerate().skip(2) {
        assert_eq!(
            m["warren"]["cwd"].as_str().map(PathBuf::from),
            Some(ws.clone()),
            "{:?} -> {m}",
            asked[i]
        );
        assert!(
            m["warren"]["cwd_notice"]
                .as_str()
                .is_some_and(|n| n.contains("outside agent 'main'")),
            "{m}"
        );
    }
    Ok(())
}

#[test]
fn acp_delete_is_refused_while_a_server_is_live_and_a_killed_server_is_not_live() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    root.write_config(&config(&fake))?;
    let install = InstallRoot::at(root.path());
    let r = &root;
    with_acp(root.path(), &["-a", "other"], Arc::default(), async |cx| {
        initialize(&cx).await?;
        let live = AcpLive::servers(&install, &alias("other"))
            .map_err(agent_client_protocol::Error::into_internal_error)?;
        assert_eq!(live.len(), 1, "one live server of 'other'");
        let out = r
            .run(bin(), &["agents", "delete", "other", "--yes"])
            .map_err(agent_client_protocol::Error::into_internal_error)?;
        assert!(
            !out.status.success(),
            "delete ran next to a live ACP server"
        );
        assert!(text(&out).1.contains("live ACP"), "{}", text(&out).1);
        Ok(())
    })?;
    assert!(AcpLive::servers(&install, &alias("other"))?.is_empty());

    // SIGKILL: the marker file stays, but its lock died with the process.
    let mut child = r
        .warren(bin(), &["acp", "-a", "other"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while AcpLive::servers(&install, &alias("other"))?.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the server never marked itself live"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        AcpLive::servers(&install, &alias("other"))?,
        vec![child.id()]
    );
    child.kill()?;
    child.wait()?;
    assert!(
        AcpLive::servers(&install, &alias("other"))?.is_empty(),
        "a killed server still counts as live"
    );
    assert!(
        AcpSessionStore::open(&install)?
            .list(Some(&alias("other")))?
            .is_empty(),
        "no session was created"
    );
    let out = r.run(bin(), &["agents", "delete", "other", "--yes"])?;
    assert!(out.status.success(), "{}", text(&out).1);
    Ok(())
}

#[test]
fn acp_next_to_a_running_daemon_is_served_by_the_daemon() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    root.write_config_on_free_port(&config(&fake))?;
    let mut daemon = warren_testkit::DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    daemon.wait_for("warren daemon ready", Duration::from_secs(30))?;
    let socket = warren_acp::socket_path(&InstallRoot::at(root.path()));
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&socket)?.permissions());
    assert_eq!(mode & 0o777, 0o600, "{}", socket.display());

    fake.push(FakeReply::text("Served by the daemon."));
    fake.push(FakeReply::text("Served after the reload."));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s = Arc::clone(&seen);
    let install = InstallRoot::at(root.path());
    let daemon = Arc::new(Mutex::new(daemon));
    let d = Arc::clone(&daemon);
    let id = with_acp(root.path(), &[], Arc::clone(&seen), async |cx| {
        initialize(&cx).await?;
        let id = new_session(&cx, Path::new("/")).await?.session_id;
        assert_eq!(prompt(&cx, &id, "hello daemon").await?, StopReason::EndTurn);
        wait_for(&s, |s| {
            agent_text(&s.updates_of(&id)).contains("Served by the daemon.")
        })
        .await?;
        // A reload in between: the open connection's next turn runs in the new generation
        // (the old one cancels its turns once the reload is done).
        {
            let mut d = d.lock().unwrap_or_else(|p| p.into_inner());
            let io = agent_client_protocol::Error::into_internal_error;
            d.signal("HUP").map_err(io)?;
            d.wait_for("config reloaded", Duration::from_secs(30))
                .map_err(io)?;
            d.wait_for("warren daemon ready", Duration::from_secs(30))
                .map_err(io)?;
        }
        assert_eq!(prompt(&cx, &id, "after reload").await?, StopReason::EndTurn);
        wait_for(&s, |s| {
            agent_text(&s.updates_of(&id)).contains("Served after the reload.")
        })
        .await?;
        // The relay is a live server of `main` while it runs.
        let live = AcpLive::servers(&install, &alias("main"))
            .map_err(agent_client_protocol::Error::into_internal_error)?;
        assert_eq!(live.len(), 1);
        Ok(id)
    })?;
    // The turn ran in the daemon: its trace names the ACP session.
    let out = root.run(bin(), &["logs", "--json"])?;
    assert!(text(&out).0.contains(&*id.0), "{}", text(&out).0);

    // An unknown agent is refused by the daemon, with the reason.
    let out = root.run(bin(), &["acp", "-a", "ghost"])?;
    assert!(!out.status.success());
    assert!(text(&out).1.contains("ghost"), "{}", text(&out).1);

    let mut daemon = daemon.lock().unwrap_or_else(|p| p.into_inner());
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30))?;
    assert!(!socket.exists(), "the daemon left its ACP socket behind");
    Ok(())
}
