//! The daemon's resident code (issue 26). Most of a `warren daemon`'s RSS is its own binary's
//! code pages: start-up (config, migrations of every store, the sandbox probe, the gateway)
//! touches most of the 14 MB text, and the kernel keeps each touched page (and the pages
//! faulted around it) mapped for the life of the process, though an idle daemon runs a small
//! part of it. [`ResidentCodeHook`] unmaps the binary's read-only, never-written mappings once
//! a generation is ready and then every 30 s (`MADV_DONTNEED`): the pages stay in the page
//! cache, and what the daemon runs next faults back in from there (a minor fault, no I/O). So
//! the resident code is what ran in the last 30 s. Writable and relocated mappings (data,
//! RELRO, heap) are never touched. `WARREN_RESIDENT_CODE=keep` turns it off.

use std::io;
use std::time::Duration;

use warren_daemon::{Generation, GenerationHook, RunningSubsystem, StartFuture};

/// How often the mappings are dropped again while the daemon runs. A release costs a minor
/// fault per 64 KiB of code the next requests run (fault-around), well under a millisecond.
const EVERY: Duration = Duration::from_secs(30);

/// Whether the environment turned the release off (`WARREN_RESIDENT_CODE=keep`).
pub fn kept() -> bool {
    std::env::var_os("WARREN_RESIDENT_CODE").is_some_and(|v| v == "keep")
}

/// Drops the binary's code mappings when a generation is ready and every [`EVERY`] after.
#[derive(Debug, Default)]
pub struct ResidentCodeHook;

impl GenerationHook for ResidentCodeHook {
    fn name(&self) -> &'static str {
        "resident-code"
    }

    fn start<'a>(&'a self, _generation: &'a Generation) -> StartFuture<'a> {
        Box::pin(async move {
            let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
            let task = tokio::spawn(async move {
                let mut tick = tokio::time::interval(EVERY);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                tick.tick().await; // the first tick is now; `ready` covers the start
                loop {
                    tokio::select! {
                        _ = tick.tick() => release_in_background(),
                        _ = &mut stopped => break,
                    }
                }
            });
            Ok(RunningSubsystem::new("resident-code", stop, task))
        })
    }

    fn ready(&self, _generation: &Generation) {
        release_in_background();
    }
}

fn release_in_background() {
    tokio::task::spawn_blocking(|| {
        if let Err(e) = release_code_pages() {
            tracing::debug!("cannot release the binary's code pages: {e}");
        }
    });
}

/// One mapping of `/proc/self/smaps`.
#[derive(Debug, PartialEq, Eq)]
struct Mapping {
    start: usize,
    end: usize,
    perms: String,
    path: String,
    /// Anonymous (copied-on-write) and swapped-out pages, in KiB: a mapping with any was
    /// written to and must not be dropped.
    private_kib: u64,
}

impl Mapping {
    /// A private, read-only mapping of `exe` that was never written.
    fn droppable(&self, exe: &str) -> bool {
        let p = self.perms.as_bytes();
        self.path == exe
            && p.first() == Some(&b'r')
            && p.get(1) == Some(&b'-')
            && p.get(3) == Some(&b'p')
            && self.private_kib == 0
    }
}

/// The mappings of an smaps text (header lines and their `Anonymous:`/`Swap:` fields).
fn mappings(smaps: &str) -> Vec<Mapping> {
    let mut out: Vec<Mapping> = Vec::new();
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let Some(first) = fields.next() else { continue };
        if let Some((start, end)) = first.split_once('-')
            && let (Ok(start), Ok(end)) = (
                usize::from_str_radix(start, 16),
                usize::from_str_radix(end, 16),
            )
        {
            let perms = fields.next().unwrap_or_default().to_string();
            // offset, device, inode, then the path (which may hold spaces: " (deleted)").
            let path = line
                .splitn(6, char::is_whitespace)
                .nth(5)
                .unwrap_or_default()
                .trim()
                .to_string();
            out.push(Mapping {
                start,
                end,
                perms,
                path,
                private_kib: 0,
            });
        } else if matches!(first, "Anonymous:" | "Swap:")
            && let Some(last) = out.last_mut()
        {
            let kib: u64 = fields.next().and_then(|v| v.parse().ok()).unwrap_or(1);
            last.private_kib += kib;
        }
    }
    out
}

