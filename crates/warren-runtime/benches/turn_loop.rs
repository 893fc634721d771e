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
/// Interleaved samples per side; each sample times BATCH turns.
const SAMPLES: usize = 40;
const BATCH: usize = 10;
const TURNS: usize = SAMPLES * BATCH;
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
            "[agents.bench]\nprovider = \"s\"\nmodel = \"m\"\nruntime_profile = \"r\"\nrisk_profile = \"k\"\n[agents.bench.memory]\nbackend = \"none\"\n[runtime_profiles.r]\nmax_tool_iterations = {}\n[providers.s]\nkind = \"script\"\nscript = \"bench-script.json\"\n{extra}",
            ROUNDS + 1
        ),
    )?;
    let config = ConfigStore::load(root.clone())?.snapshot().config().clone();
    Ok((root, config))
}

fn measure(extra: &str, label: &str) -> Result<f64, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    // Valgrind does not know the Landlock syscalls; the profiling run uses the noop sandbox
    // (the no-op tool starts no process, so the backend plays no part in the round).
    let extra = if std::env::var_os("WARREN_BENCH_ONLY").is_some() {
        format!("{extra}[risk_profiles.k]\nsandbox = \"noop\"\n")
    } else {
        format!("{extra}[risk_profiles.k]\n")
    };
    let (root, config) = setup(dir.path(), &extra)?;
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
        Arc::clone(&services),
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
    // Profiling aid: `WARREN_BENCH_ONLY=loop|direct` runs just that side (e.g. under
    // `valgrind --tool=callgrind`, which counts instructions deterministically).
    if let Ok(only) = std::env::var("WARREN_BENCH_ONLY") {
        let n: usize = std::env::var("WARREN_BENCH_TURNS")
            .ok()
            .and_then(|t| t.parse().ok())
            .unwrap_or(TURNS);
        let took = if only == "direct" {
            direct(n)?
        } else {
            looped(n)?
        };
        println!("{label}: {only} {n} turns: {took:?}");
        return Ok(1.0);
    }
    // Work the loop does that a bare provider+tool round does not, timed on its own: the
    // receipt of each call (HMAC-SHA256, issue 7 §6) and the per-turn system prompt (identity
    // files + memory recall, LOOP-1), so the report can say where the overhead goes.
    let args = serde_json::json!({"query": "x"});
    let receipts = |n: usize| -> Duration {
        let t = Instant::now();
        for i in 0..n * ROUNDS {
            std::hint::black_box(services.receipts.sign(
                "memory_recall",
                &args,
                "[]",
                1_700_000_000 + i as i64,
            ));
        }
        t.elapsed()
    };
    let identity =
        warren_runtime::prompt::Identity::new("bench", runner.kit().policy().workspace());
    let prompts = |n: usize| -> Duration {
        let t = Instant::now();
        rt.block_on(async {
            for _ in 0..n {
                std::hint::black_box(
                    warren_runtime::prompt::system_prompt(&identity, runner.kit().memory(), "go")
                        .await,
                );
            }
        });
        t.elapsed()
    };
    direct(20)?;
    looped(20)?;
    // Interleaved samples; the median (and the minimum) per side are robust against a loaded
    // machine, where a sum is not.
    let (mut d, mut l, mut r, mut p) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..SAMPLES {
        d.push(direct(BATCH)?);
        l.push(looped(BATCH)?);
        r.push(receipts(BATCH));
        p.push(prompts(BATCH));
    }
    let per_round = |x: Duration| x.as_secs_f64() * 1e9 / (BATCH * ROUNDS) as f64;
    let stats = |v: &mut Vec<Duration>| -> (f64, f64) {
        v.sort();
        (per_round(v[0]), per_round(v[v.len() / 2]))
    };
    let ((d_min, d_med), (l_min, l_med)) = (stats(&mut d), stats(&mut l));
    let ((_, r_med), (_, p_med)) = (stats(&mut r), stats(&mut p));
    let ratio = l_med / d_med;
    println!("turn loop, {label}: {ROUNDS} rounds x {TURNS} turns ({SAMPLES} samples of {BATCH})");
    println!("  direct provider+tool per round: median {d_med:.0} ns, min {d_min:.0} ns");
    println!("  loop per round:                 median {l_med:.0} ns, min {l_min:.0} ns");
    println!(
        "  ratio:                          {ratio:.2}x median, {:.2}x min (target <= {TARGET}x)",
        l_min / d_min
    );
    println!(
        "  of the loop: receipt {r_med:.0} ns/round, system prompt {p_med:.0} ns/round ({:.1} us per turn); without them {:.2}x",
        p_med * ROUNDS as f64 / 1000.0,
        (l_med - r_med - p_med) / d_med
    );
    Ok(ratio)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let bare = measure(
        "[cost]\nenabled = false\n[log]\npersistence = \"none\"\n",
        "ledger and trace off",
    )?;
    if std::env::var_os("WARREN_BENCH_ONLY").is_some() {
        return Ok(());
    }
    let _defaults = measure("", "defaults (durable cost ledger + trace file)")?;
    if bare > TARGET {
        return Err(format!("loop overhead {bare:.2}x exceeds {TARGET}x").into());
    }
    Ok(())
}
