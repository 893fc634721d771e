//! Shared skill bundles (STATE-4, issue 23 §5): the selected skills are listed in the agent's
//! prompt (a changed bundle by the next turn), `skill_read` reads a bundle's files and nothing
//! outside it, no agent can write a bundle (file_write and the shell both refused), and
//! `warren skills list|show` show them.

use crate::common::bin;

use serde_json::{Value, json};
use warren_testkit::fake_llm::{FakeCall, FakeOpenAi, FakeReply};
use warren_testkit::{TempRoot, text};

type R = Result<(), Box<dyn std::error::Error>>;

const SKILL: &str = "---\nname: pdf-tools\ndescription: Extract text and tables from PDF files\n---\n# PDF tools\nRun `pdftotext -layout IN OUT` and read OUT.\n";

fn setup(fake: &FakeOpenAi) -> Result<TempRoot, Box<dyn std::error::Error>> {
    let root = TempRoot::new()?;
    root.write_config(&format!(
        r#"
[agents.main]
provider = "fake"
model = "m"
risk_profile = "hands"
skills = ["pdf"]

[agents.other]
provider = "fake"
model = "m"

[risk_profiles.hands]
autonomy = "full"
allowed_commands = ["touch", "cp", "echo", "sh", "python3"]

[agents.loose]
provider = "fake"
model = "m"
risk_profile = "loose"

[risk_profiles.loose]
autonomy = "full"
allowed_commands = ["python3"]
sandbox = "noop"
unrestricted = true

{provider}
"#,
        provider = fake.provider_toml("fake", "sk-skills-test")
    ))?;
    let bundle = root.path().join("shared/skills/pdf");
    std::fs::create_dir_all(bundle.join("scripts"))?;
    std::fs::write(bundle.join("SKILL.md"), SKILL)?;
    std::fs::write(bundle.join("scripts/run.md"), "step one\n")?;
    let other = root.path().join("shared/skills/git");
    std::fs::create_dir_all(&other)?;
    std::fs::write(
        other.join("SKILL.md"),
        "---\nname: git-helper\ndescription: Git tricks\n---\n",
    )?;
    Ok(root)
}