/// Drops the page-table entries of the executable's droppable mappings; returns the bytes
/// of address space covered.
fn release_code_pages() -> io::Result<usize> {
    let exe = std::fs::read_link("/proc/self/exe")?;
    let exe = exe.to_string_lossy();
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    let mut released = 0;
    for m in mappings(&smaps).iter().filter(|m| m.droppable(&exe)) {
        advise_dontneed(m.start, m.end - m.start)?;
        released += m.end - m.start;
    }
    Ok(released)
}

#[allow(unsafe_code)]
fn advise_dontneed(start: usize, len: usize) -> io::Result<()> {
    // SAFETY: [start, start + len) is a whole mapping of this process's own executable that
    // /proc/self/smaps shows private, read-only and without anonymous or swapped pages, so it
    // holds exactly the file's bytes and no Rust object lives in it. MADV_DONTNEED on such a
    // mapping only drops page-table entries; the next access maps the same file pages again.
    let rc = unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_DONTNEED) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
5600aa000000-5600aa100000 r--p 00000000 fd:00 42 /opt/warren/bin/warren (deleted)
Size:               1024 kB
Rss:                 900 kB
Anonymous:             0 kB
Swap:                  0 kB
5600aa100000-5600ab000000 r-xp 00100000 fd:00 42 /opt/warren/bin/warren (deleted)
Rss:                9000 kB
Anonymous:             0 kB
Swap:                  0 kB
5600ab000000-5600ab060000 r--p 01000000 fd:00 42 /opt/warren/bin/warren (deleted)
Anonymous:           372 kB
Swap:                  0 kB
5600ab060000-5600ab068000 rw-p 01060000 fd:00 42 /opt/warren/bin/warren (deleted)
Anonymous:            28 kB
7f0000000000-7f0000100000 r-xp 00000000 fd:00 7 /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:             0 kB
7f0000200000-7f0000201000 r-xp 00000000 00:00 0 
Anonymous:             0 kB
";

    #[test]
    fn only_the_executables_never_written_read_only_mappings_are_dropped() {
        let exe = "/opt/warren/bin/warren (deleted)";
        let all = mappings(SMAPS);
        assert_eq!(all.len(), 6);
        let dropped: Vec<(usize, usize)> = all
            .iter()
            .filter(|m| m.droppable(exe))
            .map(|m| (m.start, m.end))
            .collect();
        // The headers/rodata and the text; not the relocated RELRO (anonymous pages), the
        // writable data, a library or an anonymous mapping.
        assert_eq!(
            dropped,
            vec![
                (0x5600_aa00_0000, 0x5600_aa10_0000),
                (0x5600_aa10_0000, 0x5600_ab00_0000)
            ]
        );
    }

    #[test]
    fn a_mapping_with_swapped_pages_is_kept() {
        let smaps = "5600aa100000-5600ab000000 r--p 00100000 fd:00 42 /bin/w\nAnonymous: 0 kB\nSwap: 4 kB\n";
        assert!(!mappings(smaps)[0].droppable("/bin/w"));
    }

    /// The real thing on this test process: its code keeps running after the release, and
    /// its resident file pages shrink.
    #[test]
    fn releasing_drops_resident_code_and_the_code_still_runs()
    -> Result<(), Box<dyn std::error::Error>> {
        let rss_file = || -> Result<u64, Box<dyn std::error::Error>> {
            let status = std::fs::read_to_string("/proc/self/status")?;
            Ok(status
                .lines()
                .find_map(|l| l.strip_prefix("RssFile:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .ok_or("no RssFile")?)
        };
        let before = rss_file()?;
        let released = release_code_pages()?;
        let after = rss_file()?;
        assert!(released > 0, "found the test binary's code mappings");
        assert!(after < before, "RssFile {before} -> {after} KiB");
        // Code and read-only data fault back in: formatting, parsing and allocation work.
        assert_eq!(format!("{:?}", mappings(SMAPS).len()), "6");
        Ok(())
    }
}
