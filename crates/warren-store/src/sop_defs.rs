//! SOP definition files (`<install>/shared/sops/<name>.toml`): loading them, checking them
//! against the running config, rendering their templates, and the agent rename that rewrites
//! the files naming the agent.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use warren_config::InstallRoot;
use warren_config::atomic::{self, AtomicWriteError, CrashPoints};
use warren_config::schema::sop::{self, DefProblem, SopDef, SopNameError};
use warren_core::AgentAlias;

/// Crash points of a definition file's atomic rewrite (an agent rename).
const SAVE_POINTS: CrashPoints = CrashPoints {
    after_temp_write: "sop-def-save-after-temp-write",
    after_temp_fsync: "sop-def-save-after-temp-fsync",
    after_rename: "sop-def-save-after-rename",
    after_dir_sync: "sop-def-save-after-dir-sync",
    dir_sync_error: "sop-def-save-dir-sync-error",
};

/// Why a definition cannot be found, or the files naming an agent cannot be rewritten; each
/// names the SOP or the file.
#[derive(Debug, thiserror::Error)]
pub enum SopDefError {
    #[error(transparent)]
    Name(#[from] SopNameError),
    #[error("no SOP '{name}' ({} does not exist; see `warren sop list`)", path.display())]
    Missing { name: String, path: PathBuf },
    /// The file's problems (each names the file and the key), joined by `; `.
    #[error("{}", problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid { problems: Vec<DefProblem> },
    #[error("{}: cannot read: {cause}", path.display())]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{}: {cause}", path.display())]
    Parse {
        path: PathBuf,
        cause: toml_edit::TomlError,
    },
    #[error("{}: {cause}", path.display())]
    Write {
        path: PathBuf,
        cause: AtomicWriteError,
    },
}

/// `<install>/shared/sops`.
pub fn dir(root: &InstallRoot) -> PathBuf {
    root.shared_dir().join("sops")
}

/// One loaded definition.
#[derive(Debug, Clone)]
pub struct Definition {
    pub name: String,
    pub path: PathBuf,
    pub def: SopDef,
}

/// Every definition file: the valid ones by name, and the problems of the others.
#[derive(Debug, Default)]
pub struct Loaded {
    pub defs: BTreeMap<String, Definition>,
    pub problems: Vec<DefProblem>,
}

/// Reads `shared/sops/*.toml`, checking each against `config` (its agent exists). A missing
/// directory is no SOPs.
pub fn load(root: &InstallRoot, config: &warren_config::Config) -> Loaded {
    let mut out = Loaded::default();
    let dir = dir(root);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return out,
        Err(e) => {
            out.problems.push(DefProblem {
                file: dir.display().to_string(),
                key: String::new(),
                message: format!("cannot read the directory: {e}"),
            });
            return out;
        }
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    paths.sort();
    for path in paths {
        match load_file(&path, config) {
            Ok(d) => {
                out.defs.insert(d.name.clone(), d);
            }
            Err(problems) => out.problems.extend(problems),
        }
    }
    out
}

/// One definition file, checked.
pub fn load_file(
    path: &Path,
    config: &warren_config::Config,
) -> Result<Definition, Vec<DefProblem>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        vec![DefProblem {
            file: path.display().to_string(),
            key: String::new(),
            message: format!("cannot read: {e}"),
        }]
    })?;
    let def = sop::parse_definition(path, &text)?;
    sop::check_agent(path, &def, config).map_err(|p| vec![p])?;
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_string();
    Ok(Definition {
        name,
        path: path.to_path_buf(),
        def,
    })
}

/// The definition `name`, or why it cannot run.
pub fn find(
    root: &InstallRoot,
    config: &warren_config::Config,
    name: &str,
) -> Result<Definition, SopDefError> {
    sop::validate_name(name)?;
    let path = dir(root).join(format!("{name}.toml"));
    if !path.exists() {
        return Err(SopDefError::Missing {
            name: name.into(),
            path,
        });
    }
    load_file(&path, config).map_err(|problems| SopDefError::Invalid { problems })
}