fn system(request: &Value) -> String {
    request["messages"][0]["content"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

fn tool_results(request: &Value) -> String {
    request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

fn agent(root: &TempRoot, alias: &str) -> R {
    let out = root.run(bin(), &["agent", "-a", alias, "-m", "go"])?;
    assert!(out.status.success(), "{}", text(&out).1);
    Ok(())
}

#[test]
fn selected_skills_are_in_the_prompt_and_read_with_skill_read_state4() -> R {
    let fake = FakeOpenAi::start()?;
    let root = setup(&fake)?;
    fake.push(FakeReply::calls(
        "",
        vec![
            FakeCall::new("1", "skill_read", json!({"bundle": "pdf"})),
            FakeCall::new(
                "2",
                "skill_read",
                json!({"bundle": "pdf", "path": "scripts/run.md"}),
            ),
            FakeCall::new(
                "3",
                "skill_read",
                json!({"bundle": "pdf", "path": "../git/SKILL.md"}),
            ),
            FakeCall::new("4", "skill_read", json!({"bundle": "git"})),
        ],
    ));
    fake.push(FakeReply::text("read"));
    agent(&root, "main")?;
    let reqs = fake.requests();
    let prompt = system(&reqs[0].body);
    assert!(
        prompt.contains("pdf-tools") && prompt.contains("Extract text and tables from PDF files"),
        "{prompt}"
    );
    assert!(
        !prompt.contains("git-helper"),
        "an unselected bundle is not listed"
    );
    let results = tool_results(&reqs[1].body);
    assert!(results.contains("pdftotext -layout"), "{results}");
    assert!(results.contains("step one"), "{results}");
    assert!(results.contains("must stay inside the bundle"), "{results}");
    assert!(results.contains("'git' is not selected"), "{results}");

    // A changed bundle is seen by the next turn; an agent without skills has no skill_read.
    std::fs::write(
        root.path().join("shared/skills/pdf/SKILL.md"),
        SKILL.replace("Extract text and tables", "Split and merge"),
    )?;
    fake.push(FakeReply::text("again"));
    agent(&root, "main")?;
    let reqs = fake.requests();
    assert!(system(&reqs[2].body).contains("Split and merge"));
    fake.push(FakeReply::text("other"));
    agent(&root, "other")?;
    let reqs = fake.requests();
    let tools = reqs[3].body["tools"].to_string();
    assert!(!tools.contains("skill_read") && !system(&reqs[3].body).contains("pdf-tools"));
    Ok(())
}

/// No agent can write a bundle: `file_write` on the bundle's path and the shell's `touch` are
/// refused by the policy (the install root), and an interpreter that writes the path from its
/// code finds no `shared/` in the sandbox. The file keeps its text.
#[test]
fn a_write_into_a_skill_bundle_is_refused_for_file_write_and_shell_state4() -> R {
    let fake = FakeOpenAi::start()?;
    let root = setup(&fake)?;
    let target = root.path().join("shared/skills/pdf/SKILL.md");
    let path = target.to_string_lossy().to_string();
    fake.push(FakeReply::calls(
        "",
        vec![
            FakeCall::new("w", "file_write", json!({"path": path, "content": "pwned"})),
            FakeCall::new("s", "shell", json!({"command": format!("sh -c 'echo pwned > {path}'")})),
            FakeCall::new(
                "t",
                "shell",
                json!({"command": format!("touch {}", root.path().join("shared/skills/pdf/new.md").display())}),
            ),
        ],
    ));
    fake.push(FakeReply::text("tried"));
    agent(&root, "main")?;
    assert_eq!(std::fs::read_to_string(&target)?, SKILL);
    assert!(!root.path().join("shared/skills/pdf/new.md").exists());
    let results = tool_results(&fake.requests()[1].body);
    assert!(results.contains("permission denied"), "{results}");

    // Past the command policy (an interpreter writing the path from inside its code): the
    // sandbox has no shared/ at all. Without the sandbox (noop) the same call writes the file,
    // so the probe is live and the refusal is the sandbox's.
    let new_file = root.path().join("shared/skills/pdf/new.md");
    let code = format!("open('{}', 'w').write('pwned')\n", new_file.display());
    for alias in ["main", "loose"] {
        std::fs::create_dir_all(root.path().join(format!("agents/{alias}/workspace")))?;
        std::fs::write(
            root.path().join(format!("agents/{alias}/workspace/w.py")),
            &code,
        )?;
    }
    let probe = |id: &str| {
        FakeReply::calls(
            "",
            vec![FakeCall::new(
                id,
                "shell",
                json!({"command": "python3 w.py"}),
            )],
        )
    };
    fake.push(probe("p1"));
    fake.push(FakeReply::text("tried"));
    agent(&root, "main")?;
    let results = tool_results(&fake.requests()[3].body);
    assert!(results.contains("No such file or directory"), "{results}");
    assert!(!new_file.exists());
    fake.push(probe("p2"));
    fake.push(FakeReply::text("tried"));
    agent(&root, "loose")?;
    assert_eq!(
        std::fs::read_to_string(&new_file).unwrap_or_default(),
        "pwned",
        "{}",
        tool_results(&fake.requests()[5].body)
    );
    Ok(())
}

#[test]
fn skills_list_and_show() -> R {
    let fake = FakeOpenAi::start()?;
    let root = setup(&fake)?;
    let out = root.run(bin(), &["skills", "list"])?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("pdf  pdf-tools  Extract text and tables from PDF files  (agents: main)"),
        "{stdout}"
    );
    assert!(stdout.contains("git  git-helper  Git tricks"), "{stdout}");
    let out = root.run(bin(), &["skills", "show", "pdf"])?;
    let (stdout, _) = text(&out);
    assert!(
        stdout.contains("SKILL.md, scripts/run.md") && stdout.contains("pdftotext"),
        "{stdout}"
    );
    let out = root.run(bin(), &["skills", "show", "nope"])?;
    assert!(!out.status.success());
    assert!(
        text(&out).1.contains("no skill bundle 'nope'"),
        "{}",
        text(&out).1
    );
    Ok(())
}
