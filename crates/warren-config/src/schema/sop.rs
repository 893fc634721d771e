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
    pub agent: warren_core::AgentAlias,
    #[serde(default)]
    pub trigger: TriggerDef,
    /// Runs of this SOP active at once.
    #[serde(default = "one")]
    pub max_concurrent: u32,
    pub steps: Vec<Step>,
}

fn one() -> u32 {
    1
}

/// `[trigger]` as written (flat keys; [`TriggerDef::view`] gives the checked form).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriggerDef {
    #[serde(default)]
    pub kind: TriggerKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TriggerKind {
    #[default]
    Manual,
    Cron,
    Webhook,
    Mqtt,
}

/// What starts a run (besides `warren sop run`, which always works).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    Manual,
    Cron {
        cron: String,
        tz: Option<String>,
    },
    /// `POST /api/sops/<name>/webhook` with a bearer token; the JSON body is the input.
    Webhook,
    /// Each message on `topic` at the broker `url` (`mqtt://host:port`) starts a run; its
    /// payload is the input (`{{input.payload}}`, and its fields when it is a JSON object).
    Mqtt {
        url: String,
        topic: String,
    },
}

impl TriggerDef {
    pub fn kind(&self) -> &'static str {
        match self.kind {
            TriggerKind::Manual => "manual",
            TriggerKind::Cron => "cron",
            TriggerKind::Webhook => "webhook",
            TriggerKind::Mqtt => "mqtt",
        }
    }

    /// The checked trigger (after [`parse_definition`], the keys its kind needs are set).
    pub fn view(&self) -> Trigger {
        match self.kind {
            TriggerKind::Manual => Trigger::Manual,
            TriggerKind::Webhook => Trigger::Webhook,
            TriggerKind::Cron => Trigger::Cron {
                cron: self.cron.clone().unwrap_or_default(),
                tz: self.tz.clone(),
            },
            TriggerKind::Mqtt => Trigger::Mqtt {
                url: self.url.clone().unwrap_or_default(),
                topic: self.topic.clone().unwrap_or_default(),
            },
        }
    }
}

/// One step as written: `id`, `kind` and the keys of that kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub id: String,
    pub kind: StepType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub args: BTreeMap<String, toml::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contains: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equals: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_match: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_miss: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepType {
    Turn,
    Tool,
    Condition,
    Approval,
}

impl StepType {
    pub fn name(self) -> &'static str {
        match self {
            StepType::Turn => "turn",
            StepType::Tool => "tool",
            StepType::Condition => "condition",
            StepType::Approval => "approval",
        }
    }
}

/// A step's checked form ([`Step::action`]).
#[derive(Debug, Clone, PartialEq)]
pub enum StepKind {
    Turn {
        prompt: String,
    },
    Tool {
        tool: String,
        args: BTreeMap<String, toml::Value>,
    },
    Condition {
        contains: Option<String>,
        equals: Option<String>,
        regex: Option<String>,
        on_match: String,
        on_miss: String,
    },
    Approval {
        message: Option<String>,
        timeout_secs: Option<u64>,
    },
}

impl Step {
    /// The step as its kind reads it (after [`parse_definition`], the keys it needs are set).
    pub fn action(&self) -> StepKind {
        match self.kind {
            StepType::Turn => StepKind::Turn {
                prompt: self.prompt.clone().unwrap_or_default(),
            },
            StepType::Tool => StepKind::Tool {
                tool: self.tool.clone().unwrap_or_default(),
                args: self.args.clone(),
            },
            StepType::Condition => StepKind::Condition {
                contains: self.contains.clone(),
                equals: self.equals.clone(),
                regex: self.regex.clone(),
                on_match: self.on_match.clone().unwrap_or_else(|| "continue".into()),
                on_miss: self.on_miss.clone().unwrap_or_else(|| "stop".into()),
            },
            StepType::Approval => StepKind::Approval {
                message: self.message.clone(),
                timeout_secs: self.timeout_secs,
            },
        }
    }

    /// Keys set that this step's kind does not take.
    fn stray_keys(&self) -> Vec<&'static str> {
        let allowed: &[&str] = match self.kind {
            StepType::Turn => &["prompt"],
            StepType::Tool => &["tool", "args"],
            StepType::Condition => &["contains", "equals", "regex", "on_match", "on_miss"],
            StepType::Approval => &["message", "timeout_secs"],
        };
        let set = [
            ("prompt", self.prompt.is_some()),
            ("tool", self.tool.is_some()),
            ("args", !self.args.is_empty()),
            ("contains", self.contains.is_some()),
            ("equals", self.equals.is_some()),
            ("regex", self.regex.is_some()),
            ("on_match", self.on_match.is_some()),
            ("on_miss", self.on_miss.is_some()),
            ("message", self.message.is_some()),
            ("timeout_secs", self.timeout_secs.is_some()),
        ];
        set.iter()
            .filter(|(k, on)| *on && !allowed.contains(k))
            .map(|(k, _)| *k)
            .collect()
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
    pub fn parse(text: &str) -> Result<Self, BranchError> {
        match text {
            "continue" => Ok(Branch::Continue),
            "stop" => Ok(Branch::Stop),
            other => match other.strip_prefix("goto:") {
                Some(id) if !id.is_empty() => Ok(Branch::Goto(id.to_string())),
                _ => Err(BranchError { text: other.into() }),
            },
        }
    }
}

