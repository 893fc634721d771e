//! The turn loop against the local fake OpenAI server (real SSE wire format), real tools,
//! real memory and a real session backend (LOOP-1..7, STATE-13, STATE-14, receipts).
// Test helpers: a failed setup step should stop the test with its message.
#![allow(clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::json;
use warren_config::{ConfigStore, InstallRoot};
use warren_core::{AgentAlias, ChatMessage, Role, SessionKey};
use warren_memory::MemoryStores;
use warren_runtime::actions::ActionWindow;
use warren_runtime::approval::{ApprovalDecision, ApprovalRequest, ApproveAll, Approver, DenyAll};
use warren_runtime::cost::{CostTracker, read_ledger};
use warren_runtime::receipts::ReceiptKey;
use warren_runtime::trace::{Trace, read_trace};
use warren_runtime::turn::CLI_CHANNEL;
use warren_runtime::{
    AgentRunner, CancelToken, Services, TurnError, TurnEvent, TurnEvents, TurnIo, TurnOutcome,
};
use warren_store::sessions::{MemoryBackend, Page, SessionHandle};
use warren_testkit::fake_llm::{FakeCall, FakeOpenAi, FakeReply};
use warren_tools::BoxFuture;

struct Fixture {
    _dir: tempfile::TempDir,
    root: InstallRoot,
    servers: Vec<FakeOpenAi>,
    receipts: Arc<ReceiptKey>,
    actions: Arc<ActionWindow>,
}

impl Fixture {
    /// An install with agent `ada` on provider `fake` (plus `extra` TOML appended).
    fn new(servers: usize, extra: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = InstallRoot::at(dir.path().join("warren"));
        root.ensure_layout().expect("layout");
        let servers: Vec<FakeOpenAi> = (0..servers)
            .map(|_| FakeOpenAi::start().expect("fake server"))
            .collect();
        let mut config = String::from(
            "[agents.ada]\nprovider = \"fake\"\nmodel = \"gpt-test\"\nrisk_profile = \"open\"\nruntime_profile = \"rt\"\n\n[risk_profiles.open]\nautonomy = \"full\"\nallowed_commands = [\"sleep\", \"echo\"]\n\n",
        );
        for (i, s) in servers.iter().enumerate() {
            let name = if i == 0 {
                "fake".to_string()
            } else {
                format!("fake{i}")
            };
            config.push_str(&format!(
                "{}\nmax_retries = 0\n\n",
                s.provider_toml(&name, "sk-test-secret-key")
            ));
        }
        config.push_str(extra);
        if !extra.contains("[runtime_profiles.rt]") {
            config.push_str("\n[runtime_profiles.rt]\n");
        }
        std::fs::write(root.config_file(), config).expect("config");
        Self {
            _dir: dir,
            actions: Arc::new(ActionWindow::open(&root)),
            root,
            servers,
            receipts: Arc::new(ReceiptKey::generate().expect("key")),
        }
    }

    fn fake(&self) -> &FakeOpenAi {
        &self.servers[0]
    }

    fn workspace(&self) -> std::path::PathBuf {
        self.root.agent_workspace(&alias())
    }

    async fn runner(&self, approver: Arc<dyn Approver>) -> Runner {
        let store = ConfigStore::load(self.root.clone()).expect("config loads");
        let config = store.snapshot().config().clone();
        let services = Arc::new(Services {
            receipts: Arc::clone(&self.receipts),
            costs: Arc::new(CostTracker::open(self.root.costs_ledger(), &config.cost)),
            trace: Arc::new(Trace::new(&self.root, &config)),
            actions: Arc::clone(&self.actions),
            stores: Arc::new(warren_runtime::stores::Stores::new(&self.root, &config)),
        });
        let stores = MemoryStores::new(self.root.clone());
        let inner = AgentRunner::build(&config, &self.root, &alias(), &stores, services)
            .await
            .expect("agent builds");
        Runner { inner, approver }
    }
}

/// A runner with the approver its turns use.
struct Runner {
    inner: AgentRunner,
    approver: Arc<dyn Approver>,
}

impl std::ops::Deref for Runner {
    type Target = AgentRunner;
    fn deref(&self) -> &AgentRunner {
        &self.inner
    }
}

impl Runner {
    fn io(&self, cancel: &CancelToken, events: TurnEvents) -> TurnIo {
        TurnIo {
            max_output_tokens: None,
            approver: Arc::clone(&self.approver),
            cancel: cancel.clone(),
            events,
        }
    }

    /// A session turn as the door runs it: claimed for the agent, then run.
    async fn chat(
        &self,
        sessions: &SessionHandle,
        key: &SessionKey,
        channel: &str,
        message: &str,
        cancel: &CancelToken,
        events: TurnEvents,
    ) -> Result<TurnOutcome, TurnError> {
        let claimed = warren_runtime::sessions::claim(sessions, key, self.alias(), channel).await?;
        self.inner
            .chat(sessions, &claimed, message, &self.io(cancel, events))
            .await
    }

    async fn run_detached(
        &self,
        history: Vec<ChatMessage>,
        message: &str,
        cancel: &CancelToken,
        events: TurnEvents,
    ) -> Result<(TurnOutcome, Vec<ChatMessage>), TurnError> {
        self.inner
            .run_detached(history, message, &self.io(cancel, events))
            .await
    }
}

fn alias() -> AgentAlias {
    AgentAlias::new("ada").expect("alias")
}

