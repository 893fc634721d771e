//! `warren logs [-f] [--agent A] [--json]`: the runtime trace (STATE-13), oldest first;
//! `-f` keeps following the file as the daemon or other runs append to it. Every event is
//! redacted again with the current config's secrets (CFG-6): a trace written before a key was
//! configured, or by an older version, never shows it.

use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::process::ExitCode;
use std::time::Duration;

use warren_config::{ConfigStore, InstallRoot, Redactor};
use warren_runtime::trace::{TraceEvent, read_trace, redact_event};

pub fn run(
    root: &InstallRoot,
    follow: bool,
    agent: Option<String>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let path = root.runtime_trace();
    // An unloadable config still lets the operator read the trace (redacted when written).
    let redactor = ConfigStore::load(root.clone())
        .map(|store| Redactor::from_config(store.snapshot().config()))
        .unwrap_or_default();
    let show = |e: &TraceEvent| {
        let mut e = e.clone();
        redact_event(&redactor, &mut e);
        let e = &e;
        if agent.as_deref().is_some_and(|a| e.agent != a) {
            return;
        }
        if json {
            println!("{}", serde_json::to_string(e).unwrap_or_default());
        } else {
            println!(
                "{} {:<13} {:<12} {}{}",
                e.time,
                e.kind,
                e.agent,
                e.session
                    .as_deref()
                    .map(|s| format!("[{s}] "))
                    .unwrap_or_default(),
                e.data
            );
        }
    };
    for e in read_trace(&path) {
        show(&e);
    }
    if !follow {
        return Ok(ExitCode::SUCCESS);
    }
    let mut offset = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.len() < offset {
            offset = 0; // rotated
        }
        if meta.len() == offset {
            continue;
        }
        let mut f = std::fs::File::open(&path)?;
        f.seek(SeekFrom::Start(offset))?;
        let mut reader = BufReader::new(f);
        let mut line = String::new();
        while reader.read_line(&mut line)? > 0 {
            if !line.ends_with('\n') {
                break; // a partial line: read it next time
            }
            offset += line.len() as u64;
            if let Ok(e) = serde_json::from_str::<TraceEvent>(&line) {
                show(&e);
            }
            line.clear();
        }
    }
}
