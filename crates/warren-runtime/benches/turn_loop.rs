//! Loop overhead per tool round (issue 7): a turn of ROUNDS tool rounds with the `script`
//! provider and a near no-op tool (`memory_recall` on the `none` memory backend), against
//! calling the same provider and the same tool directly, ROUNDS + 1 and ROUNDS times, in the
//! same run. Target: ratio ≤ 1.2×. Two configurations: the ledger and trace off (the loop
//! itself), and the defaults (the loop plus a durable cost record and a trace line per call).
//!
//! Run: `cargo bench -p warren-runtime --bench turn_loop`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use warren_config::{ConfigStore, InstallRoot};
use warren_core::{AgentAlias, ChatMessage};
use warren_memory::MemoryStores;
use warren_providers::{ChatRequest, Provider, ScriptProvider, no_events};
use warren_runtime::approval::DenyAll;
use warren_runtime::{AgentRunner, CancelToken, Services};

const ROUNDS: usize = 8;
const TURNS: usize = 200;
const TARGET: f64 = 1.2;

fn script() -> String {
    let step = r#"{"text": "", "tool_calls": [{"name": "memory_recall", "arguments": {"query": "x"}}], "usage": {"input_tokens": 10, "output_tokens": 2}}"#;
    let mut steps = vec![step.to_string(); ROUNDS];
    steps.push(r#"{"text": "done", "usage": {"input_tokens": 10, "output_tokens": 2}}"#.into());
    format!("{{\"turns\": [[{}]]}}", steps.join(","))
}

fn setup(
    dir: &std::path::Path,
    extra: &str,
) -> Result<(InstallRoot, warren_config::Config), Box<dyn std::error::Error>> {
    let root = InstallRoot::at(dir.join("warren"));
    root.ensure_layout()?;
    std::fs::write(root.root().join("bench-script.json"), script())?;
    std::fs::write(
        root.config_file(),
        format!(
            "[agents.bench]\nprovider = \"s\"\nmodel = \"m\"\nruntime_profile = \"r\"\n[agents.bench.memory]\nbackend = \"none\"\n[runtime_profiles.r]\nmax_tool_iterations = {}\n[providers.s]\nkind = \"script\"\nscript = \"bench-script.json\"\n{extra}",
            ROUNDS + 1
        ),
    )?;
    let config = ConfigStore::load(root.clone())?.snapshot().config().clone();
    Ok((root, config))
}

fn measure(extra: &str, label: &str) -> Result<f64, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let (root, config) = setup(dir.path(), extra)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let alias = AgentAlias::new("bench")?;
    let services = Arc::new(
        Services::for_install(&root, &config, Arc::new(DenyAll)).map_err(|e| e.to_string())?,
    );
    let runner = rt.block_on(AgentRunner::build(
        &config,
        &root,
        &alias,
        &MemoryStores::new(root.clone()),
        services,
    ))?;
    let provider = ScriptProvider::load("s", &root.root().join("bench-script.json"))?;
    let tool = Arc::clone(runner.kit().tool("memory_recall")?);
    let request = Arc::new(ChatRequest {
        model: "m".into(),
        messages: vec![ChatMessage::system("s"), ChatMessage::user("go")],
        ..ChatRequest::default()
    });

    let direct = |n: usize| -> Result<Duration, Box<dyn std::error::Error>> {
        let t = Instant::now();
        rt.block_on(async {
            for _ in 0..n {
                for _ in 0..ROUNDS {
                    provider.chat(Arc::clone(&request), no_events()).await?;
                    tool.execute(serde_json::json!({"query": "x"}))
                        .await
                        .map_err(|e| e.to_string())?;
                }
                provider.chat(Arc::clone(&request), no_events()).await?;
            }
            Ok::<_, Box<dyn std::error::Error>>(())
        })?;
        Ok(t.elapsed())
    };
    let looped = |n: usize| -> Result<Duration, Box<dyn std::error::Error>> {
        let t = Instant::now();
        rt.block_on(async {
            for _ in 0..n {
                let (outcome, _) = runner
                    .run_detached(Vec::new(), "go", &CancelToken::new(), Arc::new(|_| {}))
                    .await?;
                assert_eq!(outcome.tool_calls as usize, ROUNDS);
            }
            Ok::<_, Box<dyn std::error::Error>>(())
        })?;
        Ok(t.elapsed())
    };
    direct(20)?;
    looped(20)?;
    // Interleave to cancel drift.
    let (mut d, mut l) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..4 {
        d += direct(TURNS / 4)?;
        l += looped(TURNS / 4)?;
    }
    let per_round = |x: Duration| x / (TURNS * ROUNDS) as u32;
    let ratio = l.as_secs_f64() / d.as_secs_f64();
    println!("turn loop, {label}: {ROUNDS} rounds x {TURNS} turns");
    println!("  direct provider+tool per round: {:?}", per_round(d));
    println!("  loop per round:                 {:?}", per_round(l));
    println!("  ratio:                          {ratio:.2}x (target <= {TARGET}x)");
    Ok(ratio)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let bare = measure(
        "[cost]\nenabled = false\n[log]\npersistence = \"none\"\n",
        "ledger and trace off",
    )?;
    let _defaults = measure("", "defaults (durable cost ledger + trace file)")?;
    if bare > TARGET {
        return Err(format!("loop overhead {bare:.2}x exceeds {TARGET}x").into());
    }
    Ok(())
}