fn key() -> SessionKey {
    SessionKey::new("s1").expect("key")
}

fn collect() -> (TurnEvents, Arc<Mutex<Vec<TurnEvent>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    (
        Arc::new(move |e| s.lock().unwrap_or_else(|p| p.into_inner()).push(e)),
        seen,
    )
}

async fn stored(sessions: &SessionHandle) -> Vec<ChatMessage> {
    let h = sessions.load(key(), Page::All).await.expect("load");
    h.messages
        .iter()
        .map(warren_runtime::history::decode)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_writes_reads_and_edits_files_then_answers_loop1() {
    let f = Fixture::new(1, "");
    f.fake().push(FakeReply::calls(
        "Writing.",
        vec![FakeCall::new(
            "c1",
            "file_write",
            json!({"path": "notes.md", "content": "hello world"}),
        )],
    ));
    f.fake().push(FakeReply::calls(
        "",
        vec![FakeCall::new(
            "c2",
            "file_edit",
            json!({"path": "notes.md", "old_string": "world", "new_string": "warren"}),
        )],
    ));
    f.fake().push(FakeReply::calls(
        "",
        vec![FakeCall::new(
            "c3",
            "file_read",
            json!({"path": "notes.md"}),
        )],
    ));
    f.fake()
        .push(FakeReply::text("The file says hello warren."));
    let runner = f.runner(Arc::new(DenyAll)).await;
    let sessions = SessionHandle::new(Arc::new(MemoryBackend::new()));
    let (events, seen) = collect();
    let outcome = runner
        .chat(
            &sessions,
            &key(),
            CLI_CHANNEL,
            "make a note",
            &CancelToken::new(),
            events,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(outcome.reply, "The file says hello warren.");
    assert_eq!((outcome.provider_calls, outcome.tool_calls), (4, 3));
    assert_eq!(
        std::fs::read_to_string(f.workspace().join("notes.md")).expect("written"),
        "hello warren"
    );
    // The third request carries the whole exchange: tool results answer their call ids.
    let reqs = f.fake().requests();
    let last = &reqs[3].body["messages"];
    let roles: Vec<_> = last
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["role"].clone())
        .collect();
    assert_eq!(
        roles,
        vec![
            json!("system"),
            json!("user"),
            json!("assistant"),
            json!("tool"),
            json!("assistant"),
            json!("tool"),
            json!("assistant"),
            json!("tool")
        ]
    );
    assert_eq!(last[3]["tool_call_id"], json!("c1"));
    assert!(
        last[7]["content"]
            .as_str()
            .expect("text")
            .contains("hello warren")
    );
    // Persisted: user, 3 rounds of (call, result), answer.
    let msgs = stored(&sessions).await;
    assert_eq!(msgs.len(), 8);
    assert_eq!(msgs[1].tool_calls[0].id, "c1");
    assert_eq!(msgs[2].role, Role::Tool);
    // Receipts verify against the per-process key.
    assert_eq!(outcome.receipts.len(), 3);
    let events = seen.lock().expect("events").clone();
    let results: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            TurnEvent::ToolResult {
                call,
                content,
                receipt: Some(r),
                ..
            } => Some((call.clone(), content.clone(), r.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 3);
    for (call, content, receipt) in &results {
        assert!(
            f.receipts
                .verify(receipt, &call.name, &call.arguments, content),
            "{receipt}"
        );
        assert!(
            !f.receipts
                .verify(receipt, &call.name, &call.arguments, "forged")
        );
    }
    // STATE-14 ledger and STATE-13 trace.
    let ledger = read_ledger(&f.root.costs_ledger());
    assert_eq!(ledger.len(), 4);
    assert_eq!(ledger[0].agent, "ada");
    assert_eq!(ledger[0].session.as_deref(), Some("s1"));
    let trace = read_trace(&f.root.runtime_trace());
    let kinds: Vec<_> = trace.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "tool_call").count(), 3);
    assert_eq!(kinds.first(), Some(&"turn_start"));
    assert_eq!(kinds.last(), Some(&"turn_end"));
    let raw = std::fs::read_to_string(f.root.runtime_trace()).expect("trace");
    assert!(!raw.contains("sk-test-secret-key"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_tool_violation_fails_before_any_call_runs_and_is_billed_loop5_loop6() {
    let f = Fixture::new(
        1,
        "[runtime_profiles.rt]\nsingle_tool_rounds = true\n\n[cost.rates.gpt-test]\ninput_per_mtok = 1.0\noutput_per_mtok = 2.0\n",
    );
    f.fake().push(
        FakeReply::calls(
            "Doing both.",
            vec![
                FakeCall::new("c1", "file_write", json!({"path": "a.md", "content": "a"})),
                FakeCall::new("c2", "file_write", json!({"path": "b.md", "content": "b"})),
            ],
        )
        .with_usage(1000, 500),
    );
    let runner = f.runner(Arc::new(DenyAll)).await;
    let sessions = SessionHandle::new(Arc::new(MemoryBackend::new()));
    let (events, _) = collect();
    let err = runner
        .chat(
            &sessions,
            &key(),
            CLI_CHANNEL,
            "write two files",
            &CancelToken::new(),
            events,
        )
        .await
        .expect_err("the turn fails");
    assert!(
        matches!(err, TurnError::SingleToolViolation { count: 2, .. }),
        "{err}"
    );
    assert_eq!(
        f.fake().requests()[0].body["parallel_tool_calls"],
        json!(false),
        "LOOP-2 request flag"
    );
    assert!(!f.workspace().join("a.md").exists() && !f.workspace().join("b.md").exists());
    let msgs = stored(&sessions).await;
    assert_eq!(
        msgs.iter().map(|m| m.role).collect::<Vec<_>>(),
        vec![Role::User],
        "nothing entered history"
    );
    let ledger = read_ledger(&f.root.costs_ledger());
    assert_eq!(ledger.len(), 1, "LOOP-6: the rejected request is billed");
    assert_eq!(
        (ledger[0].input_tokens, ledger[0].output_tokens),
        (1000, 500)
    );
    assert!((ledger[0].cost_usd - 0.002).abs() < 1e-12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_tool_rounds_run_one_call_per_request_loop2() {
    let f = Fixture::new(1, "[runtime_profiles.rt]\nsingle_tool_rounds = true\n");
    f.fake().push(FakeReply::calls(
        "",
        vec![FakeCall::new(
            "c1",
            "file_write",
            json!({"path": "a.md", "content": "a"}),
        )],
    ));
    f.fake().push(FakeReply::calls(
        "",
        vec![FakeCall::new(
            "c2",
            "file_write",
            json!({"path": "b.md", "content": "b"}),
        )],
    ));
    f.fake().push(FakeReply::text("both written"));
    let runner = f.runner(Arc::new(DenyAll)).await;
    let (events, seen) = collect();
    let (outcome, _) = runner
        .run_detached(Vec::new(), "write", &CancelToken::new(), events)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (outcome.reply.as_str(), outcome.tool_calls),
        ("both written", 2)
    );
    assert!(
        f.fake()
            .requests()
            .iter()
            .all(|r| r.body["parallel_tool_calls"] == json!(false))
    );
    assert!(
        seen.lock()
            .expect("events")
            .iter()
            .all(|e| !matches!(e, TurnEvent::Notice(_)))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fallback_without_support_keeps_batch_rounds_with_one_notice_loop4() {
    let f = Fixture::new(2, "[runtime_profiles.rt]\nsingle_tool_rounds = true\n");
    // Make fake1 (the fallback) lack the control.
    let path = f.root.config_file();
    let text = std::fs::read_to_string(&path)
        .expect("config")
        .replace(
            "[providers.fake]\n",
            "[providers.fake]\nfallbacks = [\"fake1\"]\n",
        )
        .replace(
            "[providers.fake1]\n",
            "[providers.fake1]\nparallel_call_control = false\n",
        );
    std::fs::write(&path, text).expect("config");
    f.fake().push(FakeReply::calls(
        "",
        vec![
            FakeCall::new("c1", "file_write", json!({"path": "a.md", "content": "a"})),
            FakeCall::new("c2", "file_write", json!({"path": "b.md", "content": "b"})),
        ],
    ));
    f.fake().push(FakeReply::calls(
        "",
        vec![FakeCall::new("c3", "file_read", json!({"path": "a.md"}))],
    ));
    f.fake().push(FakeReply::text("done"));
    let runner = f.runner(Arc::new(DenyAll)).await;
    let (events, seen) = collect();
    let (outcome, _) = runner
        .run_detached(Vec::new(), "write", &CancelToken::new(), events)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(outcome.tool_calls, 3, "the batch of two ran");
    assert!(f.workspace().join("b.md").exists());
    let notices: Vec<_> = seen
        .lock()
        .expect("events")
        .iter()
        .filter(|e| matches!(e, TurnEvent::Notice(_)))
        .cloned()
        .collect();
    assert_eq!(
        notices.len(),
        1,
        "one notice per turn, not per round: {notices:?}"
    );
    assert!(format!("{notices:?}").contains("fake1"));
    assert!(
        f.fake()
            .requests()
            .iter()
            .all(|r| r.body.get("parallel_tool_calls").is_none())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_iteration_cap_ends_with_one_summary_call_without_tools() {
    let f = Fixture::new(1, "[runtime_profiles.rt]\nmax_tool_iterations = 2\n");
    for i in 0..2 {
        f.fake().push(FakeReply::calls(
            "",
            vec![FakeCall::new(
                &format!("c{i}"),
                "file_read",
                json!({"path": "x.md"}),
            )],
        ));
    }
    f.fake()
        .push(FakeReply::text("I read x twice and it is missing."));
    let runner = f.runner(Arc::new(DenyAll)).await;
    let (events, _) = collect();
    let (outcome, msgs) = runner
        .run_detached(Vec::new(), "loop", &CancelToken::new(), events)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(outcome.hit_iteration_cap);
    assert_eq!(outcome.reply, "I read x twice and it is missing.");
    let reqs = f.fake().requests();
    assert_eq!(reqs.len(), 3);
    assert!(
        reqs[2].body.get("tools").is_none(),
        "the summary call has no tools"
    );
    assert_eq!(msgs.last().map(|m| m.role), Some(Role::Assistant));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reached_cost_limit_blocks_the_provider_call_state14() {
    // Each call reserves its worst case first (a few thousand prompt tokens + 100 output
    // tokens at $10/Mtok: a few cents); the first call then spends $1.00 of the $0.50.
    let f = Fixture::new(
        1,
        "[cost]\ndaily_limit_usd = 0.5\n\n[cost.rates.gpt-test]\ninput_per_mtok = 10.0\noutput_per_mtok = 10.0\nmax_output_tokens = 100\n",
    );
    f.fake()
        .push(FakeReply::text("first").with_usage(100_000, 100));
    let runner = f.runner(Arc::new(DenyAll)).await;
    let (events, _) = collect();
    runner
        .run_detached(Vec::new(), "one", &CancelToken::new(), Arc::clone(&events))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let err = runner
        .run_detached(Vec::new(), "two", &CancelToken::new(), events)
        .await
        .expect_err("blocked");
    assert!(err.to_string().contains("daily cost limit"), "{err}");
    assert_eq!(
        f.fake().requests().len(),
        1,
        "the second call never reached the provider"
    );
    // A new process (new tracker) sees the spent budget too.
    let runner = f.runner(Arc::new(DenyAll)).await;
    let (events, _) = collect();
    assert!(
        runner
            .run_detached(Vec::new(), "three", &CancelToken::new(), events)
            .await
            .is_err()
    );
    assert_eq!(f.fake().requests().len(), 1);
}

/// Issue 16 §4: a turn whose first call could cross the daily cap (its worst case: the prompt
/// plus the model's most output, 100,000 tokens at $10/Mtok = $1) is refused before the
/// provider is called; the same turn under a cap that fits the worst case runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_that_could_cross_the_daily_cap_is_refused_before_the_provider_is_called_issue16() {
    let rates = "[cost.rates.gpt-test]\ninput_per_mtok = 1.0\noutput_per_mtok = 10.0\nmax_output_tokens = 100000\n";
    let f = Fixture::new(1, &format!("[cost]\ndaily_limit_usd = 0.5\n\n{rates}"));
    f.fake().push(FakeReply::text("hello").with_usage(10, 10));
    let runner = f.runner(Arc::new(DenyAll)).await;
    let (events, _) = collect();
    let err = runner
        .run_detached(Vec::new(), "hi", &CancelToken::new(), events)
        .await
        .expect_err("refused");
    let msg = err.to_string();
    for part in [
        "agent 'ada': this call could cost up to $1.0",
        "daily cost limit of $0.5000",
        "the provider was not called",
        "T00:00:00Z",
        "[cost] daily_limit_usd",
    ] {
        assert!(msg.contains(part), "{part:?} in {msg}");
    }
    assert_eq!(f.fake().requests().len(), 0, "the provider saw no request");
    assert!(read_ledger(&f.root.costs_ledger()).is_empty());

    // The control: a cap above the worst case lets the same turn through.
    let f = Fixture::new(1, &format!("[cost]\ndaily_limit_usd = 1.5\n\n{rates}"));
    f.fake().push(FakeReply::text("hello").with_usage(10, 10));
    let runner = f.runner(Arc::new(DenyAll)).await;
    let (events, _) = collect();
    let out = runner
        .run_detached(Vec::new(), "hi", &CancelToken::new(), events)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.0.reply, "hello");
    assert_eq!(f.fake().requests().len(), 1);
}

/// Issue 14 §4: `[cost] warn_at_percent` is applied, not only validated: the turn whose
/// provider call takes the agent's spending today across 80% of its daily limit gives one
/// notice (in its events and outcome) and one `cost_warning` trace event; later turns the same
/// day do not repeat it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crossing_warn_at_percent_gives_one_notice_and_trace_event_a_day_issue14() {
    let f = Fixture::new(
        1,
        "[cost]
daily_limit_usd = 1.0
warn_at_percent = 80

[cost.rates.gpt-test]
input_per_mtok = 10.0
output_per_mtok = 10.0
max_output_tokens = 100
",
    );
    // $0.50 (50%), then $0.85 (85%: crosses 80%), then $0.86.
    f.fake().push(FakeReply::text("one").with_usage(50_000, 0));
    f.fake().push(FakeReply::text("two").with_usage(35_000, 0));
    f.fake().push(FakeReply::text("three").with_usage(1_000, 0));
    let runner = f.runner(Arc::new(DenyAll)).await;
    let mut notices = Vec::new();
    for input in ["one", "two", "three"] {
        let (events, seen) = collect();
        let (outcome, _) = runner
            .run_detached(Vec::new(), input, &CancelToken::new(), events)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let streamed: Vec<String> = seen
            .lock()
            .expect("events")
            .iter()
            .filter_map(|e| match e {
                TurnEvent::Notice(n) if n.contains("warn_at_percent") => Some(n.clone()),
                _ => None,
            })
            .collect();
        let kept: Vec<&String> = outcome
            .notices
            .iter()
            .filter(|n| n.contains("warn_at_percent"))
            .collect();
        assert_eq!(streamed.iter().collect::<Vec<_>>(), kept, "{input}");
        notices.push(streamed);
    }
    assert!(notices[0].is_empty(), "50% warned: {notices:?}");
    assert_eq!(notices[1].len(), 1, "{notices:?}");
    assert!(
        notices[1][0].contains("agent 'ada' has spent $0.8500 today, 85% of its daily limit $1.00"),
        "{}",
        notices[1][0]
    );
    assert!(
        notices[2].is_empty(),
        "warned twice the same day: {notices:?}"
    );
    let warnings = read_trace(&f.root.runtime_trace())
        .into_iter()
        .filter(|e| e.kind == "cost_warning")
        .count();
    assert_eq!(warnings, 1);
}

/// Issue 16 §4: `[cost] enabled = false` writes no ledger, but the cap still refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cost_recording_off_still_refuses_over_the_cap_issue16() {
    let f = Fixture::new(
        1,
        "[cost]\nenabled = false\ndaily_limit_usd = 0.5\n\n[cost.rates.gpt-test]\ninput_per_mtok = 10.0\noutput_per_mtok = 10.0\nmax_output_tokens = 100\n",
    );
    f.fake()
        .push(FakeReply::text("first").with_usage(100_000, 0));
    f.fake().push(FakeReply::text("second"));
    let runner = f.runner(Arc::new(DenyAll)).await;
    let (events, _) = collect();
    runner
        .run_detached(Vec::new(), "one", &CancelToken::new(), Arc::clone(&events))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let err = runner
        .run_detached(Vec::new(), "two", &CancelToken::new(), events)
        .await
        .expect_err("over the cap");
    assert!(
        err.to_string().contains("reached its daily cost limit"),
        "{err}"
    );
    assert_eq!(
        f.fake().requests().len(),
        1,
        "the second turn never reached it"
    );
    assert!(!f.root.costs_ledger().exists(), "nothing was recorded");
}

/// Issue 16 §4: the risk profile's `max_tokens_per_day` blocks the call that could cross it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_tokens_per_day_blocks_the_next_call_issue16() {
    let f = Fixture::new(1, "");
    let config = std::fs::read_to_string(f.root.config_file()).expect("config");
    std::fs::write(
        f.root.config_file(),
        config.replace(
            "[risk_profiles.open]\n",
            "[risk_profiles.open]\nmax_tokens_per_day = 60000\n",
        ),
    )
    .expect("config");
    f.fake()
        .push(FakeReply::text("first").with_usage(59_000, 500));
    f.fake().push(FakeReply::text("second"));
    let runner = f.runner(Arc::new(DenyAll)).await;
    let (events, _) = collect();
    runner
        .run_detached(Vec::new(), "one", &CancelToken::new(), Arc::clone(&events))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let err = runner
        .run_detached(Vec::new(), "two", &CancelToken::new(), events)
        .await
        .expect_err("over the token cap");
    let msg = err.to_string();
    assert!(msg.contains("daily token limit of 60000 tokens"), "{msg}");
    assert!(msg.contains("max_tokens_per_day"), "{msg}");
    assert_eq!(f.fake().requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supervised_writes_need_approval_and_silence_is_denial() {
    struct Never;
    impl Approver for Never {
        fn ask(&self, _r: ApprovalRequest) -> BoxFuture<'_, ApprovalDecision> {
            Box::pin(std::future::pending())
        }
    }
    let extra = "[risk_profiles.sup]\nautonomy = \"supervised\"\napproval_timeout_secs = 1\n";
    let f = Fixture::new(1, extra);
    let path = f.root.config_file();
    let text = std::fs::read_to_string(&path)
        .expect("config")
        .replace("risk_profile = \"open\"", "risk_profile = \"sup\"");
    std::fs::write(&path, text).expect("config");
    let write = |id: &str, file: &str| {
        FakeReply::calls(
            "",
            vec![FakeCall::new(
                id,
                "file_write",
                json!({"path": file, "content": "x"}),
            )],
        )
    };

    for (approver, file, expect_written) in [
        (Arc::new(DenyAll) as Arc<dyn Approver>, "denied.md", false),
        (Arc::new(Never), "timeout.md", false),
        (Arc::new(ApproveAll), "approved.md", true),
    ] {
        f.fake().push(write("c1", file));
        f.fake().push(FakeReply::text("ok"));
        let runner = f.runner(approver).await;
        let (events, seen) = collect();
        runner
            .run_detached(Vec::new(), "write", &CancelToken::new(), events)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(f.workspace().join(file).exists(), expect_written, "{file}");
        let ok = seen
            .lock()
            .expect("events")
            .iter()
            .any(|e| matches!(e, TurnEvent::ToolResult { ok: true, .. }));
        assert_eq!(ok, expect_written);
    }
    let trace = read_trace(&f.root.runtime_trace());
    let decisions: Vec<_> = trace
        .iter()
        .filter(|e| e.kind == "approval")
        .map(|e| e.data["decision"].clone())
        .collect();
    assert_eq!(
        decisions,
        vec![json!("denied"), json!("timed_out"), json!("approved")]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_mid_stream_stops_the_turn_and_keeps_the_session_consistent() {
    let f = Fixture::new(1, "");
    f.fake().push(FakeReply::Chat {
        text: (0..100).map(|i| format!("word{i} ")).collect(),
        calls: Vec::new(),
        usage: (1, 1),
        chunk_delay: Duration::from_millis(20),
    });
    let runner = f.runner(Arc::new(DenyAll)).await;
    let sessions = SessionHandle::new(Arc::new(MemoryBackend::new()));
    let cancel = CancelToken::new();
    let c = cancel.clone();
    let events: TurnEvents = Arc::new(move |e| {
        if matches!(e, TurnEvent::TextDelta(_)) {
            c.cancel();
        }
    });
    let started = Instant::now();
    let err = runner
        .chat(&sessions, &key(), CLI_CHANNEL, "talk", &cancel, events)
        .await
        .expect_err("cancelled");
    assert!(matches!(err, TurnError::Cancelled), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the stream was not read to its end"
    );
    assert_eq!(stored(&sessions).await.len(), 1, "only the user message");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_mid_tool_kills_it_and_records_interrupted_results() {
    let f = Fixture::new(1, "");
    f.fake().push(FakeReply::calls(
        "",
        vec![
            FakeCall::new("c1", "file_write", json!({"path": "a.md", "content": "a"})),
            FakeCall::new("c2", "shell", json!({"command": "sleep 20"})),
            FakeCall::new("c3", "file_write", json!({"path": "c.md", "content": "c"})),
        ],
    ));
    let runner = f.runner(Arc::new(ApproveAll)).await;
    let sessions = SessionHandle::new(Arc::new(MemoryBackend::new()));
    let cancel = CancelToken::new();
    let c = cancel.clone();
    let events: TurnEvents = Arc::new(move |e| {
        if let TurnEvent::ToolResult { call, .. } = &e
            && call.id == "c1"
        {
            let c = c.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                c.cancel();
            });
        }
    });
    // Sequential execution emits c1's result only after the batch; cancel from a timer instead.
    let c2 = cancel.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(800));
        c2.cancel();
    });
    let started = Instant::now();
    let err = runner
        .chat(&sessions, &key(), CLI_CHANNEL, "go", &cancel, events)
        .await
        .expect_err("cancelled");
    assert!(matches!(err, TurnError::Cancelled), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the sleep was killed"
    );
    assert!(f.workspace().join("a.md").exists());
    assert!(
        !f.workspace().join("c.md").exists(),
        "calls after the cancel never ran"
    );
    let msgs = stored(&sessions).await;
    let results: Vec<_> = msgs
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| (m.tool_call_id.clone(), m.content.clone()))
        .collect();
    assert_eq!(results.len(), 3, "every call has a result: {results:?}");
    assert!(results[1].1.contains("interrupted") && results[2].1.contains("interrupted"));
    assert!(!results[0].1.contains("interrupted"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_batches_keep_call_order_and_text_calls_are_recovered() {
    let f = Fixture::new(1, "[runtime_profiles.rt]\nparallel_tools = true\n");
    std::fs::create_dir_all(f.workspace()).expect("ws");
    for n in 0..4 {
        std::fs::write(
            f.workspace().join(format!("f{n}.md")),
            format!("content {n}"),
        )
        .expect("file");
    }
    f.fake().push(FakeReply::calls(
        "",
        (0..4)
            .map(|n| {
                FakeCall::new(
                    &format!("c{n}"),
                    "file_read",
                    json!({"path": format!("f{n}.md")}),
                )
            })
            .collect(),
    ));
    f.fake().push(FakeReply::text(
        "Also: <tool_call>{\"name\": \"file_read\", \"arguments\": {\"path\": \"f0.md\"}}</tool_call>",
    ));
    f.fake().push(FakeReply::text("done"));
    let runner = f.runner(Arc::new(DenyAll)).await;
    let (events, _) = collect();
    let (outcome, msgs) = runner
        .run_detached(Vec::new(), "read all", &CancelToken::new(), events)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(outcome.tool_calls, 5);
    let results: Vec<_> = msgs.iter().filter(|m| m.role == Role::Tool).collect();
    for (n, r) in results.iter().take(4).enumerate() {
        assert_eq!(r.tool_call_id.as_deref(), Some(format!("c{n}").as_str()));
        assert!(r.content.contains(&format!("content {n}")), "{}", r.content);
    }
    assert_eq!(results[4].tool_call_id.as_deref(), Some("text_call_0"));
    assert!(results[4].content.contains("content 0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delegate_runs_a_narrowed_child_that_cannot_spawn_again_perm7() {
    let f = Fixture::new(1, "[runtime_profiles.rt]\ndelegation_depth = 1\n");
    f.fake().push(FakeReply::calls(
        "",
        vec![FakeCall::new(
            "d1",
            "delegate",
            json!({"task": "write child.md", "autonomy": "read_only", "max_iterations": 2}),
        )],
    ));
    // The child's requests.
    f.fake().push(FakeReply::calls(
        "",
        vec![FakeCall::new(
            "k1",
            "file_write",
            json!({"path": "child.md", "content": "x"}),
        )],
    ));
    f.fake().push(FakeReply::text("the child could not write"));
    // The parent again.
    f.fake().push(FakeReply::text("parent done"));
    let runner = f.runner(Arc::new(ApproveAll)).await;
    let (events, seen) = collect();
    let (outcome, msgs) = runner
        .run_detached(Vec::new(), "delegate it", &CancelToken::new(), events)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(outcome.reply, "parent done");
    assert!(
        !f.workspace().join("child.md").exists(),
        "read_only child wrote nothing"
    );
    let reqs = f.fake().requests();
    let tool_names = |i: usize| -> Vec<String> {
        reqs[i].body["tools"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|t| t["function"]["name"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(tool_names(0).contains(&"delegate".to_string()));
    assert!(
        !tool_names(1).contains(&"delegate".to_string()),
        "no further spawning"
    );
    let child_write = reqs[2].body["messages"].to_string();
    assert!(
        child_write.contains("read_only"),
        "the child's write was refused: {child_write}"
    );
    let result = msgs
        .iter()
        .find(|m| m.tool_call_id.as_deref() == Some("d1"))
        .expect("result");
    assert!(
        result.content.contains("the child could not write"),
        "{}",
        result.content
    );
    assert!(
        seen.lock()
            .expect("events")
            .iter()
            .any(|e| matches!(e, TurnEvent::ToolResult { ok: true, .. }))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delegate_refuses_every_escalating_axis_by_name_perm7() {
    let f = Fixture::new(
        1,
        "[runtime_profiles.rt]\ndelegation_depth = 2\nmax_tool_iterations = 4\n[risk_profiles.sup]\nautonomy = \"supervised\"\nallowed_tools = [\"file_read\", \"shell\", \"delegate\"]\n",
    );
    let path = f.root.config_file();
    let text = std::fs::read_to_string(&path)
        .expect("config")
        .replace("risk_profile = \"open\"", "risk_profile = \"sup\"");
    std::fs::write(&path, text).expect("config");
    for (args, axis) in [
        (json!({"task": "t", "autonomy": "full"}), "autonomy"),
        (
            json!({"task": "t", "max_iterations": 50}),
            "max_tool_iterations",
        ),
        (
            json!({"task": "t", "tools": ["file_read", "file_write"]}),
            "file_write",
        ),
        (json!({"task": "t", "allowed_commands": ["rm"]}), "'rm'"),
    ] {
        f.fake().push(FakeReply::calls(
            "",
            vec![FakeCall::new("d", "delegate", args)],
        ));
        f.fake().push(FakeReply::text("ok"));
        let runner = f.runner(Arc::new(DenyAll)).await;
        let (events, _) = collect();
        let before = f.fake().requests().len();
        let (_, msgs) = runner
            .run_detached(Vec::new(), "go", &CancelToken::new(), events)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let result = msgs.iter().find(|m| m.role == Role::Tool).expect("result");
        assert!(
            result.content.contains("subagent refused") && result.content.contains(axis),
            "{axis}: {}",
            result.content
        );
        assert_eq!(
            f.fake().requests().len(),
            before + 2,
            "no child request was made"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_over_anthropic_sends_tool_results_as_tool_result_blocks() {
    let f = Fixture::new(0, "");
    let claude = FakeOpenAi::start_anthropic().expect("fake anthropic");
    let path = f.root.config_file();
    let text = std::fs::read_to_string(&path).expect("config")
        + &format!("\n{}\n", claude.provider_toml("fake", "sk-ant-test"));
    std::fs::write(&path, text).expect("config");
    claude.push(FakeReply::calls(
        "Writing.",
        vec![FakeCall::new(
            "toolu_1",
            "file_write",
            json!({"path": "c.md", "content": "claude"}),
        )],
    ));
    claude.push(FakeReply::text("Written."));
    let runner = f.runner(Arc::new(DenyAll)).await;
    let (events, _) = collect();
    let (outcome, _) = runner
        .run_detached(Vec::new(), "write c.md", &CancelToken::new(), events)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(outcome.reply, "Written.");
    assert_eq!(
        std::fs::read_to_string(f.workspace().join("c.md")).expect("file"),
        "claude"
    );
    let second = &claude.requests()[1].body;
    let messages = second["messages"].as_array().expect("messages");
    assert_eq!(
        messages.len(),
        3,
        "user, assistant tool_use, user tool_result: {second}"
    );
    assert_eq!(messages[1]["content"][1]["type"], json!("tool_use"));
    assert_eq!(messages[2]["content"][0]["type"], json!("tool_result"));
    assert_eq!(messages[2]["content"][0]["tool_use_id"], json!("toolu_1"));
    assert!(
        second["system"]
            .as_str()
            .expect("system")
            .contains("Warren agent 'ada'")
    );
}

/// The door (issue 14): `AgentHost::submit` derives the default session per channel and agent,
/// refuses a session another agent owns before its provider is called (SESS-1), and a
/// generation's cancel stops the turns it admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_door_derives_keys_refuses_foreign_sessions_and_cancels_with_the_generation_sess1() {
    use warren_runtime::{AgentHost, Channel, TurnRequest};
    let f = Fixture::new(
        1,
        "[agents.bee]\nprovider = \"fake\"\nmodel = \"gpt-test\"\nrisk_profile = \"open\"\n",
    );
    let snapshot = ConfigStore::load(f.root.clone())
        .expect("config loads")
        .snapshot();
    let host = Arc::new(AgentHost::for_process(&f.root, snapshot).expect("host"));
    let request =
        |agent: &str, session: Option<&str>, channel: Channel, events: TurnEvents| TurnRequest {
            max_output_tokens: None,
            agent: AgentAlias::new(agent).expect("alias"),
            session: session.map(|s| SessionKey::new(s).expect("key")),
            channel,
            input: "hello".into(),
            approver: Arc::new(DenyAll),
            cancel: CancelToken::new(),
            events,
        };
    let quiet = || -> TurnEvents { Arc::new(|_| {}) };

    f.fake().push(FakeReply::text("one"));
    f.fake().push(FakeReply::text("two"));
    for (channel, expected) in [
        (Channel::Cli, "Agent-ada-cli"),
        (Channel::Gateway, "Agent-ada-http"),
    ] {
        let turn = host
            .submit(request("ada", None, channel, quiet()))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(turn.session().as_str(), expected);
        turn.finish().await.unwrap_or_else(|e| panic!("{e}"));
    }
    let calls = f.fake().requests().len();
    let refused = host
        .submit(request("bee", Some("Agent-ada-cli"), Channel::Cli, quiet()))
        .await
        .expect_err("another agent's session");
    assert!(
        matches!(&refused, TurnError::SessionOwned(o) if o.owner.as_str() == "ada"),
        "{refused}"
    );
    assert_eq!(f.fake().requests().len(), calls, "no provider call");
    let unknown = host
        .submit(request("nobody", None, Channel::Cli, quiet()))
        .await
        .expect_err("unknown agent");
    assert!(
        matches!(unknown, TurnError::UnknownAgent { .. }),
        "{unknown}"
    );

    // A slow answer; the generation's cancel stops it.
    f.fake().push(FakeReply::Chat {
        text: (0..100).map(|i| format!("word{i} ")).collect(),
        calls: Vec::new(),
        usage: (1, 1),
        chunk_delay: Duration::from_millis(20),
    });
    let (events, seen) = collect();
    let turn = host
        .submit(request("bee", None, Channel::Cli, events))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for _ in 0..200 {
        if !seen.lock().unwrap_or_else(|p| p.into_inner()).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    host.cancel_turns();
    let err = turn.finish().await.expect_err("cancelled");
    assert!(matches!(err, TurnError::Cancelled), "{err}");
}

/// A fixture whose `open` profile allows `n` actions an hour.
fn with_actions_per_hour(f: &Fixture, n: u32) {
    let path = f.root.config_file();
    let text = std::fs::read_to_string(&path).expect("config");
    let text = text.replacen(
        "[risk_profiles.open]\n",
        &format!("[risk_profiles.open]\nmax_actions_per_hour = {n}\n"),
        1,
    );
    std::fs::write(&path, text).expect("config");
}

fn tool_result<'m>(msgs: &'m [ChatMessage], id: &str) -> &'m str {
    msgs.iter()
        .find(|m| m.tool_call_id.as_deref() == Some(id))
        .map(|m| m.content.as_str())
        .unwrap_or_else(|| panic!("no result for {id}"))
}

/// PERM-2 (issue 14): `max_actions_per_hour` from the policy counts tool executions across
/// turns; the N+1th call is refused without running, and the refusal names the limit and when
/// a slot frees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_actions_per_hour_refuses_the_next_call_across_turns_perm2() {
    let f = Fixture::new(1, "");
    with_actions_per_hour(&f, 2);
    let write = |id: &str, path: &str| {
        FakeCall::new(id, "file_write", json!({"path": path, "content": "x"}))
    };
    f.fake().push(FakeReply::calls(
        "",
        vec![write("c1", "a.md"), write("c2", "b.md")],
    ));
    f.fake().push(FakeReply::text("wrote two"));
    f.fake()
        .push(FakeReply::calls("", vec![write("c3", "c.md")]));
    f.fake().push(FakeReply::text("could not"));
    let runner = f.runner(Arc::new(DenyAll)).await;
    let (events, _) = collect();
    let (_, first) = runner
        .run_detached(Vec::new(), "two", &CancelToken::new(), Arc::clone(&events))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(!tool_result(&first, "c2").starts_with("Error"));
    let (outcome, second) = runner
        .run_detached(Vec::new(), "one more", &CancelToken::new(), events)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(outcome.reply, "could not");
    let refused = tool_result(&second, "c3");
    assert!(
        refused.contains("max_actions_per_hour = 2") && refused.contains("possible in"),
        "{refused}"
    );
    assert!(f.workspace().join("b.md").exists());
    assert!(!f.workspace().join("c.md").exists(), "the third call ran");
    let trace = read_trace(&f.root.runtime_trace());
    assert!(
        trace.iter().any(|e| e.kind == "limit"),
        "the refusal is traced"
    );
}

/// PERM-7 with limits read only through the policy: a subagent's tool calls count in its
/// parent's window under a limit `narrow` left no higher than the parent's, so delegating does
/// not buy more actions (the delegation is an action of the parent's too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagent_cannot_exceed_its_parents_actions_per_hour_perm7() {
    let f = Fixture::new(1, "[runtime_profiles.rt]\ndelegation_depth = 1\n");
    with_actions_per_hour(&f, 3);
    let read = |id: &str| FakeCall::new(id, "file_read", json!({"path": "missing.md"}));
    f.fake().push(FakeReply::calls("", vec![read("p1")]));
    f.fake().push(FakeReply::calls(
        "",
        vec![FakeCall::new(
            "d1",
            "delegate",
            json!({"task": "read twice"}),
        )],
    ));
    // The child: two reads, one round each; the delegation took a slot too, so only one
    // is left.
    f.fake().push(FakeReply::calls("", vec![read("k1")]));
    f.fake().push(FakeReply::calls("", vec![read("k2")]));
    f.fake().push(FakeReply::text("child done"));
    f.fake().push(FakeReply::text("parent done"));
    let runner = f.runner(Arc::new(ApproveAll)).await;
    let (events, _) = collect();
    let (outcome, _) = runner
        .run_detached(Vec::new(), "go", &CancelToken::new(), events)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(outcome.reply, "parent done");
    let reqs = f.fake().requests();
    // p1 took the first slot, the delegation the second and the child's k1 the third (it
    // ran: its request after carries no refusal); k2 was refused by the parent's limit.
    assert!(
        !reqs[3].body["messages"]
            .to_string()
            .contains("max_actions_per_hour"),
        "k1 ran"
    );
    let child = reqs[4].body["messages"].to_string();
    assert_eq!(
        child.matches("max_actions_per_hour = 3").count(),
        1,
        "k2 refused: {child}"
    );
}