/// A condition's `on_match` / `on_miss` that is not a branch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{text}' is not a branch (use \"continue\", \"stop\" or \"goto:<step id>\")")]
pub struct BranchError {
    pub text: String,
}

/// An SOP name or step id that is not 1–64 of `[A-Za-z0-9_-]`; `what` is `SOP name` or
/// `step id`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} '{name}' must be 1 to 64 letters, digits, '-' or '_'")]
pub struct SopNameError {
    pub what: &'static str,
    pub name: String,
}

/// A `{{...}}` template of a step that names nothing a run has at that step.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateRefError {
    #[error("{{{{{reference}}}}} names no earlier step '{id}' (outputs only flow forward)")]
    NoEarlierStep { reference: String, id: String },
    #[error(
        "{{{{{reference}}}}} is not a known template (use {{{{input.<field>}}}} or {{{{steps.<id>.output}}}})"
    )]
    Unknown { reference: String },
}

/// Why an MQTT trigger's `url` is not `mqtt://host[:port]` (credentials are never repeated).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MqttUrlError {
    #[error("'{url}' is not an mqtt:// URL (e.g. mqtt://127.0.0.1:1883)")]
    Scheme { url: String },
    #[error("credentials in the broker URL are not accepted")]
    Credentials,
    #[error("'{port}' in '{url}' is not a port")]
    Port { port: String, url: String },
    #[error("'{url}' names no host")]
    NoHost { url: String },
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
pub fn validate_name(name: &str) -> Result<(), SopNameError> {
    validate_word("SOP name", name)
}

