//! `warren acp` end to end (issue 19): the real binary as a child process, driven by the
//! official `agent-client-protocol` crate's client side (a real ACP peer), over the local fake
//! OpenAI server. Prompts run as turns with permissions asked through the client, cancel stops
//! a streaming turn, `session/load` in a fresh process replays the history, a session belongs
//! to one agent, and agent delete is refused while a server is live (SESS-3, SESS-4, LIFE-4).

use crate::common::bin;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    CancelNotification, ClientCapabilities, ContentBlock, FileSystemCapabilities,
    InitializeRequest, InitializeResponse, LoadSessionRequest, NewSessionRequest,
    NewSessionResponse, PromptRequest, ReadTextFileRequest, ReadTextFileResponse,
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse,
    SelectedPermissionOutcome, SessionId, SessionNotification, SessionUpdate,
    SetSessionModeRequest, StopReason, ToolCallStatus, WriteTextFileRequest, WriteTextFileResponse,
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

{provider}
"#,
        provider = fake.provider_toml("fake", "sk-acp-secret-value")
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
    /// The editor's open buffers (unsaved text by path); a read of another path reads the disk.
    buffers: std::collections::HashMap<PathBuf, String>,
    /// Every `fs/read_text_file` path, in order.
    fs_reads: Vec<PathBuf>,
    /// Every `fs/write_text_file` (path, content), in order (kept in `buffers`, not saved).
    fs_writes: Vec<(PathBuf, String)>,
}

