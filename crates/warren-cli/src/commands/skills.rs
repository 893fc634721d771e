//! `warren skills list|show` (STATE-4, issue 23 §5): the shared skill bundles under
//! `<install>/shared/skills/`, and which agents select each.

use std::process::ExitCode;

use warren_config::InstallRoot;

/// `warren skills ...`
#[derive(Debug, clap::Subcommand)]
pub enum SkillsCommand {
    /// Every bundle under shared/skills/: name, description and the agents that select it
    List,
    /// One bundle: its SKILL.md and its files
    Show {
        #[arg(value_name = "BUNDLE")]
        bundle: String,
    },
}

pub fn run(root: &InstallRoot, cmd: SkillsCommand, json: bool) -> anyhow::Result<ExitCode> {
    let store = super::load_checked(root)?;
    let config = store.snapshot().config().clone();
    let users = |bundle: &str| -> Vec<String> {
        config
            .agents()
            .filter(|(_, a)| a.skills.iter().any(|s| s == bundle))
            .map(|(alias, _)| alias.to_string())
            .collect()
    };
    match cmd {
        SkillsCommand::List => {
            let skills = warren_runtime::skills::list(root)?;
            if json {
                let rows: Vec<_> = skills
                    .iter()
                    .map(|s| serde_json::json!({"bundle": s.bundle, "name": s.name, "description": s.description, "problem": s.problem, "agents": users(&s.bundle)}))
                    .collect();
                super::print_json(&serde_json::Value::Array(rows))?;
            } else if skills.is_empty() {
                println!("no skill bundles in {}", root.skills_dir().display());
            } else {
                for s in &skills {
                    let agents = users(&s.bundle);
                    println!(
                        "{}  {}  {}{}",
                        s.bundle,
                        s.name,
                        s.problem.as_deref().unwrap_or(&s.description),
                        if agents.is_empty() {
                            String::new()
                        } else {
                            format!("  (agents: {})", agents.join(", "))
                        }
                    );
                }
            }
        }
        SkillsCommand::Show { bundle } => {
            let (skill, text, files) = warren_runtime::skills::show(root, &bundle)?;
            if json {
                super::print_json(
                    &serde_json::json!({"bundle": skill.bundle, "name": skill.name, "description": skill.description, "files": files, "agents": users(&bundle), "skill_md": text}),
                )?;
            } else {
                println!(
                    "{} ({})\n{}\nfiles: {}\n",
                    skill.name,
                    skill.bundle,
                    skill.description,
                    files.join(", ")
                );
                print!("{text}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
