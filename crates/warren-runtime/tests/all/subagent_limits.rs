//! PERM-7 with limits read only through the policy (issue 14 §4): the approval rules of a
//! subagent are its narrowed policy's, which are its parent's — a delegated call of a tool the
//! parent's `always_ask` lists is asked about, and an unanswered ask ends after the parent's
//! `approval_timeout_secs`, not the default. (The escalating axes a `delegate` call can name —
//! autonomy, tools, commands, iterations, actions per hour — are refused in `turn.rs`.)

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use warren_config::{ConfigStore, InstallRoot};
use warren_core::AgentAlias;
use warren_memory::MemoryStores;
use warren_runtime::actions::ActionWindow;
use warren_runtime::approval::{ApprovalDecision, ApprovalRequest, Approver};
use warren_runtime::cost::CostTracker;
use warren_runtime::receipts::ReceiptKey;
use warren_runtime::trace::{Trace, read_trace};
use warren_runtime::{AgentRunner, CancelToken, Services, TurnIo};
use warren_testkit::fake_llm::{FakeCall, FakeOpenAi, FakeReply};
use warren_tools::BoxFuture;

/// Records every request; answers none of them (each ask runs into the timeout).
#[derive(Default)]
struct Silent(Mutex<Vec<ApprovalRequest>>);

impl Approver for Silent {
    fn ask(&self, r: ApprovalRequest) -> BoxFuture<'_, ApprovalDecision> {
        self.0.lock().unwrap().push(r);
        Box::pin(std::future::pending())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagent_asks_under_its_parents_always_ask_and_approval_timeout_perm7() {
    let dir = tempfile::tempdir().unwrap();
    let root = InstallRoot::at(dir.path().join("warren"));
    root.ensure_layout().unwrap();
    let fake = FakeOpenAi::start().unwrap();
    std::fs::write(
        root.config_file(),
        format!(
            "[agents.ada]\nprovider = \"fake\"\nmodel = \"gpt-test\"\nrisk_profile = \"open\"\n\
             runtime_profile = \"rt\"\n\n\
             [risk_profiles.open]\nautonomy = \"full\"\nalways_ask = [\"file_write\"]\n\
             approval_timeout_secs = 1\n\n\
             [runtime_profiles.rt]\ndelegation_depth = 1\n\n\
             {}\nmax_retries = 0\n",
            fake.provider_toml("fake", "sk-test")
        ),
    )
    .unwrap();
    // The parent delegates at full autonomy; the child writes; both then answer.
    fake.push(FakeReply::calls(
        "",
        vec![FakeCall::new(
            "d1",
            "delegate",
            json!({"task": "write it", "autonomy": "full"}),
        )],
    ));
    fake.push(FakeReply::calls(
        "",
        vec![FakeCall::new(
            "k1",
            "file_write",
            json!({"path": "child.md", "content": "x"}),
        )],
    ));
    fake.push(FakeReply::text("child done"));
    fake.push(FakeReply::text("parent done"));

    let config = ConfigStore::load(root.clone())
        .unwrap()
        .snapshot()
        .config()
        .clone();
    let services = Arc::new(Services {
        receipts: Arc::new(ReceiptKey::generate().unwrap()),
        costs: Arc::new(CostTracker::open(root.costs_ledger(), &config.cost)),
        trace: Arc::new(Trace::new(&root, &config)),
        actions: Arc::new(ActionWindow::open(&root)),
        stores: Arc::new(warren_runtime::stores::Stores::new(&root, &config)),
    });
    let ada = AgentAlias::new("ada").unwrap();
    let runner = AgentRunner::build(
        &config,
        &root,
        &ada,
        &MemoryStores::new(root.clone()),
        services,
    )
    .await
    .unwrap();
    let approver = Arc::new(Silent::default());
    let io = TurnIo {
        max_output_tokens: None,
        approver: Arc::clone(&approver) as Arc<dyn Approver>,
        cancel: CancelToken::new(),
        events: Arc::new(|_| {}),
    };
    let started = Instant::now();
    let (outcome, _) = runner.run_detached(Vec::new(), "go", &io).await.unwrap();
    let took = started.elapsed();
    assert_eq!(outcome.reply, "parent done");

    let asked = approver.0.lock().unwrap().clone();
    assert_eq!(
        asked.len(),
        1,
        "the child's write was asked about: {asked:?}"
    );
    assert_eq!(asked[0].tool, "file_write");
    assert!(
        asked[0].reason.contains("always_ask"),
        "{}",
        asked[0].reason
    );
    assert!(
        !root.agent_workspace(&ada).join("child.md").exists(),
        "an unanswered ask never runs the call"
    );
    // The parent's 1 s, not the default 120 s.
    assert!(took < Duration::from_secs(20), "took {took:?}");
    let decisions: Vec<_> = read_trace(&root.runtime_trace())
        .into_iter()
        .filter(|e| e.kind == "approval")
        .map(|e| e.data["decision"].clone())
        .collect();
    assert_eq!(decisions, vec![json!("timed_out")]);
}