/// What this test editor answers to `fs/read_text_file`: the open buffer, else the disk. It is
/// no authority: it reads whatever path it is asked for.
fn editor_read(seen: &Seen, path: &Path) -> Option<String> {
    seen.buffers
        .get(path)
        .cloned()
        .or_else(|| std::fs::read_to_string(path).ok())
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
    let (on_read, on_write) = (Arc::clone(&seen), Arc::clone(&seen));
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
            .on_receive_request(
                async move |request: ReadTextFileRequest, responder, _cx| {
                    let mut s = on_read.lock().unwrap_or_else(|p| p.into_inner());
                    s.fs_reads.push(request.path.clone());
                    match editor_read(&s, &request.path) {
                        Some(text) => responder.respond(ReadTextFileResponse::new(text)),
                        None => responder.respond_with_error(
                            agent_client_protocol::Error::invalid_params()
                                .data(request.path.display().to_string()),
                        ),
                    }
                },
                agent_client_protocol::on_receive_request!(),
            )
            .on_receive_request(
                async move |request: WriteTextFileRequest, responder, _cx| {
                    let mut s = on_write.lock().unwrap_or_else(|p| p.into_inner());
                    s.fs_writes
                        .push((request.path.clone(), request.content.clone()));
                    s.buffers.insert(request.path, request.content);
                    responder.respond(WriteTextFileResponse::new())
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

/// `initialize` from an editor that offers `fs/read_text_file` and `fs/write_text_file`.
async fn initialize_with_files(cx: &ConnectionTo<Agent>) -> Acp<InitializeResponse> {
    let fs = FileSystemCapabilities::new()
        .read_text_file(true)
        .write_text_file(true);
    cx.send_request(
        InitializeRequest::new(ProtocolVersion::V1)
            .client_capabilities(ClientCapabilities::new().fs(fs)),
    )
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

    // The daemon-served turn reads through the editor too.
    let ws = workspace(root.path(), "main");
    std::fs::create_dir_all(&ws)?;
    let ws = std::fs::canonicalize(&ws)?;
    std::fs::write(ws.join("todo.md"), "on disk\n")?;
    fake.push(FakeReply::calls(
        "",
        vec![FakeCall::new("d1", "file_read", json!({"path": "todo.md"}))],
    ));
    fake.push(FakeReply::text("Served by the daemon."));
    fake.push(FakeReply::text("Served after the reload."));
    let mut editor = Seen::default();
    editor
        .buffers
        .insert(ws.join("todo.md"), "unsaved todo in the editor\n".into());
    let seen = Arc::new(Mutex::new(editor));
    let s = Arc::clone(&seen);
    let install = InstallRoot::at(root.path());
    let daemon = Arc::new(Mutex::new(daemon));
    let d = Arc::clone(&daemon);
    let id = with_acp(root.path(), &[], Arc::clone(&seen), async |cx| {
        initialize_with_files(&cx).await?;
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
    {
        let seen = seen.lock().unwrap_or_else(|p| p.into_inner());
        assert_eq!(seen.fs_reads, vec![ws.join("todo.md")]);
        let (status, content) = call_result(&seen.updates_of(&id), "d1");
        assert_eq!(status, Some(ToolCallStatus::Completed), "{content}");
        assert!(content.contains("unsaved todo in the editor"), "{content}");
    }
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

/// The status and text of the tool call `id` as the client last saw it.
fn call_result(updates: &[SessionUpdate], id: &str) -> (Option<ToolCallStatus>, String) {
    updates
        .iter()
        .rev()
        .find_map(|u| match u {
            SessionUpdate::ToolCallUpdate(t) if &*t.tool_call_id.0 == id => {
                Some((t.fields.status, format!("{:?}", t.fields.content)))
            }
            _ => None,
        })
        .unwrap_or((None, String::new()))
}

fn boss_config(fake: &FakeOpenAi) -> String {
    config(fake)
        + "\n[agents.boss]\nprovider = \"fake\"\nmodel = \"gpt-test\"\nrisk_profile = \"boss\"\nruntime_profile = \"parallel\"\n\n[risk_profiles.boss]\nautonomy = \"full\"\n\n[runtime_profiles.parallel]\nparallel_tools = true\n"
}

#[test]
fn acp_files_go_through_the_editor_only_after_the_policy_allowed_them_issue19() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    root.write_config(&boss_config(&fake))?;
    let ws = workspace(root.path(), "boss");
    std::fs::create_dir_all(&ws)?;
    let ws = std::fs::canonicalize(&ws)?;
    std::fs::write(ws.join("notes.md"), "saved on disk\n")?;
    // Outside the workspace and every grant, and a link in the workspace leading to it.
    let beside = root
        .path()
        .parent()
        .ok_or("the install root has no parent")?;
    let outside = beside.join("outside.txt");
    std::fs::write(&outside, "TOP-SECRET-7731 outside the workspace\n")?;
    std::os::unix::fs::symlink(&outside, ws.join("escape.txt"))?;
    let outside_new = beside.join("outside-new.txt");

    // Round 1 (in parallel): an allowed read, a path outside, a link leading out.
    fake.push(FakeReply::calls(
        "",
        vec![
            FakeCall::new("r1", "file_read", json!({"path": "notes.md"})),
            FakeCall::new("r2", "file_read", json!({"path": outside})),
            FakeCall::new("r3", "file_read", json!({"path": "escape.txt"})),
        ],
    ));
    // Round 2: an allowed write, a write outside, an edit of the unsaved buffer.
    fake.push(FakeReply::calls(
        "",
        vec![
            FakeCall::new(
                "w1",
                "file_write",
                json!({"path": "out.md", "content": "written by the agent\n"}),
            ),
            FakeCall::new(
                "w2",
                "file_write",
                json!({"path": outside_new, "content": "escaped\n"}),
            ),
            FakeCall::new(
                "w3",
                "file_edit",
                json!({"path": "notes.md", "old_string": "unsaved", "new_string": "edited"}),
            ),
        ],
    ));
    fake.push(FakeReply::text("Done."));

    let mut editor = Seen::default();
    editor
        .buffers
        .insert(ws.join("notes.md"), "unsaved in the editor\n".into());
    let seen = Arc::new(Mutex::new(editor));
    let id = with_acp(
        root.path(),
        &["-a", "boss"],
        Arc::clone(&seen),
        async |cx| {
            initialize_with_files(&cx).await?;
            let id = new_session(&cx, Path::new("/")).await?.session_id;
            assert_eq!(
                prompt(&cx, &id, "work on the notes").await?,
                StopReason::EndTurn
            );
            Ok(id)
        },
    )?;
    let seen = seen.lock().unwrap_or_else(|p| p.into_inner());
    let updates = seen.updates_of(&id);

    // The read saw the editor's unsaved buffer, not the disk.
    let (status, content) = call_result(&updates, "r1");
    assert_eq!(status, Some(ToolCallStatus::Completed), "{content}");
    assert!(content.contains("unsaved in the editor"), "{content}");
    // The refused paths were refused by the policy and never reached the editor, which would
    // have answered them (it reads any path it is asked for).
    assert!(editor_read(&seen, &outside).is_some_and(|t| t.contains("TOP-SECRET-7731")));
    for refused in ["r2", "r3", "w2"] {
        let (status, content) = call_result(&updates, refused);
        assert_eq!(status, Some(ToolCallStatus::Failed), "{refused}: {content}");
        assert!(
            content.contains("permission denied"),
            "{refused}: {content}"
        );
        assert!(!content.contains("TOP-SECRET-7731"), "{refused}: {content}");
    }
    assert_eq!(
        seen.fs_reads,
        vec![ws.join("notes.md"), ws.join("notes.md")],
        "the editor was asked for exactly the allowed reads (file_read, then file_edit)"
    );
    // The writes arrived through the editor (its buffers), the disk is untouched. (The round's
    // calls ran in parallel: compare in path order.)
    let mut writes = seen.fs_writes.clone();
    writes.sort();
    assert_eq!(
        writes,
        vec![
            (ws.join("notes.md"), "edited in the editor\n".to_string()),
            (ws.join("out.md"), "written by the agent\n".to_string()),
        ]
    );
    assert_eq!(
        call_result(&updates, "w1").0,
        Some(ToolCallStatus::Completed)
    );
    assert_eq!(
        call_result(&updates, "w3").0,
        Some(ToolCallStatus::Completed)
    );
    assert!(!ws.join("out.md").exists(), "the write bypassed the editor");
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.md"))?,
        "saved on disk\n"
    );
    assert!(!outside_new.exists());
    Ok(())
}

#[test]
fn acp_modes_lower_autonomy_and_never_raise_it_issue19() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    root.write_config(&boss_config(&fake))?;
    let mode_ids = |m: &Option<agent_client_protocol::v1::schema::SessionModeState>| {
        m.as_ref().map(|m| {
            (
                m.current_mode_id.0.to_string(),
                m.available_modes
                    .iter()
                    .map(|a| a.id.0.to_string())
                    .collect::<Vec<_>>(),
            )
        })
    };

    // A supervised agent offers read_only and supervised; full is refused.
    let refused = with_acp(root.path(), &[], Arc::default(), async |cx| {
        initialize(&cx).await?;
        let new = new_session(&cx, Path::new("/")).await?;
        assert_eq!(
            mode_ids(&new.modes),
            Some((
                "supervised".to_string(),
                vec!["read_only".to_string(), "supervised".to_string()]
            ))
        );
        cx.send_request(SetSessionModeRequest::new(new.session_id, "full"))
            .block_task()
            .await
            .map(|_| ())
    });
    let e = refused
        .err()
        .ok_or("mode full was accepted above supervised")?;
    assert!(e.to_string().contains("above agent 'main'"), "{e}");

    // A full agent in mode supervised asks before a write; in read_only it refuses it.
    fake.push(FakeReply::calls(
        "",
        vec![FakeCall::new(
            "s1",
            "file_write",
            json!({"path": "asked.md", "content": "asked\n"}),
        )],
    ));
    fake.push(FakeReply::text("Wrote it."));
    fake.push(FakeReply::calls(
        "",
        vec![FakeCall::new(
            "s2",
            "file_write",
            json!({"path": "refused.md", "content": "no\n"}),
        )],
    ));
    fake.push(FakeReply::text("Could not."));
    let seen = Arc::new(Mutex::new(Seen {
        answers: vec!["allow"],
        ..Seen::default()
    }));
    let s = Arc::clone(&seen);
    let (id, asked_after_supervised, loaded) = with_acp(
        root.path(),
        &["-a", "boss"],
        Arc::clone(&seen),
        async |cx| {
            initialize(&cx).await?;
            let new = new_session(&cx, Path::new("/")).await?;
            let id = new.session_id.clone();
            assert_eq!(
                mode_ids(&new.modes).map(|m| m.1),
                Some(vec!["read_only".into(), "supervised".into(), "full".into()])
            );
            cx.send_request(SetSessionModeRequest::new(id.clone(), "supervised"))
                .block_task()
                .await?;
            assert_eq!(prompt(&cx, &id, "write it").await?, StopReason::EndTurn);
            let asked = s.lock().unwrap_or_else(|p| p.into_inner()).asked.len();
            cx.send_request(SetSessionModeRequest::new(id.clone(), "read_only"))
                .block_task()
                .await?;
            assert_eq!(prompt(&cx, &id, "write more").await?, StopReason::EndTurn);
            let loaded = cx
                .send_request(LoadSessionRequest::new(id.clone(), Path::new("/")))
                .block_task()
                .await?;
            Ok((id, asked, mode_ids(&loaded.modes)))
        },
    )?;
    let ws = workspace(root.path(), "boss");
    assert_eq!(asked_after_supervised, 1, "supervised mode did not ask");
    assert_eq!(std::fs::read_to_string(ws.join("asked.md"))?, "asked\n");
    let seen = seen.lock().unwrap_or_else(|p| p.into_inner());
    assert_eq!(
        seen.asked.len(),
        1,
        "read_only mode asked instead of refusing"
    );
    let (status, content) = call_result(&seen.updates_of(&id), "s2");
    assert_eq!(status, Some(ToolCallStatus::Failed), "{content}");
    assert!(content.contains("read_only"), "{content}");
    assert!(!ws.join("refused.md").exists());
    // The mode is stored with the session.
    assert_eq!(loaded.map(|m| m.0), Some("read_only".to_string()));
    Ok(())
}

/// A background delegate started from a `read_only` session keeps that cap: its child task runs
/// apart from the turn, and without the session's tool context it would write with the agent's
/// configured `full` autonomy.
#[test]
fn acp_a_background_delegate_keeps_the_sessions_mode_issue19() -> R {
    const CHILD: &str = "CHILD-BG: write bg.md";
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    root.write_config(&format!("{}delegation_depth = 1\n", boss_config(&fake)))?;
    fake.push(FakeReply::calls(
        "",
        vec![FakeCall::new(
            "d1",
            "delegate",
            json!({"task": CHILD, "background": true, "tools": ["file_write"]}),
        )],
    ));
    fake.push_when(
        CHILD,
        FakeReply::calls(
            "",
            vec![FakeCall::new(
                "w1",
                "file_write",
                json!({"path": "bg.md", "content": "from the child\n"}),
            )],
        ),
    );
    // The parent's and the child's last rounds, in whichever order they come.
    fake.push(FakeReply::text("Started."));
    fake.push(FakeReply::text("Done."));
    let ws = workspace(root.path(), "boss");
    let results = ws.join("delegate_results");
    with_acp(root.path(), &["-a", "boss"], Arc::default(), async |cx| {
        initialize(&cx).await?;
        let new = new_session(&cx, Path::new("/")).await?;
        let id = new.session_id.clone();
        cx.send_request(SetSessionModeRequest::new(id.clone(), "read_only"))
            .block_task()
            .await?;
        assert_eq!(prompt(&cx, &id, "delegate it").await?, StopReason::EndTurn);
        // The child runs in this process: wait for its result record to end.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ended = std::fs::read_dir(&results)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| std::fs::read_to_string(e.path()).ok())
                .any(|t| !t.contains("\"running\""));
            if ended {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the background child never ended"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    })?;
    assert!(
        fake.requests()
            .iter()
            .any(|r| r.body.to_string().contains(CHILD)),
        "the child never ran"
    );
    assert!(
        !ws.join("bg.md").exists(),
        "the background child wrote despite the session's read_only mode"
    );
    Ok(())
}

#[test]
fn acp_delete_through_a_daemon_is_refused_while_an_earlier_in_process_server_is_live_issue19() -> R
{
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    root.write_config_on_free_port(&config(&fake))?;
    let install = InstallRoot::at(root.path());
    let r = &root;
    // `warren acp` starts in-process (no daemon yet), then a daemon starts beside it.
    let daemon = with_acp(root.path(), &["-a", "other"], Arc::default(), async |cx| {
        initialize(&cx).await?;
        let io = agent_client_protocol::Error::into_internal_error;
        let mut daemon =
            warren_testkit::DaemonChild::spawn(r.warren(bin(), &["daemon"])).map_err(io)?;
        daemon
            .wait_for("warren daemon ready", Duration::from_secs(30))
            .map_err(io)?;
        let out = r
            .run(bin(), &["agents", "delete", "other", "--yes"])
            .map_err(io)?;
        assert!(
            !out.status.success(),
            "the daemon deleted an agent an in-process ACP server serves"
        );
        assert!(text(&out).1.contains("live ACP"), "{}", text(&out).1);
        Ok(daemon)
    })?;
    assert!(AcpLive::servers(&install, &alias("other"))?.is_empty());
    // Once the editor closed, the daemon deletes it.
    let out = root.run(bin(), &["agents", "delete", "other", "--yes"])?;
    assert!(out.status.success(), "{}", text(&out).1);
    let mut daemon = daemon;
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30))?;
    Ok(())
}
