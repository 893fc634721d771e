//! SOPs (standard operating procedures, STATE-10): the `[sop]` engine settings and the
//! definition files `<install>/shared/sops/<name>.toml`.
//!
//! A definition names an agent, a trigger (manual, a cron expression, the webhook route
//! `POST /api/sops/<name>/webhook`, or an MQTT topic on a broker URL) and ordered steps:
//!
//! * `turn`: one agent turn with a prompt template;
//! * `tool`: one call of a tool of the agent's kit, its `args` a table of templates;
//! * `condition`: a test of the previous step's output (`contains`, `equals` or `regex`)
//!   choosing `continue`, `stop` or `goto:<later step id>` for a match (`on_match`) and a miss
//!   (`on_miss`);
//! * `approval`: the operator approves or denies (CLI, API); no answer within `timeout_secs`
//!   is a denial; a denial stops the run.
//!
//! Templates read `{{input.<field>}}` (the run's JSON input; `{{input}}` is all of it) and
//! `{{steps.<id>.output}}` (an earlier step's output). [`parse_definition`] checks everything it
//! can without the running config, naming the file and the key; [`check_agent`] adds the agent.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// `[sop]`: the engine's settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SopConfig {
    /// Run SOP triggers in the daemon (manual runs work either way).
    pub enabled: bool,
    /// Keep SOP runs in `data/sop/runs.db`; `false` (or a store that cannot open) keeps them in
    /// memory only, with a warning on every run.
    pub durable_runs: bool,
    /// Runs of all SOPs active at once (running or waiting for approval).
    pub max_concurrent_runs: u32,
    /// Finished runs kept per SOP (older ones are deleted with their steps and events).
    pub keep_finished_runs: u32,
    /// Approval gates without their own `timeout_secs` wait this long, then deny.
    pub approval_timeout_secs: u64,
    /// A claimed run's lease: another process may take over a run whose owner is gone or whose
    /// lease ran out this long ago.
    pub lease_secs: u64,
}

impl Default for SopConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            durable_runs: true,
            max_concurrent_runs: 8,
            keep_finished_runs: 200,
            approval_timeout_secs: 3600,
            lease_secs: 30,
        }
    }
}

/// One definition file, as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SopDef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub agent: String,
    #[serde(default)]
    pub trigger: Trigger,
    /// Runs of this SOP active at once.
    #[serde(default = "one")]
    pub max_concurrent: u32,
    pub steps: Vec<Step>,
}

fn one() -> u32 {
    1
}

/// What starts a run (besides `warren sop run`, which always works).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Trigger {
    #[default]
    Manual,
    Cron {
        cron: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tz: Option<String>,
    },
    /// `POST /api/sops/<name>/webhook` with a bearer token; the JSON body is the input.
    Webhook,
    /// Each message on `topic` at the broker `url` (`mqtt://host:port`) starts a run; its
    /// payload is the input (`{{input.payload}}`, and its fields when it is a JSON object).
    Mqtt { url: String, topic: String },
}

impl Trigger {
    pub fn kind(&self) -> &'static str {
        match self {
            Trigger::Manual => "manual",
            Trigger::Cron { .. } => "cron",
            Trigger::Webhook => "webhook",
            Trigger::Mqtt { .. } => "mqtt",
        }
    }
}

/// One step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub id: String,
    #[serde(flatten)]
    pub kind: StepKind,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum StepKind {
    Turn {
        prompt: String,
    },
    Tool {
        tool: String,
        #[serde(default)]
        args: BTreeMap<String, toml::Value>,
    },
    Condition {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        contains: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        equals: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        regex: Option<String>,
        #[serde(default = "continue_")]
        on_match: String,
        #[serde(default = "stop")]
        on_miss: String,
    },
    Approval {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_secs: Option<u64>,
    },
}

fn continue_() -> String {
    "continue".into()
}

fn stop() -> String {
    "stop".into()
}

impl StepKind {
    pub fn name(&self) -> &'static str {
        match self {
            StepKind::Turn { .. } => "turn",
            StepKind::Tool { .. } => "tool",
            StepKind::Condition { .. } => "condition",
            StepKind::Approval { .. } => "approval",
        }
    }
}

/// Where a condition sends the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Branch {
    Continue,
    Stop,
    Goto(String),
}

