//! Shared skill bundles (STATE-4, issue 23 §5): `<install>/shared/skills/<bundle>/` holds a
//! `SKILL.md` (a front matter with `name:` and `description:`, then the instructions) and any
//! other files. `[agents.<alias>] skills = ["bundle", ...]` selects bundles; the agent's
//! prompt lists each selected skill's name and description ([`prompt_section`], read at every
//! turn, so a changed bundle is seen by the next turn), and the agent reads a bundle's files
//! with the read-only `skill_read` tool ([`SkillRead`]).
//!
//! No agent can write a bundle: `shared/` is in no agent's grants (file tools refuse it), it
//! is not bound into any sandbox (the shell does not see it), and `skill_read` only reads —
//! through confined handles (`RESOLVE_BENEATH`, no symbolic links, one hard link), so a model-
//! supplied path cannot leave the bundle.

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::json;
use warren_config::{Config, InstallRoot};
use warren_core::AgentAlias;
use warren_security::confined_dir::{ConfinedDir, FileKind};
use warren_tools::{BoxFuture, RiskClass, Tool, ToolError, ToolOutput};

/// The name of the read-only tool.
pub const SKILL_READ: &str = "skill_read";
/// The file every bundle has.
pub const SKILL_FILE: &str = "SKILL.md";
/// Largest file `skill_read` returns, in bytes.
pub const MAX_SKILL_FILE: u64 = 256 * 1024;
/// Largest description put in the prompt, in characters.
const MAX_DESCRIPTION: usize = 500;

/// One bundle as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skill {
    /// The bundle's directory name (what `skills = [...]` names).
    pub bundle: String,
    pub name: String,
    pub description: String,
    /// Why the bundle cannot be used, when it cannot (missing or unreadable `SKILL.md`).
    pub problem: Option<String>,
}

/// Why a bundle cannot be shown.
#[derive(Debug, thiserror::Error)]
pub enum SkillError {
    #[error("no skill bundle '{bundle}' in {dir} (see `warren skills list`)")]
    Unknown { bundle: String, dir: PathBuf },
    #[error("{0}")]
    Read(String),
}

/// The bundle's `SKILL.md` read (name, description, whole text).
fn read_skill(dir: &Path, bundle: &str) -> Result<(Skill, String), SkillError> {
    let unknown = || SkillError::Unknown {
        bundle: bundle.to_string(),
        dir: dir.to_path_buf(),
    };
    if !warren_config::schema::mcp::valid_bundle_name(bundle) {
        return Err(unknown());
    }
    let root = ConfinedDir::open_root(dir)
        .map_err(|e| SkillError::Read(e.to_string()))?
        .ok_or_else(unknown)?;
    let bundle_dir = root
        .open_dir(bundle, false)
        .map_err(|e| SkillError::Read(e.to_string()))?
        .ok_or_else(unknown)?;
    let text = bundle_dir
        .read_to_string(SKILL_FILE, MAX_SKILL_FILE)
        .map_err(|e| SkillError::Read(e.to_string()))?
        .ok_or_else(|| {
            SkillError::Read(format!(
                "skill bundle '{bundle}' has no {SKILL_FILE} ({})",
                dir.join(bundle).display()
            ))
        })?;
    let (name, description) = front_matter(&text);
    Ok((
        Skill {
            bundle: bundle.to_string(),
            name: name.unwrap_or_else(|| bundle.to_string()),
            description: description.unwrap_or_default(),
            problem: None,
        },
        text,
    ))
}

/// `name:` and `description:` of a `---` front matter (else the first text line describes).
fn front_matter(text: &str) -> (Option<String>, Option<String>) {
    let mut lines = text.lines();
    let (mut name, mut description) = (None, None);
    if lines.next().map(str::trim) == Some("---") {
        for line in lines.by_ref() {
            let line = line.trim();
            if line == "---" {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                let v = v.trim().trim_matches('"').trim_matches('\'').to_string();
                match k.trim() {
                    "name" => name = Some(v),
                    "description" => description = Some(v),
                    _ => {}
                }
            }
        }
    } else {
        lines = text.lines();
    }
    if description.is_none() {
        description = lines
            .map(|l| l.trim().trim_start_matches('#').trim())
            .find(|l| !l.is_empty())
            .map(str::to_string);
    }
    let cap = |s: String| s.chars().take(MAX_DESCRIPTION).collect::<String>();
    (name.map(cap), description.map(cap))
}

/// Every bundle under `<install>/shared/skills/`, in name order.
pub fn list(root: &InstallRoot) -> Result<Vec<Skill>, SkillError> {
    let dir = root.skills_dir();
    let Some(handle) = ConfinedDir::open_root(&dir).map_err(|e| SkillError::Read(e.to_string()))?
    else {
        return Ok(Vec::new());
    };
    let mut names: Vec<String> = handle
        .entries()
        .map_err(|e| SkillError::Read(e.to_string()))?
        .into_iter()
        .filter(|(_, kind)| *kind == FileKind::Dir)
        .filter_map(|(name, _)| name.into_string().ok())
        .filter(|n| warren_config::schema::mcp::valid_bundle_name(n))
        .collect();
    names.sort();
    Ok(names
        .into_iter()
        .map(|bundle| match read_skill(&dir, &bundle) {
            Ok((skill, _)) => skill,
            Err(e) => Skill {
                name: bundle.clone(),
                bundle,
                description: String::new(),
                problem: Some(e.to_string()),
            },
        })
        .collect())
}