fn validate_word(what: &'static str, name: &str) -> Result<(), SopNameError> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(SopNameError {
            what,
            name: name.into(),
        });
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
        out.push(problem(String::new(), e.to_string()));
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
    let t = &def.trigger;
    let needs = |key: &str, set: bool, out: &mut Vec<DefProblem>| {
        if !set {
            out.push(problem(
                format!("trigger.{key}"),
                format!("a {} trigger needs {key}", t.kind()),
            ));
        }
    };
    let strays: Vec<(&str, bool)> = match t.kind {
        TriggerKind::Manual | TriggerKind::Webhook => vec![
            ("cron", t.cron.is_some()),
            ("tz", t.tz.is_some()),
            ("url", t.url.is_some()),
            ("topic", t.topic.is_some()),
        ],
        TriggerKind::Cron => vec![("url", t.url.is_some()), ("topic", t.topic.is_some())],
        TriggerKind::Mqtt => vec![("cron", t.cron.is_some()), ("tz", t.tz.is_some())],
    };
    for (key, set) in strays {
        if set {
            out.push(problem(
                format!("trigger.{key}"),
                format!("a {} trigger does not take {key}", t.kind()),
            ));
        }
    }
    match t.view() {
        Trigger::Cron { cron, tz } => {
            needs("cron", t.cron.is_some(), &mut out);
            if t.cron.is_some()
                && let Err(e) = crate::schema::cron::Schedule::cron(&cron, tz.as_deref())
            {
                out.push(problem("trigger.cron".into(), e.to_string()));
            }
        }
        Trigger::Mqtt { url, topic } => {
            needs("url", t.url.is_some(), &mut out);
            needs("topic", t.topic.is_some(), &mut out);
            if t.url.is_some()
                && let Err(e) = mqtt_broker(&url)
            {
                out.push(problem("trigger.url".into(), e.to_string()));
            }
            if t.topic.is_some() && topic.is_empty() {
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
        if let Err(e) = validate_word("step id", &step.id) {
            out.push(problem(at("id"), e.to_string()));
        }
        if ids[..i].contains(&step.id.as_str()) {
            out.push(problem(
                at("id"),
                format!("step id '{}' is used twice", step.id),
            ));
        }
        let earlier = &ids[..i];
        for key in step.stray_keys() {
            out.push(problem(
                at(key),
                format!("a {} step does not take {key}", step.kind.name()),
            ));
        }
        let needs = |key: &str, set: bool, out: &mut Vec<DefProblem>| {
            if !set {
                out.push(problem(
                    at(key),
                    format!("a {} step needs {key}", step.kind.name()),
                ));
            }
        };
        match step.kind {
            StepType::Turn => needs("prompt", step.prompt.is_some(), &mut out),
            StepType::Tool => needs("tool", step.tool.is_some(), &mut out),
            StepType::Condition | StepType::Approval => {}
        }
        let mut templates: Vec<(String, String)> = Vec::new();
        match &step.action() {
            StepKind::Turn { prompt } => templates.push((at("prompt"), prompt.clone())),
            StepKind::Tool { tool, args } => {
                if step.tool.is_some() && tool.is_empty() {
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
                        Err(e) => out.push(problem(at(key), e.to_string())),
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
                    out.push(problem(key.clone(), e.to_string()));
                }
            }
        }
    }
    if out.is_empty() { Ok(def) } else { Err(out) }
}

/// The agent a definition names exists in `config`.
pub fn check_agent(file: &Path, def: &SopDef, config: &crate::Config) -> Result<(), DefProblem> {
    if config.agents.contains_key(&def.agent) {
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

fn check_reference(reference: &str, earlier: &[&str]) -> Result<(), TemplateRefError> {
    if reference == "input" || reference.starts_with("input.") {
        return Ok(());
    }
    if let Some(rest) = reference.strip_prefix("steps.")
        && let Some(id) = rest.strip_suffix(".output")
    {
        if earlier.contains(&id) {
            return Ok(());
        }
        return Err(TemplateRefError::NoEarlierStep {
            reference: reference.into(),
            id: id.into(),
        });
    }
    Err(TemplateRefError::Unknown {
        reference: reference.into(),
    })
}

/// `mqtt://host[:port]` → (host, port).
pub fn mqtt_broker(url: &str) -> Result<(String, u16), MqttUrlError> {
    let rest = url
        .strip_prefix("mqtt://")
        .ok_or_else(|| MqttUrlError::Scheme { url: url.into() })?;
    let rest = rest.trim_end_matches('/');
    if rest.contains('@') {
        return Err(MqttUrlError::Credentials);
    }
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) => (
            h.to_string(),
            p.parse::<u16>().map_err(|_| MqttUrlError::Port {
                port: p.into(),
                url: url.into(),
            })?,
        ),
        None => (rest.to_string(), 1883),
    };
    if host.is_empty() {
        return Err(MqttUrlError::NoHost { url: url.into() });
    }
    Ok((host, port))
}

impl crate::Config {
    /// `[sop]`, or its defaults when the table is absent.
    pub fn sop_settings(&self) -> SopConfig {
        self.sop.clone().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broker_url_with_credentials_is_refused_and_without_them_parses() {
        let refused = mqtt_broker("mqtt://user:secret@127.0.0.1:1883");
        assert!(
            refused.as_ref().is_err_and(
                |e| e.to_string().contains("credentials") && !e.to_string().contains("secret")
            ),
            "{refused:?}"
        );
        assert_eq!(
            mqtt_broker("mqtt://127.0.0.1:1883"),
            Ok(("127.0.0.1".to_string(), 1883))
        );
    }

    const GOOD: &str = r#"
agent = "main"
[trigger]
kind = "mqtt"
url = "mqtt://127.0.0.1:1883"
topic = "a/b"
[[steps]]
id = "fetch"
kind = "turn"
prompt = "Summarise {{input.ticket}}"
[[steps]]
id = "check"
kind = "condition"
regex = "^ok"
on_miss = "goto:note"
[[steps]]
id = "gate"
kind = "approval"
timeout_secs = 5
[[steps]]
id = "note"
kind = "tool"
tool = "file_write"
args = { path = "n.md", content = "{{steps.fetch.output}}" }
"#;

    #[test]
    fn a_definition_parses_and_its_mistakes_name_the_key() {
        let def = parse_definition(Path::new("/i/shared/sops/triage.toml"), GOOD)
            .unwrap_or_else(|p| panic!("{p:?}"));
        assert_eq!(def.steps.len(), 4);
        assert_eq!(def.trigger.kind(), "mqtt");
        let back: SopDef = serde_json::from_value(serde_json::to_value(&def).unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, def, "the stored JSON form reads back");

        let bad = GOOD.replace("timeout_secs = 5", "timeout_secs = 5\nbogus = 1");
        let problems = parse_definition(Path::new("/i/shared/sops/triage.toml"), &bad)
            .err()
            .unwrap_or_default();
        assert!(
            problems.iter().any(|p| p.to_string().contains("bogus")),
            "{problems:?}"
        );
        let bad = GOOD.replace("{{steps.fetch.output}}", "{{steps.later.output}}");
        let problems = parse_definition(Path::new("/i/shared/sops/triage.toml"), &bad)
            .err()
            .unwrap_or_default();
        assert!(
            problems
                .iter()
                .any(|p| p.key == "steps[3].args.content" && p.file.ends_with("triage.toml")),
            "{problems:?}"
        );
    }
}
