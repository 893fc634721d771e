//! Session keys cannot be squatted (issue 35 §7, SESS-1), at the runtime's door with a real
//! SQLite session store: agent `ada` asking for agent `bee`'s default keys is refused naming
//! `bee`, and `bee`'s default turn works even after `ada` took the old default key `cli-bee`.
//! With the guard off (the pre-issue derivation `cli-<alias>` and a claim that knows no
//! reservation), the same squat locks `bee` out of its default session.

#![allow(clippy::expect_used)]

use std::sync::Arc;

use warren_config::{ConfigStore, InstallRoot};
use warren_core::{AgentAlias, SessionKey};
use warren_runtime::approval::DenyAll;
use warren_runtime::session_keys::legacy_default_key;
use warren_runtime::sessions::claim;
use warren_runtime::{AgentHost, CancelToken, Channel, TurnError, TurnEvents, TurnRequest};
use warren_testkit::fake_llm::{FakeOpenAi, FakeReply};

struct Fixture {
    _dir: tempfile::TempDir,
    fake: FakeOpenAi,
    host: Arc<AgentHost>,
}

/// Agents `ada` and `bee` on a fake provider, the door of a one-process host (SQLite sessions).
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = InstallRoot::at(dir.path().join("warren"));
    root.ensure_layout().expect("layout");
    let fake = FakeOpenAi::start().expect("fake server");
    let agents: String = ["ada", "bee"]
        .iter()
        .map(|a| {
            format!("[agents.{a}]\nprovider = \"fake\"\nmodel = \"m\"\nrisk_profile = \"open\"\n\n")
        })
        .collect();
    let config = format!(
        "{agents}[risk_profiles.open]\nautonomy = \"full\"\n\n{}\nmax_retries = 0\n",
        fake.provider_toml("fake", "sk-test-secret-key")
    );
    std::fs::write(root.config_file(), config).expect("config");
    let snapshot = ConfigStore::load(root.clone())
        .expect("config loads")
        .snapshot();
    let host = Arc::new(AgentHost::for_process(&root, snapshot).expect("host"));
    Fixture {
        _dir: dir,
        fake,
        host,
    }
}

fn alias(a: &str) -> AgentAlias {
    AgentAlias::new(a).expect("alias")
}

fn request(agent: &str, session: Option<&str>, channel: Channel) -> TurnRequest {
    let quiet: TurnEvents = Arc::new(|_| {});
    TurnRequest {
        max_output_tokens: None,
        agent: alias(agent),
        session: session.map(|s| SessionKey::new(s).expect("key")),
        channel,
        input: "hello".into(),
        approver: Arc::new(DenyAll),
        cancel: CancelToken::new(),
        events: quiet,
    }
}

impl Fixture {
    /// Runs one turn to its end; the session it ran in.
    async fn turn(&self, agent: &str, session: Option<&str>, channel: Channel) -> SessionKey {
        self.fake.push(FakeReply::text("ok"));
        let turn = self
            .host
            .submit(request(agent, session, channel))
            .await
            .unwrap_or_else(|e| panic!("{agent} in {session:?}: {e}"));
        let key = turn.session().clone();
        turn.finish().await.unwrap_or_else(|e| panic!("{e}"));
        key
    }

    async fn refused(&self, agent: &str, session: &str, channel: Channel) -> TurnError {
        let calls = self.fake.requests().len();
        let err = self
            .host
            .submit(request(agent, Some(session), channel))
            .await
            .expect_err("refused");
        assert_eq!(self.fake.requests().len(), calls, "no provider call");
        err
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_cannot_squat_another_agents_default_session_issue35() {
    let f = fixture();
    let sessions = f.host.chat_sessions().await.expect("sessions");

    // Guard off: the old default of bee was `cli-bee`, and a claim without the reservation
    // lets ada create it; bee's default turn is then refused.
    let old_default = legacy_default_key(Channel::Cli, &alias("bee")).expect("key");
    claim(&sessions, &old_default, &alias("ada"), "cli")
        .await
        .unwrap_or_else(|e| panic!("the unguarded squat works: {e}"));
    let locked_out = claim(&sessions, &old_default, &alias("bee"), "cli")
        .await
        .expect_err("bee is locked out of the squatted key");
    assert!(
        matches!(&locked_out, warren_runtime::sessions::ClaimError::Owned(o) if o.owner.as_str() == "ada"),
        "{locked_out}"
    );

    // Guard on: bee's default is namespaced, so the squatted `cli-bee` does not matter.
    assert_eq!(
        f.turn("bee", None, Channel::Cli).await.as_str(),
        "Agent-bee-cli"
    );
    assert_eq!(
        f.turn("bee", None, Channel::Gateway).await.as_str(),
        "Agent-bee-http"
    );
    // ada cannot create bee's default keys, namespaced or legacy (bee is configured).
    for (key, channel) in [
        ("Agent-bee-cli", Channel::Cli),
        ("Agent-bee-acp", Channel::Acp),
        ("Agent-bee-cron", Channel::Cron),
        ("http-bee", Channel::Gateway),
        ("acp-bee", Channel::Cli),
    ] {
        let err = f.refused("ada", key, channel).await;
        let text = err.to_string();
        assert!(
            matches!(&err, TurnError::DefaultKeyReserved(r) if r.owner.as_str() == "bee")
                || matches!(&err, TurnError::SessionOwned(o) if o.owner.as_str() == "bee"),
            "{key}: {text}"
        );
        assert!(text.contains("'bee'"), "the owner is named: {text}");
    }
    // Nothing was created for ada on the way.
    let acp = SessionKey::new("Agent-bee-acp").expect("key");
    let meta = sessions.run(move |b| b.meta(&acp)).await.expect("meta");
    assert_eq!(meta, None);
    // ada's own keys and free keys still work.
    assert_eq!(
        f.turn("ada", None, Channel::Cli).await.as_str(),
        "Agent-ada-cli"
    );
    assert_eq!(
        f.turn("ada", Some("notes"), Channel::Cli).await.as_str(),
        "notes"
    );
    // bee still owns the squatted legacy key's neighbour defaults and can run its own.
    assert_eq!(
        f.turn("bee", Some("Agent-bee-acp"), Channel::Acp)
            .await
            .as_str(),
        "Agent-bee-acp"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_legacy_default_of_its_own_agent_stays_its_default_issue35() {
    let f = fixture();
    let sessions = f.host.chat_sessions().await.expect("sessions");
    // Before the upgrade, bee ran in `cli-bee` (its row, owned by bee).
    let legacy = legacy_default_key(Channel::Cli, &alias("bee")).expect("key");
    claim(&sessions, &legacy, &alias("bee"), "cli")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(f.turn("bee", None, Channel::Cli).await, legacy);
    assert_eq!(
        f.host
            .default_session(Channel::Cli, &alias("bee"))
            .await
            .expect("default"),
        legacy
    );
    // Other channels without a legacy row get the namespaced key.
    assert_eq!(
        f.turn("bee", None, Channel::Gateway).await.as_str(),
        "Agent-bee-http"
    );
}
