//! A subagent gets the `http_request` tool its narrowed policy allows, through its parent's
//! egress (issue 24, PERM-7): the same allowlist, so it reaches the parent's allowed host and
//! is refused elsewhere; a parent without an allowlist gives its subagent no such tool.
//! The real binary (`warren agent -m`), the fake OpenAI server scripting parent and child, a
//! plain-HTTP server on loopback as the allowed host and another as the host not listed.

use serde_json::{Value, json};
use warren_testkit::fake_llm::{FakeCall, FakeOpenAi, FakeReply};
use warren_testkit::{TempRoot, text};

use crate::common::{bin, tool_result};
use crate::egress::{request_lines, upstream};

type R = Result<(), Box<dyn std::error::Error>>;
type Res<T> = Result<T, Box<dyn std::error::Error>>;

const CHILD_TASK: &str = "CHILD-TASK: fetch the status page";

fn config(fake: &FakeOpenAi, allow: &str) -> String {
    format!(
        r#"
[agents.main]
provider = "fake"
model = "gpt-test"
risk_profile = "lead"
runtime_profile = "rt"
{allow}

[risk_profiles.lead]
autonomy = "full"
allowed_tools = ["file_read", "http_request", "delegate"]

[runtime_profiles.rt]
delegation_depth = 1
max_tool_iterations = 6

{provider}
max_retries = 0
"#,
        provider = fake.provider_toml("fake", "sk-subagent-http")
    )
}

/// The tool names offered in the first request of the child (its task is the user message).
fn child_tools(fake: &FakeOpenAi) -> Res<Vec<String>> {
    let req = fake
        .requests()
        .into_iter()
        .find(|r| {
            r.body["messages"].as_array().is_some_and(|ms| {
                ms.iter()
                    .any(|m| m["role"] == "user" && m["content"] == CHILD_TASK)
            })
        })
        .ok_or("the child made no provider request")?;
    Ok(req.body["tools"]
        .as_array()
        .map(|ts| {
            ts.iter()
                .filter_map(|t| t["function"]["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default())
}

fn delegate() -> FakeReply {
    FakeReply::calls(
        "",
        vec![FakeCall::new(
            "d1",
            "delegate",
            json!({"task": CHILD_TASK, "tools": ["http_request", "file_read"]}),
        )],
    )
}

fn get(id: &str, url: String) -> FakeReply {
    FakeReply::calls(
        "",
        vec![FakeCall::new(id, "http_request", json!({"url": url}))],
    )
}

#[test]
fn a_subagent_reaches_its_parents_allowed_host_and_no_other_issue24() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    let (allowed, allowed_seen) = upstream("upstream-body")?;
    let (other, other_seen) = upstream("upstream-body")?;
    root.write_config(&config(
        &fake,
        &format!("\n[agents.main.network]\nallow = [\"127.0.0.1:{allowed}\"]\n"),
    ))?;
    fake.push(delegate());
    fake.push(get("c-ok", format!("http://127.0.0.1:{allowed}/status")));
    fake.push(get("c-no", format!("http://127.0.0.1:{other}/status")));
    fake.push(FakeReply::text("child done"));
    fake.push(FakeReply::text("parent done"));
    let out = root.run(bin(), &["agent", "-a", "main", "-m", "delegate the fetch"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("parent done"), "{stdout}");

    let tools = child_tools(&fake)?;
    assert!(
        tools.iter().any(|t| t == "http_request"),
        "the child is offered http_request: {tools:?}"
    );
    assert!(
        !tools.iter().any(|t| t == "delegate"),
        "and only what it asked for: {tools:?}"
    );
    let ok = tool_result(&fake, "c-ok")?;
    assert!(
        ok.contains("upstream-body") && ok.contains("200"),
        "the allowed host answered the child: {ok}"
    );
    let refused = tool_result(&fake, "c-no")?;
    assert!(
        refused.contains(&format!(
            "127.0.0.1:{other} is not on the network allowlist of agent 'main'"
        )),
        "the other host is refused naming the allowlist: {refused}"
    );
    assert_eq!(
        request_lines(&allowed_seen),
        vec!["GET /status HTTP/1.1".to_string()]
    );
    assert_eq!(
        request_lines(&other_seen),
        Vec::<String>::new(),
        "nothing reached the host not listed"
    );
    let delegated = tool_result(&fake, "d1")?;
    let first: Value = serde_json::Deserializer::from_str(&delegated)
        .into_iter::<Value>()
        .next()
        .ok_or("no JSON in the delegate result")??;
    assert_eq!(first["reply"], "child done", "{delegated}");
    Ok(())
}

#[test]
fn a_parent_without_an_allowlist_gives_its_subagent_no_http_request_issue24() -> R {
    let root = TempRoot::new()?;
    let fake = FakeOpenAi::start()?;
    root.write_config(&config(&fake, ""))?;
    fake.push(delegate());
    fake.push(FakeReply::text("child done"));
    fake.push(FakeReply::text("parent done"));
    let out = root.run(bin(), &["agent", "-a", "main", "-m", "delegate the fetch"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let tools = child_tools(&fake)?;
    assert!(tools.iter().any(|t| t == "file_read"), "{tools:?}");
    assert!(!tools.iter().any(|t| t == "http_request"), "{tools:?}");
    Ok(())
}