/// One bundle: its listing, the text of its `SKILL.md` and its files (relative paths).
pub fn show(root: &InstallRoot, bundle: &str) -> Result<(Skill, String, Vec<String>), SkillError> {
    let dir = root.skills_dir();
    let (skill, text) = read_skill(&dir, bundle)?;
    let mut files = Vec::new();
    if let Some(handle) = ConfinedDir::open_root(&dir.join(bundle)).ok().flatten() {
        walk(&handle, "", &mut files, 0);
    }
    files.sort();
    Ok((skill, text, files))
}

fn walk(dir: &ConfinedDir, prefix: &str, out: &mut Vec<String>, depth: usize) {
    if depth > 8 || out.len() > 1000 {
        return;
    }
    for (name, kind) in dir.entries().unwrap_or_default() {
        let Ok(name) = name.into_string() else {
            continue;
        };
        let rel = format!("{prefix}{name}");
        match kind {
            FileKind::File => out.push(rel),
            FileKind::Dir => {
                if let Ok(Some(sub)) = dir.open_dir(&name, false) {
                    walk(&sub, &format!("{rel}/"), out, depth + 1);
                }
            }
            _ => {}
        }
    }
}

/// The prompt's list of `alias`'s skills (empty when it selects none), read now.
pub fn prompt_section(root: &InstallRoot, bundles: &[String]) -> String {
    if bundles.is_empty() {
        return String::new();
    }
    let dir = root.skills_dir();
    let mut out = String::from(
        "\n## Skills\nThese skills are available; read a skill's SKILL.md (and its other files) with the skill_read tool before using it.\n",
    );
    for bundle in bundles {
        match read_skill(&dir, bundle) {
            Ok((skill, _)) => out.push_str(&format!(
                "- {} (bundle \"{}\"): {}\n",
                skill.name, skill.bundle, skill.description
            )),
            Err(e) => {
                tracing::warn!(bundle = bundle.as_str(), "skill not listed: {e}");
            }
        }
    }
    out
}

/// `skill_read`: reads a file of one of the agent's selected bundles.
#[derive(Clone)]
pub struct SkillRead {
    dir: PathBuf,
    bundles: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    bundle: String,
    path: Option<String>,
}

impl SkillRead {
    /// The tool of `alias` when it selects skills.
    pub fn for_agent(config: &Config, root: &InstallRoot, alias: &AgentAlias) -> Option<Self> {
        let bundles = config.agent(alias)?.skills.clone();
        (!bundles.is_empty()).then(|| Self {
            dir: root.skills_dir(),
            bundles,
        })
    }

    fn read(&self, args: serde_json::Value) -> Result<ToolOutput, ToolError> {
        let a: Args =
            serde_json::from_value(args).map_err(|e| ToolError::InvalidArguments(e.to_string()))?;
        if !self.bundles.contains(&a.bundle) {
            return Err(ToolError::Denied(format!(
                "skill bundle '{}' is not selected for this agent (selected: {})",
                a.bundle,
                self.bundles.join(", ")
            )));
        }
        let rel = a.path.unwrap_or_else(|| SKILL_FILE.to_string());
        let path = Path::new(&rel);
        let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
        for c in path.components() {
            match c {
                Component::Normal(p) => parts.push(p),
                Component::CurDir => {}
                _ => {
                    return Err(ToolError::Denied(format!(
                        "path '{rel}' must stay inside the bundle (no '..', no absolute path)"
                    )));
                }
            }
        }
        let Some((leaf, parents)) = parts.split_last() else {
            return Err(ToolError::InvalidArguments("path is empty".into()));
        };
        let failed = |e: warren_config::confined::DirError| ToolError::Failed(e.to_string());
        let missing =
            || ToolError::Failed(format!("no file '{rel}' in skill bundle '{}'", a.bundle));
        let root = ConfinedDir::open_root(&self.dir)
            .map_err(failed)?
            .ok_or_else(missing)?;
        let mut dir = root
            .open_dir(&a.bundle, false)
            .map_err(failed)?
            .ok_or_else(missing)?;
        for p in parents {
            dir = dir
                .open_dir(p, false)
                .map_err(failed)?
                .ok_or_else(missing)?;
        }
        let text = dir
            .read_to_string(leaf, MAX_SKILL_FILE)
            .map_err(failed)?
            .ok_or_else(missing)?;
        Ok(ToolOutput::json(
            json!({"bundle": a.bundle, "path": rel, "content": text}),
        ))
    }
}

impl Tool for SkillRead {
    fn name(&self) -> &str {
        SKILL_READ
    }
    fn description(&self) -> &str {
        "Read a file of one of your skill bundles (read-only). Without path, reads the bundle's SKILL.md."
    }
    fn parameters(&self) -> serde_json::Value {
        json!({"type": "object", "additionalProperties": false, "required": ["bundle"], "properties": {
            "bundle": {"type": "string", "enum": self.bundles},
            "path": {"type": "string", "description": "a file inside the bundle, e.g. SKILL.md or scripts/run.md"}
        }})
    }
    fn risk(&self) -> RiskClass {
        RiskClass::Read
    }
    fn execute(&self, args: serde_json::Value) -> BoxFuture<'_, Result<ToolOutput, ToolError>> {
        // A few small reads of operator-owned files through confined handles, off the workers.
        let me = self.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || me.read(args))
                .await
                .unwrap_or_else(|e| Err(ToolError::Failed(e.to_string())))
        })
    }
}
