//! `[memory] backend = "qdrant"` with Qdrant down (the test kit's engine, started later on the
//! configured port): the daemon starts and chats without recall, `/api/health` names the
//! server's URL and its error, a `memory_store` tool call and `warren memory store` fail naming
//! the URL (nothing is dropped silently), and once the engine answers, the same daemon stores
//! again with no restart.

use crate::common::{self, bin, json_of, tool_result, wait_until};
use std::time::Duration;

use serde_json::{Value, json};
use warren_testkit::fake_llm::{FakeCall, FakeOpenAi, FakeReply};
use warren_testkit::qdrant::{FakeEmbeddings, QdrantEngine};
use warren_testkit::{TempRoot, free_port, http, text};

type R = Result<(), Box<dyn std::error::Error>>;

fn chat(port: u16, token: &str, message: &str) -> Result<Value, Box<dyn std::error::Error>> {
    let (status, reply) = http(
        port,
        "POST",
        "/api/agents/main/chat",
        Some(token),
        &json!({"message": message, "session": "q"}).to_string(),
    )?;
    assert_eq!(status, 200, "{reply}");
    Ok(reply)
}

fn store_call(id: &str, key: &str, content: &str) -> FakeReply {
    FakeReply::calls(
        "",
        vec![FakeCall::new(
            id,
            "memory_store",
            json!({"key": key, "content": content}),
        )],
    )
}

#[test]
fn the_daemon_starts_with_qdrant_down_reports_it_and_recovers_without_a_restart() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let embeddings = FakeEmbeddings::start(16)?;
    let (port, qport) = (free_port()?, free_port()?);
    let url = format!("http://127.0.0.1:{qport}");
    let memory = format!(
        r#"
[memory]
backend = "qdrant"
[memory.qdrant]
url = "{url}"
collection = "down_then_up"
[memory.embedder]
kind = "openai"
base_url = "{}"
model = "hash"
"#,
        embeddings.base_url()
    );
    root.write_config(&common::fake_config(
        &fake,
        "sk-qdrant-down",
        port,
        "\n[risk_profiles.default]\nautonomy = \"full\"\nallowed_tools = [\"memory_store\"]\n",
        &memory,
    ))?;
    let (_daemon, token) = common::paired_daemon(&root, port, "ci")?;

    // Memory is reported unavailable, naming the server and why.
    let (_, health) = http(port, "GET", "/api/health", Some(&token), "")?;
    let qdrant = &health["components"]["memory_backends"]["qdrant"];
    assert_eq!(qdrant["status"], "error", "{health}");
    assert!(
        qdrant["location"]
            .as_str()
            .unwrap_or_default()
            .contains(&url)
            && qdrant["error"].as_str().unwrap_or_default().contains(&url),
        "{health}"
    );

    // Chat still works; the store the model asks for fails naming the URL.
    fake.push(store_call("s1", "colour", "the user likes teal"));
    fake.push(FakeReply::text("could not remember"));
    let reply = chat(port, &token, "remember teal")?;
    assert_eq!(reply["reply"], "could not remember", "{reply}");
    let result = tool_result(&fake, "s1")?;
    assert!(result.contains(&url), "the model is told where: {result}");

    // The operator's store fails too, naming the URL; nothing was kept.
    let out = root.run(
        bin(),
        &["memory", "store", "--agent", "main", "pet", "a cat"],
    )?;
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(stderr.contains(&url), "{stderr}");

    // `warren status` and `warren doctor` name the server and why too.
    let out = root.run(bin(), &["status"])?;
    let (stdout, stderr) = text(&out);
    assert!(
        stdout.contains("memory:") && stdout.contains("qdrant error") && stdout.contains(&url),
        "{stdout}{stderr}"
    );
    let out = root.run(bin(), &["doctor"])?;
    let (stdout, stderr) = text(&out);
    assert!(
        !out.status.success(),
        "a memory backend down is a problem: {stdout}{stderr}"
    );
    assert!(
        stdout.contains("problem: memory backend qdrant error") && stdout.contains(&url),
        "{stdout}{stderr}"
    );

    // Qdrant comes back on the configured port: the same daemon recovers.
    let _engine = QdrantEngine::start_on(None, qport)?;
    wait_until("memory to be reported ok", Duration::from_secs(40), || {
        let (_, health) = http(port, "GET", "/api/health", Some(&token), "")?;
        Ok(health["components"]["memory_backends"]["qdrant"]["status"] == "ok")
    })?;
    fake.push(store_call("s2", "colour", "the user likes teal"));
    fake.push(FakeReply::text("remembered"));
    let reply = chat(port, &token, "remember teal again")?;
    assert_eq!(reply["reply"], "remembered", "{reply}");
    let result = tool_result(&fake, "s2")?;
    assert!(!result.contains("Qdrant"), "{result}");
    let status = json_of(&root, &["status"])?;
    assert_eq!(
        status["memory_backends"]["qdrant"]["status"], "ok",
        "{status}"
    );
    let listed = json_of(&root, &["memory", "list", "--agent", "main"])?;
    assert!(
        listed.to_string().contains("the user likes teal"),
        "{listed}"
    );
    assert!(
        !listed.to_string().contains("a cat"),
        "the failed store left nothing: {listed}"
    );
    Ok(())
}