/// The SOPs whose definition names `agent` (file names; a file that does not parse is read for
/// its `agent` key alone, so a broken file still counts as a reference).
pub fn naming_agent(root: &InstallRoot, agent: &AgentAlias) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir(root)) else {
        return Vec::new();
    };
    let mut out: Vec<(String, PathBuf)> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .filter(|p| {
            std::fs::read_to_string(p)
                .ok()
                .and_then(|t| t.parse::<toml_edit::DocumentMut>().ok())
                .is_some_and(|d| d.get("agent").and_then(|a| a.as_str()) == Some(agent.as_str()))
        })
        .map(|p| {
            (
                p.file_stem()
                    .and_then(|s| s.to_str())
                    .unwrap_or_default()
                    .to_string(),
                p,
            )
        })
        .collect();
    out.sort();
    out
}

/// Rewrites `agent = "<from>"` to `<to>` in every definition naming `from` (each file replaced
/// atomically, comments and layout kept). Returns the SOP names rewritten.
pub fn rename_agent(
    root: &InstallRoot,
    from: &AgentAlias,
    to: &AgentAlias,
) -> Result<Vec<String>, SopDefError> {
    let mut done = Vec::new();
    for (name, path) in naming_agent(root, from) {
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(cause) => return Err(SopDefError::Read { path, cause }),
        };
        let mut doc = match text.parse::<toml_edit::DocumentMut>() {
            Ok(d) => d,
            Err(cause) => return Err(SopDefError::Parse { path, cause }),
        };
        doc["agent"] = toml_edit::value(to.as_str());
        if let Err(cause) =
            atomic::write_durable_no_backup(&path, doc.to_string().as_bytes(), 0o600, SAVE_POINTS)
        {
            return Err(SopDefError::Write { path, cause });
        }
        done.push(name);
    }
    Ok(done)
}

/// Renders `{{input}}`, `{{input.<field>[.<field>...]}}` and `{{steps.<id>.output}}` (a step
/// that did not run renders empty).
pub fn render(
    template: &str,
    input: &serde_json::Value,
    outputs: &BTreeMap<String, String>,
) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[start..]);
            return out;
        };
        let reference = after[..end].trim();
        out.push_str(&resolve(reference, input, outputs));
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

fn resolve(
    reference: &str,
    input: &serde_json::Value,
    outputs: &BTreeMap<String, String>,
) -> String {
    if reference == "input" {
        return text_of(input);
    }
    if let Some(path) = reference.strip_prefix("input.") {
        let mut value = input;
        for field in path.split('.') {
            match value.get(field) {
                Some(v) => value = v,
                None => return String::new(),
            }
        }
        return text_of(value);
    }
    if let Some(id) = reference
        .strip_prefix("steps.")
        .and_then(|r| r.strip_suffix(".output"))
    {
        return outputs.get(id).cloned().unwrap_or_default();
    }
    String::new()
}

fn text_of(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A tool step's `args` rendered into JSON (templates in every string).
pub fn render_args(
    args: &BTreeMap<String, toml::Value>,
    input: &serde_json::Value,
    outputs: &BTreeMap<String, String>,
) -> serde_json::Value {
    fn walk(
        v: &toml::Value,
        input: &serde_json::Value,
        outputs: &BTreeMap<String, String>,
    ) -> serde_json::Value {
        match v {
            toml::Value::String(s) => serde_json::Value::String(render(s, input, outputs)),
            toml::Value::Integer(i) => serde_json::json!(i),
            toml::Value::Float(f) => serde_json::json!(f),
            toml::Value::Boolean(b) => serde_json::json!(b),
            toml::Value::Datetime(d) => serde_json::Value::String(d.to_string()),
            toml::Value::Array(a) => a.iter().map(|x| walk(x, input, outputs)).collect(),
            toml::Value::Table(t) => serde_json::Value::Object(
                t.iter()
                    .map(|(k, x)| (k.clone(), walk(x, input, outputs)))
                    .collect(),
            ),
        }
    }
    serde_json::Value::Object(
        args.iter()
            .map(|(k, v)| (k.clone(), walk(v, input, outputs)))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_read_input_fields_and_earlier_outputs() {
        let input = serde_json::json!({"ticket": {"id": 7}, "title": "disk full"});
        let mut outputs = BTreeMap::new();
        outputs.insert("fetch".to_string(), "summary".to_string());
        assert_eq!(
            render(
                "#{{ input.ticket.id }} {{input.title}}: {{steps.fetch.output}}{{steps.none.output}}",
                &input,
                &outputs
            ),
            "#7 disk full: summary"
        );
    }
}
