//! Standard output for every command. `println!` and `print!` are shadowed crate-wide (see
//! `main.rs`) by macros that write through [`write_out`], so a reader that goes away
//! (`warren logs | head -1`, `warren sessions list | head`) ends the process quietly with status
//! 0 instead of std's panic ("failed printing to stdout: Broken pipe") and exit 134 (issue 37
//! §5). Any other write error (a full disk behind `>`) is still reported, with status 1.

use std::io::{self, Write};

/// Writes one formatted piece (and a newline) to stdout; see the module doc for errors.
pub fn write_out(args: std::fmt::Arguments<'_>, newline: bool) {
    let mut out = io::stdout().lock();
    let written = out.write_fmt(args).and_then(|()| {
        if newline {
            out.write_all(b"\n")
        } else {
            Ok(())
        }
    });
    if let Err(err) = written {
        stdout_failed(&err);
    }
}

/// Writes bytes whole to stdout (generated completion scripts); see the module doc for errors.
pub fn write_bytes(bytes: &[u8]) {
    let mut out = io::stdout().lock();
    if let Err(err) = out.write_all(bytes).and_then(|()| out.flush()) {
        stdout_failed(&err);
    }
}

/// Whether `err` (or one of its causes) is a closed pipe: the reader stopped reading, which is
/// not the writer's failure.
pub fn is_closed_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
    })
}

fn stdout_failed(err: &io::Error) -> ! {
    if err.kind() == io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    let _ = writeln!(io::stderr(), "error: writing to stdout: {err}");
    std::process::exit(1);
}

/// A Unix time in seconds as a person reads it (`2026-12-02 03:52:01Z`); 0 (not recorded) is
/// `unknown`.
pub fn unix_time(secs: u64) -> String {
    const SHOWN: &[time::format_description::BorrowedFormatItem<'static>] =
        time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]Z");
    if secs == 0 {
        return "unknown".to_string();
    }
    i64::try_from(secs)
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
        .and_then(|t| t.format(SHOWN).ok())
        .unwrap_or_else(|| secs.to_string())
}

/// A text table whose columns are as wide as their widest cell (issue 37 §5: fixed widths let
/// one long name shift every later column). The last column is never padded.
pub struct Table {
    header: Vec<&'static str>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// Columns by header; a header starting with `>` is right-aligned (numbers), the `>` is not
    /// shown.
    pub fn new(header: &[&'static str]) -> Self {
        Self {
            right: header.iter().map(|h| h.starts_with('>')).collect(),
            header: header.iter().map(|h| h.trim_start_matches('>')).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as lines (header first), without trailing spaces.
    pub fn lines(&self) -> Vec<String> {
        let header: Vec<String> = self.header.iter().map(|h| (*h).to_string()).collect();
        let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                if let Some(w) = widths.get_mut(i) {
                    *w = (*w).max(cell.chars().count());
                }
            }
        }
        std::iter::once(&header)
            .chain(&self.rows)
            .map(|row| {
                let last = row.len().saturating_sub(1);
                let mut line = String::new();
                for (i, cell) in row.iter().enumerate() {
                    if i > 0 {
                        line.push_str("  ");
                    }
                    let pad = widths
                        .get(i)
                        .copied()
                        .unwrap_or(0)
                        .saturating_sub(cell.chars().count());
                    let right = self.right.get(i).copied().unwrap_or(false);
                    if right {
                        line.extend(std::iter::repeat_n(' ', pad));
                    }
                    line.push_str(cell);
                    if !right && i < last {
                        line.extend(std::iter::repeat_n(' ', pad));
                    }
                }
                line.trim_end().to_string()
            })
            .collect()
    }

    pub fn print(&self) {
        for line in self.lines() {
            write_out(format_args!("{line}"), true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Table, unix_time};

    #[test]
    fn unix_times_read_as_dates() {
        assert_eq!(unix_time(1_764_647_521), "2025-12-02 03:52:01Z");
        assert_eq!(unix_time(0), "unknown");
    }

    #[test]
    fn a_long_cell_widens_its_column_for_every_row() {
        let mut t = Table::new(&["NAME", ">COST", "NOTE"]);
        t.row(vec![
            "a-very-long-job-name".into(),
            "1.5".into(),
            "x".into(),
        ]);
        t.row(vec!["b".into(), "10.25".into(), "".into()]);
        assert_eq!(
            t.lines(),
            [
                "NAME                   COST  NOTE",
                "a-very-long-job-name    1.5  x",
                "b                     10.25",
            ]
        );
    }
}
