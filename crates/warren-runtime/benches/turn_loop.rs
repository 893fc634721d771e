//! Loop overhead per tool round (issue 7): a turn of ROUNDS tool rounds through the loop,
//! against calling the same provider and the same tool directly, in the same run. Target:
//! ratio <= 1.2x.
//!
//! The direct side is the least a caller must do to run tool rounds at all: send the same
//! request (the conversation so far and the same tool definitions), run the call the provider
//! returned with the same tool, put its output into the conversation as a tool message, and
//! call again; ROUNDS + 1 provider calls and ROUNDS tool calls per turn, like the loop. What the
//! loop adds on top is what is measured: receipts, approvals, the cost check and ledger, the
//! trace, events, cancellation and the system prompt. (The bench of the previous sessions sent
//! a fixed two-message request without tool definitions, for which the `script` provider takes
//! its cheaper text-only path; that ratio is still printed, as "thin baseline".)
//!
//! Four runs: the `script` provider with the ledger and trace off (the loop itself), the
//! same with the defaults (a cost record and trace lines per call, one ledger `fdatasync` per
//! turn), and the OpenAI-compatible provider over loopback HTTP against the local fake server
//! (`warren-testkit`, the real wire format), the realistic case, with the defaults and with the
//! ledger and trace off (on a busy disk the per-turn `fdatasync` alone is milliseconds).
//!
//! The tool is a near no-op (`memory_recall` on the `none` memory backend).
//!
//! Run: `cargo bench -p warren-runtime --bench turn_loop`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use warren_config::{ConfigStore, InstallRoot};
use warren_core::{AgentAlias, ChatMessage, ToolDefinition};
use warren_memory::MemoryStores;
use warren_providers::{ChatRequest, Provider, Route, ScriptProvider, no_events};
use warren_runtime::approval::DenyAll;
use warren_runtime::{AgentRunner, CancelToken, ProcessServices, Services, TurnIo};
use warren_testkit::fake_llm::{FakeCall, FakeOpenAi, FakeReply};

const ROUNDS: usize = 8;
/// Interleaved samples per side; each sample times BATCH turns.
const SAMPLES: usize = 40;
const BATCH: usize = 10;
const TARGET: f64 = 1.2;