impl Branch {
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "continue" => Ok(Branch::Continue),
            "stop" => Ok(Branch::Stop),
            other => match other.strip_prefix("goto:") {
                Some(id) if !id.is_empty() => Ok(Branch::Goto(id.to_string())),
                _ => Err(format!(
                    "'{other}' is not a branch (use \"continue\", \"stop\" or \"goto:<step id>\")"
                )),
            },
        }
    }
}

/// A problem of a definition file: the file, the key and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DefProblem {
    pub file: String,
    pub key: String,
    pub message: String,
}

impl std::fmt::Display for DefProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(f, "{}: {}: {}", self.file, self.key, self.message)
        }
    }
}

/// SOP names: 1–64 of `[A-Za-z0-9_-]` (file names, URLs, session keys).
pub fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(format!(
            "SOP name '{name}' must be 1 to 64 letters, digits, '-' or '_'"
        ));
    }
    Ok(())
}

/// Parses and checks the definition `text` of `file` (named `<name>.toml`). Every problem
/// names the file and the key.
pub fn parse_definition(file: &Path, text: &str) -> Result<SopDef, Vec<DefProblem>> {
    let shown = file.display().to_string();
    let problem = |key: String, message: String| DefProblem {
        file: shown.clone(),
        key,
        message,
    };
    let name = file
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    let mut out = Vec::new();
    if let Err(e) = validate_name(name) {
        out.push(problem(String::new(), e));
    }
    let def: SopDef = match toml::from_str(text) {
        Ok(d) => d,
        Err(e) => {
            let key = e
                .span()
                .map(|s| {
                    let line = text[..s.start.min(text.len())].lines().count().max(1);
                    format!("line {line}")
                })
                .unwrap_or_default();
            out.push(problem(key, e.message().to_string()));
            return Err(out);
        }
    };
    if def.steps.is_empty() {
        out.push(problem(
            "steps".into(),
            "an SOP needs at least one step".into(),
        ));
    }
    if def.max_concurrent == 0 {
        out.push(problem(
            "max_concurrent".into(),
            "must be at least 1".into(),
        ));
    }
    match &def.trigger {
        Trigger::Cron { cron, tz } => {
            if let Err(e) = crate::schema::cron::Schedule::cron(cron, tz.as_deref()) {
                out.push(problem("trigger.cron".into(), e));
            }
        }
        Trigger::Mqtt { url, topic } => {
            if let Err(e) = mqtt_broker(url) {
                out.push(problem("trigger.url".into(), e));
            }
            if topic.is_empty() {
                out.push(problem("trigger.topic".into(), "must not be empty".into()));
            }
        }
        Trigger::Manual | Trigger::Webhook => {}
    }
    let ids: Vec<&str> = def.steps.iter().map(|s| s.id.as_str()).collect();
    for (i, step) in def.steps.iter().enumerate() {
        let at = |k: &str| {
            if k.is_empty() {
                format!("steps[{i}]")
            } else {
                format!("steps[{i}].{k}")
            }
        };
        if let Err(e) = validate_name(&step.id) {
            out.push(problem(at("id"), e.replace("SOP name", "step id")));
        }
        if ids[..i].contains(&step.id.as_str()) {
            out.push(problem(
                at("id"),
                format!("step id '{}' is used twice", step.id),
            ));
        }
        let earlier = &ids[..i];
        let mut templates: Vec<(String, String)> = Vec::new();
        match &step.kind {
            StepKind::Turn { prompt } => templates.push((at("prompt"), prompt.clone())),
            StepKind::Tool { tool, args } => {
                if tool.is_empty() {
                    out.push(problem(at("tool"), "names no tool".into()));
                }
                for (k, v) in args {
                    collect_templates(&at(&format!("args.{k}")), v, &mut templates);
                }
            }
            StepKind::Condition {
                contains,
                equals,
                regex,
                on_match,
                on_miss,
            } => {
                let set = [contains.is_some(), equals.is_some(), regex.is_some()]
                    .iter()
                    .filter(|b| **b)
                    .count();
                if set != 1 {
                    out.push(problem(
                        at(""),
                        "a condition sets exactly one of contains, equals or regex".into(),
                    ));
                }
                if i == 0 {
                    out.push(problem(
                        at(""),
                        "a condition tests the previous step's output; it cannot be first".into(),
                    ));
                }
                if let Some(r) = regex
                    && let Err(e) = regex::Regex::new(r)
                {
                    out.push(problem(
                        at("regex"),
                        format!("not a regular expression: {e}"),
                    ));
                }
                for (key, text) in [("on_match", on_match), ("on_miss", on_miss)] {
                    match Branch::parse(text) {
                        Ok(Branch::Goto(id)) => {
                            if !ids[i + 1..].contains(&id.as_str()) {
                                out.push(problem(
                                    at(key),
                                    format!(
                                        "goto:{id} names no later step (a run only moves forward)"
                                    ),
                                ));
                            }
                        }
                        Ok(_) => {}
                        Err(e) => out.push(problem(at(key), e)),
                    }
                }
            }
            StepKind::Approval {
                message,
                timeout_secs,
            } => {
                if let Some(m) = message {
                    templates.push((at("message"), m.clone()));
                }
                if *timeout_secs == Some(0) {
                    out.push(problem(at("timeout_secs"), "must be at least 1".into()));
                }
            }
        }
        for (key, text) in templates {
            for reference in references(&text) {
                if let Err(e) = check_reference(&reference, earlier) {
                    out.push(problem(key.clone(), e));
                }
            }
        }
    }
    if out.is_empty() { Ok(def) } else { Err(out) }
}

