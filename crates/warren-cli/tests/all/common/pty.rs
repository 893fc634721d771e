//! `warren` on a real terminal: a pty from util-linux `script`, for the REPL and approval
//! prompts.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use warren_testkit::TempRoot;

use super::bin;

/// `warren --config-dir ROOT ARGS` on a pty, its output collected as it arrives.
pub struct Pty {
    pub child: std::process::Child,
    input: std::process::ChildStdin,
    seen: Arc<Mutex<Vec<u8>>>,
}

impl Pty {
    /// Starts `warren ARGS` (shell words) in `root` on a pty.
    pub fn spawn(root: &TempRoot, args: &str) -> Result<Self, Box<dyn std::error::Error>> {
        let mut child = Command::new("script")
            .args([
                "-qec",
                // `exec`: `script` runs this through $SHELL; a shell that stays as the
                // parent (dash does) also gets the pty's SIGINT and exits 130 afterwards.
                &format!("exec \"$WARREN_BIN\" --config-dir \"$WARREN_ROOT\" {args}"),
            ])
            .arg("/dev/null")
            .env("WARREN_BIN", bin())
            .env("WARREN_ROOT", root.path())
            .env_remove("WARREN_HOME")
            .env_remove("OPENAI_API_KEY")
            .env_remove("ANTHROPIC_API_KEY")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("util-linux `script` runs warren on a pty: {e}"))?;
        let input = child.stdin.take().ok_or("no stdin")?;
        let mut output = child.stdout.take().ok_or("no stdout")?;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = output.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().map(|mut s| s.extend_from_slice(&buf[..n])).ok();
            }
        });
        Ok(Self { child, input, seen })
    }

    /// Everything printed so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.seen.lock().map(|s| s.clone()).unwrap_or_default())
            .into_owned()
    }

    /// Waits (60 s at most) until `needle` has been printed `times` times in all.
    pub fn wait_for(&self, needle: &str, times: usize) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if self.text().matches(needle).count() >= times {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!(
            "{needle:?} x{times} never printed:\n{}",
            self.text()
        ))
    }

    /// Types `keys`.
    pub fn send(&mut self, keys: &str) -> Result<(), Box<dyn std::error::Error>> {
        self.input.write_all(keys.as_bytes())?;
        self.input.flush()?;
        Ok(())
    }

    /// Presses Ctrl-D and waits (10 s at most) for the REPL to exit.
    pub fn ctrl_d(&mut self) -> Result<std::process::ExitStatus, Box<dyn std::error::Error>> {
        self.send("\x04")?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                self.child.kill()?;
                return Err(format!("the REPL did not exit on Ctrl-D:\n{}", self.text()).into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