fn script() -> String {
    let step = r#"{"text": "", "tool_calls": [{"name": "memory_recall", "arguments": {"query": "x"}}], "usage": {"input_tokens": 10, "output_tokens": 2}}"#;
    let mut steps = vec![step.to_string(); ROUNDS];
    steps.push(r#"{"text": "done", "usage": {"input_tokens": 10, "output_tokens": 2}}"#.into());
    format!("{{\"turns\": [[{}]]}}", steps.join(","))
}

/// The provider of a run.
enum Kind {
    Script,
    /// The OpenAI-compatible provider against the local fake server.
    Wire(FakeOpenAi),
}

/// An install root with agent `bench` on provider `s`, whose whole `[providers.s]` table is
/// `provider`; `extra` is appended.
fn setup(
    dir: &std::path::Path,
    provider: &str,
    extra: &str,
) -> Result<(InstallRoot, warren_config::Config), Box<dyn std::error::Error>> {
    let root = InstallRoot::at(dir.join("warren"));
    root.ensure_layout()?;
    std::fs::write(root.root().join("bench-script.json"), script())?;
    std::fs::write(
        root.config_file(),
        format!(
            "[agents.bench]\nprovider = \"s\"\nmodel = \"m\"\nruntime_profile = \"r\"\nrisk_profile = \"k\"\n[agents.bench.memory]\nbackend = \"none\"\n[runtime_profiles.r]\nmax_tool_iterations = {}\n{provider}\n{extra}",
            ROUNDS + 1
        ),
    )?;
    let config = ConfigStore::load(root.clone())?.snapshot().config().clone();
    Ok((root, config))
}

/// Per-round figures of one run, in ns.
struct Figures {
    direct: f64,
    looped: f64,
}

fn measure(kind: &Kind, extra: &str, label: &str) -> Result<Figures, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    // Valgrind does not know the Landlock syscalls; the profiling run uses the noop sandbox
    // (the no-op tool starts no process, so the backend plays no part in the round).
    // Thousands of calls in one process: the action window must not refuse them (a refused
    // call skips the tool and its receipt, and would flatter the loop).
    let profile = "[risk_profiles.k]\nmax_actions_per_hour = 1000000000\n";
    let extra = if std::env::var_os("WARREN_BENCH_ONLY").is_some() {
        format!("{extra}{profile}sandbox = \"noop\"\nunrestricted = true\n")
    } else {
        format!("{extra}{profile}")
    };
    let provider = match kind {
        Kind::Script => {
            "[providers.s]\nkind = \"script\"\nscript = \"bench-script.json\"".to_string()
        }
        Kind::Wire(fake) => format!("{}\nmax_retries = 0", fake.provider_toml("s", "sk-bench")),
    };
    let (root, config) = setup(dir.path(), &provider, &extra)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let alias = AgentAlias::new("bench")?;
    let process = ProcessServices::new(&root, &config).map_err(|e| e.to_string())?;
    let services = Arc::new(Services::for_generation(&process, &root, &config));
    let runner = rt.block_on(AgentRunner::build(
        &config,
        &root,
        &alias,
        &MemoryStores::new(root.clone()),
        Arc::clone(&services),
    ))?;
    // The same provider the loop's route holds, called directly.
    let route: Route = warren_providers::build_route(&config, &root, "s")?;
    let tool = Arc::clone(runner.kit().tool("memory_recall")?);
    let definitions: Arc<Vec<ToolDefinition>> = Arc::clone(runner.tool_definitions());
    let refill = |turns: usize| {
        if let Kind::Wire(fake) = kind {
            for _ in 0..turns {
                for i in 0..ROUNDS {
                    fake.push(
                        FakeReply::calls(
                            "",
                            vec![FakeCall::new(
                                &format!("call_{i}"),
                                "memory_recall",
                                serde_json::json!({"query": "x"}),
                            )],
                        )
                        .with_usage(10, 2),
                    );
                }
                fake.push(FakeReply::text("done").with_usage(10, 2));
            }
        }
    };

    // The least a caller does per tool round (see the module comment).
    let direct = |n: usize| -> Result<Duration, Box<dyn std::error::Error>> {
        refill(n);
        let t = Instant::now();
        rt.block_on(async {
            for _ in 0..n {
                let mut request = Arc::new(ChatRequest {
                    model: "m".into(),
                    messages: vec![ChatMessage::system("s"), ChatMessage::user("go")],
                    tools: Arc::clone(&definitions),
                    ..ChatRequest::default()
                });
                for _ in 0..ROUNDS {
                    let response = route
                        .chat(Arc::clone(&request), no_events())
                        .await?
                        .response;
                    let call = response.tool_calls.first().ok_or("no tool call")?.clone();
                    let output = tool
                        .execute(call.arguments.clone())
                        .await
                        .map_err(|e| e.to_string())?;
                    let text = match output.content {
                        serde_json::Value::String(s) => s,
                        other => serde_json::to_string(&other)?,
                    };
                    let messages = &mut Arc::make_mut(&mut request).messages;
                    messages.push(ChatMessage::assistant_calls(
                        response.text,
                        response.tool_calls,
                    ));
                    messages.push(ChatMessage::tool_result(&call, text));
                }
                route.chat(Arc::clone(&request), no_events()).await?;
            }
            Ok::<_, Box<dyn std::error::Error>>(())
        })?;
        Ok(t.elapsed())
    };
    let looped = |n: usize| -> Result<Duration, Box<dyn std::error::Error>> {
        refill(n);
        let t = Instant::now();
        rt.block_on(async {
            for _ in 0..n {
                let io = TurnIo {
                    max_output_tokens: None,
                    approver: Arc::new(DenyAll),
                    cancel: CancelToken::new(),
                    events: Arc::new(|_| {}),
                };
                let (outcome, _) = runner.run_detached(Vec::new(), "go", &io).await?;
                assert_eq!(outcome.tool_calls as usize, ROUNDS);
            }
            Ok::<_, Box<dyn std::error::Error>>(())
        })?;
        Ok(t.elapsed())
    };
    // The previous sessions' baseline: a fixed two-message request without tools (the script
    // provider then answers text only) and the tool's output dropped.
    let script = ScriptProvider::load("s", &root.root().join("bench-script.json"))?;
    let thin_request = Arc::new(ChatRequest {
        model: "m".into(),
        messages: vec![ChatMessage::system("s"), ChatMessage::user("go")],
        ..ChatRequest::default()
    });
    let thin = |n: usize| -> Result<Duration, Box<dyn std::error::Error>> {
        let t = Instant::now();
        rt.block_on(async {
            for _ in 0..n {
                for _ in 0..ROUNDS {
                    script.chat(Arc::clone(&thin_request), no_events()).await?;
                    tool.execute(serde_json::json!({"query": "x"}))
                        .await
                        .map_err(|e| e.to_string())?;
                }
                script.chat(Arc::clone(&thin_request), no_events()).await?;
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
            .unwrap_or(SAMPLES * BATCH);
        let took = if only == "direct" {
            direct(n)?
        } else {
            looped(n)?
        };
        println!("{label}: {only} {n} turns: {took:?}");
        return Ok(Figures {
            direct: 1.0,
            looped: 1.0,
        });
    }
    // Work the loop does that the direct side does not, timed on its own: the receipt of each
    // call (HMAC-SHA256, issue 7 §6) and the per-turn system prompt (identity files checked,
    // memory recalled, LOOP-1), so the report can say where the overhead goes.
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
    let wire = matches!(kind, Kind::Wire(_));
    // Over HTTP a turn takes milliseconds: fewer turns per sample.
    let batch = if wire { 2 } else { BATCH };
    direct(batch)?;
    looped(batch)?;
    // Interleaved samples; the median (and the minimum) per side are robust against a loaded
    // machine, where a sum is not.
    let (mut d, mut l, mut th, mut r, mut p) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..SAMPLES {
        d.push(direct(batch)?);
        l.push(looped(batch)?);
        if !wire {
            th.push(thin(batch)?);
        }
        r.push(receipts(batch));
        p.push(prompts(batch));
    }
    let per_round = |x: Duration| x.as_secs_f64() * 1e9 / (batch * ROUNDS) as f64;
    let stats = |v: &mut Vec<Duration>| -> (f64, f64) {
        if v.is_empty() {
            return (f64::NAN, f64::NAN);
        }
        v.sort();
        (per_round(v[0]), per_round(v[v.len() / 2]))
    };
    let ((d_min, d_med), (l_min, l_med)) = (stats(&mut d), stats(&mut l));
    let ((_, t_med), (_, r_med), (_, p_med)) = (stats(&mut th), stats(&mut r), stats(&mut p));
    let ratio = l_med / d_med;
    println!(
        "turn loop, {label}: {ROUNDS} rounds x {} turns ({SAMPLES} samples of {batch})",
        SAMPLES * batch
    );
    println!("  direct provider+tool per round: median {d_med:.0} ns, min {d_min:.0} ns");
    println!("  loop per round:                 median {l_med:.0} ns, min {l_min:.0} ns");
    println!(
        "  ratio:                          {ratio:.2}x median, {:.2}x min (target <= {TARGET}x)",
        l_min / d_min
    );
    if !wire {
        println!(
            "  thin baseline (fixed request without tools, output dropped): {t_med:.0} ns/round, loop {:.2}x of it",
            l_med / t_med
        );
    }
    println!(
        "  of the loop: receipt {r_med:.0} ns/round, system prompt {p_med:.0} ns/round ({:.1} us per turn); without them {:.2}x",
        p_med * ROUNDS as f64 / 1000.0,
        (l_med - r_med - p_med) / d_med
    );
    Ok(Figures {
        direct: d_med,
        looped: l_med,
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let bare = measure(
        &Kind::Script,
        "[cost]\nenabled = false\n[log]\npersistence = \"none\"\n",
        "script provider, ledger and trace off",
    )?;
    if std::env::var_os("WARREN_BENCH_ONLY").is_some() {
        return Ok(());
    }
    measure(
        &Kind::Script,
        "",
        "script provider, defaults (cost ledger + trace file)",
    )?;
    let wire = measure(
        &Kind::Wire(FakeOpenAi::start()?),
        "",
        "OpenAI-compatible provider over loopback HTTP, defaults",
    )?;
    // The same without the ledger's per-turn `fdatasync` and the trace file: on a busy disk the
    // sync alone takes milliseconds, which the defaults run counts as loop overhead.
    let wire_bare = measure(
        &Kind::Wire(FakeOpenAi::start()?),
        "[cost]\nenabled = false\n[log]\npersistence = \"none\"\n",
        "OpenAI-compatible provider over loopback HTTP, ledger and trace off",
    )?;
    println!(
        "summary: loop overhead per round {:.0} ns with the script provider ({:.2}x), {:.0} ns over HTTP ({:.2}x; {:.2}x with the ledger and trace off)",
        bare.looped - bare.direct,
        bare.looped / bare.direct,
        wire.looped - wire.direct,
        wire.looped / wire.direct,
        wire_bare.looped / wire_bare.direct
    );
    let ratio = bare.looped / bare.direct;
    if ratio > TARGET {
        return Err(format!(
            "loop overhead with the script provider {ratio:.2}x exceeds {TARGET}x"
        )
        .into());
    }
    Ok(())
}