/// The agent a definition names exists in `config`.
pub fn check_agent(file: &Path, def: &SopDef, config: &crate::Config) -> Result<(), DefProblem> {
    if config
        .agents
        .keys()
        .any(|k| k.as_str() == def.agent.as_str())
    {
        return Ok(());
    }
    Err(DefProblem {
        file: file.display().to_string(),
        key: "agent".into(),
        message: format!("agent '{}' does not exist in config.toml", def.agent),
    })
}

fn collect_templates(key: &str, value: &toml::Value, out: &mut Vec<(String, String)>) {
    match value {
        toml::Value::String(s) => out.push((key.to_string(), s.clone())),
        toml::Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                collect_templates(&format!("{key}[{i}]"), v, out);
            }
        }
        toml::Value::Table(t) => {
            for (k, v) in t {
                collect_templates(&format!("{key}.{k}"), v, out);
            }
        }
        _ => {}
    }
}

/// The `{{...}}` references of a template, trimmed.
pub fn references(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        let after = &rest[start + 2..];
        match after.find("}}") {
            Some(end) => {
                out.push(after[..end].trim().to_string());
                rest = &after[end + 2..];
            }
            None => break,
        }
    }
    out
}

fn check_reference(reference: &str, earlier: &[&str]) -> Result<(), String> {
    if reference == "input" || reference.starts_with("input.") {
        return Ok(());
    }
    if let Some(rest) = reference.strip_prefix("steps.")
        && let Some(id) = rest.strip_suffix(".output")
    {
        if earlier.contains(&id) {
            return Ok(());
        }
        return Err(format!(
            "{{{{{reference}}}}} names no earlier step '{id}' (outputs only flow forward)"
        ));
    }
    Err(format!(
        "{{{{{reference}}}}} is not a known template (use {{{{input.<field>}}}} or {{{{steps.<id>.output}}}})"
    ))
}

/// `mqtt://host[:port]` → (host, port).
pub fn mqtt_broker(url: &str) -> Result<(String, u16), String> {
    let rest = url
        .strip_prefix("mqtt://")
        .ok_or_else(|| format!("'{url}' is not an mqtt:// URL (e.g. mqtt://127.0.0.1:1883)"))?;
    let rest = rest.trim_end_matches('/');
    if rest.contains('@') {
        return Err("credentials in the broker URL are not accepted".into());
    }
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) => (
            h.to_string(),
            p.parse::<u16>()
                .map_err(|_| format!("'{p}' in '{url}' is not a port"))?,
        ),
        None => (rest.to_string(), 1883),
    };
    if host.is_empty() {
        return Err(format!("'{url}' names no host"));
    }
    Ok((host, port))
}

impl crate::Config {
    /// `[sop]`, or its defaults when the table is absent.
    pub fn sop_settings(&self) -> SopConfig {
        self.sop.clone().unwrap_or_default()
    }
}
