//! The `warren agent` REPL (issue 7 §11): over a pipe one message per line until end of input;
//! on a terminal (a real pty, via util-linux `script`) line editing with a private history
//! file, Ctrl-C clearing the line at the prompt and cancelling a running turn (its tool
//! process killed, the session kept consistent, LOOP-7), and Ctrl-D exiting cleanly.

use crate::common::{Pty, bin};
use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

use warren_testkit::{TempRoot, text};

type R = Result<(), Box<dyn std::error::Error>>;

/// Turn 1 answers, turn 2 runs `sleep 30` through the shell tool, turn 3 answers.
fn setup() -> Result<TempRoot, Box<dyn std::error::Error>> {
    let root = TempRoot::new()?;
    root.write_config(
        r#"
[agents.main]
provider = "s"
risk_profile = "sleepy"

[risk_profiles.sleepy]
autonomy = "full"
allowed_commands = ["sleep"]

[providers.s]
kind = "script"
script = "repl-script.json"
"#,
    )?;
    std::fs::write(
        root.path().join("repl-script.json"),
        r#"{"turns": [
            [{"text": "first answer"}],
            [{"text": "", "tool_calls": [{"name": "shell", "arguments": {"command": "sleep 30"}}]},
             {"text": "slept"}],
            [{"text": "after cancel"}]]}"#,
    )?;
    Ok(root)
}

#[test]
fn repl_over_a_pipe_runs_one_turn_per_line_until_end_of_input() -> R {
    let root = setup()?;
    let mut child = root
        .warren(bin(), &["agent", "-a", "main", "--session", "piped"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .ok_or("no stdin")?
        .write_all(b"hello\n\n")?; // the empty line is skipped; EOF ends the REPL
    let out = child.wait_with_output()?;
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout.trim(), "first answer", "{stderr}");
    let shown = root.run(bin(), &["sessions", "show", "piped"])?;
    assert!(text(&shown).0.contains("hello"), "{}", text(&shown).0);
    // No terminal, no line history.
    assert!(!root.path().join("data/state/repl-history").exists());
    Ok(())
}

#[test]
fn repl_on_a_terminal_keeps_a_private_history_and_ctrl_c_cancels_the_running_turn() -> R {
    let root = setup()?;
    let started = Instant::now();
    let mut pty = Pty::spawn(&root, "agent -a main --session tty")?;
    pty.wait_for("> ", 1)?;
    // Ctrl-C at the prompt drops the line typed so far.
    pty.send("abc\x03")?;
    pty.wait_for("> ", 2)?;
    pty.send("hello\r")?;
    pty.wait_for("first answer", 1)?;
    pty.wait_for("> ", 3)?;
    // Ctrl-C during a turn cancels it and kills the running tool process.
    pty.send("nap\r")?;
    pty.wait_for("shell {\"command\":\"sleep 30\"}", 1)?;
    std::thread::sleep(Duration::from_millis(300));
    pty.send("\x03")?;
    pty.wait_for("the turn was cancelled", 1)?;
    pty.wait_for("> ", 4)?;
    pty.send("next\r")?;
    pty.wait_for("after cancel", 1)?;
    pty.wait_for("> ", 5)?;
    // Ctrl-D exits cleanly.
    let status = pty.ctrl_d()?;
    assert!(status.success(), "{status}:\n{}", pty.text());
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "the cancelled `sleep 30` was not waited for"
    );
    assert!(!pty.text().contains("slept"), "{}", pty.text());

    let history = root.path().join("data/state/repl-history");
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&history)?.permissions());
    assert_eq!(mode & 0o777, 0o600, "history is private");
    let lines: Vec<String> = std::fs::read_to_string(&history)?
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_string)
        .collect();
    assert_eq!(lines, ["hello", "nap", "next"]);

    // The session holds the cancelled round with an interrupted result, then the next turn.
    let shown = text(&root.run(bin(), &["sessions", "show", "tty"])?).0;
    let (nap, interrupted, next) = (
        shown.find("nap"),
        shown.find("interrupted"),
        shown.find("after cancel"),
    );
    assert!(
        nap.is_some() && nap < interrupted && interrupted < next,
        "{shown}"
    );
    Ok(())
}

/// Ctrl-C at an approval prompt cancels the turn without leaving a reader on the terminal that
/// would swallow the REPL's next line; a later prompt answered `y` runs the call.
#[test]
fn ctrl_c_at_an_approval_prompt_gives_the_terminal_back_to_the_repl() -> R {
    let root = TempRoot::new()?;
    root.write_config(
        r#"
[agents.main]
provider = "s"
risk_profile = "ask"

[risk_profiles.ask]
autonomy = "supervised"

[providers.s]
kind = "script"
script = "approve-script.json"
"#,
    )?;
    std::fs::write(
        root.path().join("approve-script.json"),
        r#"{"turns": [
            [{"text": "", "tool_calls": [{"name": "file_write", "arguments": {"path": "a.md", "content": "a"}}]},
             {"text": "wrote a"}],
            [{"text": "second answer"}],
            [{"text": "", "tool_calls": [{"name": "file_write", "arguments": {"path": "b.md", "content": "b"}}]},
             {"text": "wrote b"}]]}"#,
    )?;
    let mut pty = Pty::spawn(&root, "agent -a main --session ask")?;
    pty.wait_for("> ", 1)?;
    pty.send("one\r")?;
    pty.wait_for("[y/N]", 1)?;
    pty.send("\x03")?;
    pty.wait_for("the turn was cancelled", 1)?;
    pty.wait_for("> ", 2)?;
    pty.send("two\r")?;
    pty.wait_for("second answer", 1)?;
    pty.wait_for("> ", 3)?;
    pty.send("three\r")?;
    pty.wait_for("[y/N]", 2)?;
    pty.send("y\r")?;
    pty.wait_for("wrote b", 1)?;
    pty.wait_for("> ", 4)?;
    let status = pty.ctrl_d()?;
    assert!(status.success(), "{status}:\n{}", pty.text());
    let workspace = root.path().join("agents/main/workspace");
    assert!(
        !workspace.join("a.md").exists(),
        "the cancelled call did not run"
    );
    assert_eq!(std::fs::read_to_string(workspace.join("b.md"))?, "b");
    Ok(())
}
