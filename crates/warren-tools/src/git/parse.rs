//! Parsers of git's machine formats into the structured results of `git_operations` (GIT-1):
//! `status --porcelain=2 -z`, unified `diff`, the fixed `log`/`branch`/`stash list` formats
//! (unit-separated raw fields, never mailmapped, GIT-6) and `worktree list --porcelain -z`.

use serde::Serialize;

/// Field separator of the fixed formats (`%x1f`).
pub const FS: char = '\u{1f}';

/// The fixed `log` format: raw author and committer fields (`%an`, `%ae`, never `%aN`/`%aE`).
pub const LOG_FORMAT: &str = "--format=%H%x1f%P%x1f%an%x1f%ae%x1f%aI%x1f%cn%x1f%ce%x1f%cI%x1f%s";
pub const BRANCH_FORMAT: &str = "--format=%(HEAD)%1f%(refname:short)%1f%(objectname)%1f%(upstream:short)%1f%(upstream:track,nobracket)%1f%(subject)";
pub const STASH_FORMAT: &str = "--format=%gd%x1f%H%x1f%gs%x1f%cI";

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Status {
    pub branch: Option<String>,
    pub detached: bool,
    pub oid: Option<String>,
    pub upstream: Option<String>,
    pub ahead: Option<u64>,
    pub behind: Option<u64>,
    pub staged: Vec<Entry>,
    pub unstaged: Vec<Entry>,
    pub untracked: Vec<String>,
    pub ignored: Vec<String>,
    pub conflicted: Vec<String>,
    pub clean: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    pub path: String,
    /// `modified`, `added`, `deleted`, `renamed`, `copied`, `type_changed`, `submodule`.
    pub change: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub orig_path: Option<String>,
}

fn change(code: u8) -> Option<&'static str> {
    Some(match code {
        b'M' => "modified",
        b'A' => "added",
        b'D' => "deleted",
        b'R' => "renamed",
        b'C' => "copied",
        b'T' => "type_changed",
        b'U' => "unmerged",
        _ => return None,
    })
}

/// Parses `git status --porcelain=2 --branch -z`.
pub fn status(bytes: &[u8]) -> Status {
    let mut s = Status::default();
    let mut records = bytes
        .split(|b| *b == 0)
        .map(|r| String::from_utf8_lossy(r).into_owned());
    while let Some(rec) = records.next() {
        if let Some(h) = rec.strip_prefix("# ") {
            let (key, value) = h.split_once(' ').unwrap_or((h, ""));
            match key {
                "branch.oid" if value != "(initial)" => s.oid = Some(value.to_string()),
                "branch.head" if value == "(detached)" => s.detached = true,
                "branch.head" => s.branch = Some(value.to_string()),
                "branch.upstream" => s.upstream = Some(value.to_string()),
                "branch.ab" => {
                    let mut it = value.split(' ');
                    s.ahead = it
                        .next()
                        .and_then(|a| a.trim_start_matches('+').parse().ok());
                    s.behind = it
                        .next()
                        .and_then(|b| b.trim_start_matches('-').parse().ok());
                }
                _ => {}
            }
            continue;
        }
        let kind = rec.as_bytes().first().copied();
        match kind {
            Some(b'1') | Some(b'2') => {
                let fields = if kind == Some(b'1') { 8 } else { 9 };
                let mut parts = rec.splitn(fields + 1, ' ');
                let xy = parts.nth(1).unwrap_or("..").as_bytes().to_vec();
                let sub = parts.next().unwrap_or("N...");
                let path = parts.nth(fields - 3).unwrap_or_default().to_string();
                let orig = if kind == Some(b'2') {
                    records.next()
                } else {
                    None
                };
                let submodule = sub.starts_with('S');
                for (code, list) in [
                    (xy.first().copied(), &mut s.staged),
                    (xy.get(1).copied(), &mut s.unstaged),
                ] {
                    if let Some(c) = code.and_then(change) {
                        list.push(Entry {
                            path: path.clone(),
                            change: if submodule { "submodule" } else { c },
                            orig_path: orig.clone(),
                        });
                    }
                }
            }
            Some(b'u') => {
                if let Some(path) = rec.splitn(11, ' ').nth(10) {
                    s.conflicted.push(path.to_string());
                }
            }
            Some(b'?') => s.untracked.push(rec[2..].to_string()),
            Some(b'!') => s.ignored.push(rec[2..].to_string()),
            _ => {}
        }
    }
    s.clean = s.staged.is_empty()
        && s.unstaged.is_empty()
        && s.untracked.is_empty()
        && s.conflicted.is_empty();
    s
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct FileDiff {
    pub old_path: Option<String>,
    pub new_path: Option<String>,
    /// `modified`, `added`, `deleted`, `renamed`.
    pub change: &'static str,
    pub binary: bool,
    pub hunks: Vec<Hunk>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Hunk {
    pub header: String,
    pub old_start: u64,
    pub old_lines: u64,
    pub new_start: u64,
    pub new_lines: u64,
    pub lines: Vec<String>,
}

fn strip_side(p: &str, prefix: &str) -> Option<String> {
    // git ends a name containing a space with a tab, and C-quotes unusual names.
    let p = p.strip_suffix('\t').unwrap_or(p);
    if p == "/dev/null" {
        return None;
    }
    let p = unquote(p);
    Some(p.strip_prefix(prefix).unwrap_or(&p).to_string())
}

/// Undoes git's C-style quoting of a path (`"a/x\ty"`, octal escapes for non-ASCII bytes).
fn unquote(p: &str) -> String {
    let Some(inner) = p.strip_prefix('"').and_then(|q| q.strip_suffix('"')) else {
        return p.to_string();
    };
    let mut out = Vec::new();
    let mut bytes = inner.bytes();
    while let Some(b) = bytes.next() {
        if b != b'\\' {
            out.push(b);
            continue;
        }
        match bytes.next() {
            Some(b'n') => out.push(b'\n'),
            Some(b't') => out.push(b'\t'),
            Some(b'a') => out.push(7),
            Some(b'b') => out.push(8),
            Some(b'f') => out.push(12),
            Some(b'r') => out.push(b'\r'),
            Some(b'v') => out.push(11),
            Some(d @ b'0'..=b'3') => {
                let mut v = u32::from(d - b'0');
                for _ in 0..2 {
                    if let Some(n @ b'0'..=b'7') = bytes.next() {
                        v = v * 8 + u32::from(n - b'0');
                    }
                }
                out.push(u8::try_from(v).unwrap_or(b'?'));
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn range(s: &str) -> (u64, u64) {
    let (start, len) = s.split_once(',').unwrap_or((s, "1"));
    (start.parse().unwrap_or(0), len.parse().unwrap_or(0))
}

/// Parses unified diff output (`--src-prefix=a/ --dst-prefix=b/`).
pub fn diff(bytes: &[u8]) -> Vec<FileDiff> {
    let text = String::from_utf8_lossy(bytes);
    let mut files: Vec<FileDiff> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("diff --git ") {
            let (a, b) = rest.split_once(" b/").unwrap_or((rest, ""));
            files.push(FileDiff {
                old_path: strip_side(a, "a/"),
                new_path: Some(b.to_string()),
                change: "modified",
                ..FileDiff::default()
            });
            continue;
        }
        let Some(file) = files.last_mut() else {
            continue;
        };
        if let Some(hunk) = file.hunks.last_mut()
            && matches!(line.as_bytes().first(), Some(b' ' | b'+' | b'-' | b'\\'))
        {
            hunk.lines.push(line.to_string());
            continue;
        }
        if let Some(h) = line.strip_prefix("@@ -") {
            let mut parts = h.splitn(3, ' ');
            let (old_start, old_lines) = range(parts.next().unwrap_or("0"));
            let (new_start, new_lines) =
                range(parts.next().unwrap_or("+0").trim_start_matches('+'));
            file.hunks.push(Hunk {
                header: line.to_string(),
                old_start,
                old_lines,
                new_start,
                new_lines,
                lines: Vec::new(),
            });
        } else if line.starts_with("new file mode") {
            file.change = "added";
        } else if line.starts_with("deleted file mode") {
            file.change = "deleted";
        } else if let Some(p) = line.strip_prefix("rename from ") {
            file.change = "renamed";
            file.old_path = Some(p.to_string());
        } else if let Some(p) = line.strip_prefix("rename to ") {
            file.new_path = Some(p.to_string());
        } else if line.starts_with("Binary files ") {
            file.binary = true;
        } else if let Some(p) = line.strip_prefix("--- ") {
            file.old_path = strip_side(p, "a/");
        } else if let Some(p) = line.strip_prefix("+++ ") {
            file.new_path = strip_side(p, "b/");
        }
    }
    files
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Commit {
    pub hash: String,
    pub parents: Vec<String>,
    pub author_name: String,
    pub author_email: String,
    pub author_date: String,
    pub committer_name: String,
    pub committer_email: String,
    pub committer_date: String,
    pub subject: String,
}

/// Parses `log -z` with [`LOG_FORMAT`].
pub fn log(bytes: &[u8]) -> Vec<Commit> {
    bytes
        .split(|b| *b == 0)
        .filter(|r| !r.is_empty())
        .filter_map(|r| {
            let r = String::from_utf8_lossy(r);
            let f: Vec<&str> = r.trim_start_matches('\n').splitn(9, FS).collect();
            let [hash, parents, an, ae, ad, cn, ce, cd, subject] = f.as_slice() else {
                return None;
            };
            Some(Commit {
                hash: hash.to_string(),
                parents: parents.split_whitespace().map(String::from).collect(),
                author_name: an.to_string(),
                author_email: ae.to_string(),
                author_date: ad.to_string(),
                committer_name: cn.to_string(),
                committer_email: ce.to_string(),
                committer_date: cd.to_string(),
                subject: subject.to_string(),
            })
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Branch {
    pub name: String,
    pub current: bool,
    pub commit: String,
    pub upstream: Option<String>,
    pub track: Option<String>,
    pub subject: String,
}

/// Parses `branch --list` with [`BRANCH_FORMAT`].
pub fn branches(bytes: &[u8]) -> Vec<Branch> {
    let text = String::from_utf8_lossy(bytes);
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.splitn(6, FS).collect();
            let [head, name, commit, upstream, track, subject] = f.as_slice() else {
                return None;
            };
            let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
            Some(Branch {
                name: name.to_string(),
                current: *head == "*",
                commit: commit.to_string(),
                upstream: opt(upstream),
                track: opt(track),
                subject: subject.to_string(),
            })
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stash {
    pub name: String,
    pub index: Option<u32>,
    pub commit: String,
    pub message: String,
    pub date: String,
}

/// Parses `stash list` with [`STASH_FORMAT`].
pub fn stashes(bytes: &[u8]) -> Vec<Stash> {
    let text = String::from_utf8_lossy(bytes);
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.splitn(4, FS).collect();
            let [name, commit, message, date] = f.as_slice() else {
                return None;
            };
            Some(Stash {
                name: name.to_string(),
                index: name
                    .strip_prefix("stash@{")
                    .and_then(|r| r.strip_suffix('}'))
                    .and_then(|n| n.parse().ok()),
                commit: commit.to_string(),
                message: message.to_string(),
                date: date.to_string(),
            })
        })
        .collect()
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Worktree {
    pub path: String,
    pub head: Option<String>,
    pub branch: Option<String>,
    pub detached: bool,
    pub bare: bool,
    pub locked: bool,
    pub prunable: bool,
}

/// Parses `worktree list --porcelain -z`.
pub fn worktrees(bytes: &[u8]) -> Vec<Worktree> {
    let mut out: Vec<Worktree> = Vec::new();
    let mut current: Option<Worktree> = None;
    for field in bytes.split(|b| *b == 0) {
        let field = String::from_utf8_lossy(field);
        if field.is_empty() {
            out.extend(current.take());
            continue;
        }
        let (key, value) = field.split_once(' ').unwrap_or((&field, ""));
        if key == "worktree" {
            out.extend(current.take());
            current = Some(Worktree {
                path: value.to_string(),
                ..Worktree::default()
            });
            continue;
        }
        let Some(w) = current.as_mut() else {
            continue;
        };
        match key {
            "HEAD" => w.head = Some(value.to_string()),
            "branch" => {
                w.branch = Some(
                    value
                        .strip_prefix("refs/heads/")
                        .unwrap_or(value)
                        .to_string(),
                )
            }
            "detached" => w.detached = true,
            "bare" => w.bare = true,
            "locked" => w.locked = true,
            "prunable" => w.prunable = true,
            _ => {}
        }
    }
    out.extend(current);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_v2_records() {
        let raw = b"# branch.oid abc\0# branch.head main\0# branch.upstream origin/main\0# branch.ab +1 -2\x001 M. N... 100644 100644 100644 h1 h2 a b.txt\x002 R. N... 100644 100644 100644 h1 h2 R100 new\0old\0? u.txt\0";
        let s = status(raw);
        assert_eq!(s.branch.as_deref(), Some("main"));
        assert_eq!((s.ahead, s.behind), (Some(1), Some(2)));
        assert_eq!(
            s.staged,
            vec![
                Entry {
                    path: "a b.txt".into(),
                    change: "modified",
                    orig_path: None
                },
                Entry {
                    path: "new".into(),
                    change: "renamed",
                    orig_path: Some("old".into())
                }
            ]
        );
        assert_eq!(s.untracked, vec!["u.txt".to_string()]);
        assert!(!s.clean);
    }

    #[test]
    fn diff_hunks_and_worktrees() {
        let d = diff(b"diff --git a/x b/x\nindex 1..2 100644\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\ndiff --git a/n b/n\nnew file mode 100644\n--- /dev/null\n+++ b/n\n@@ -0,0 +1,2 @@\n+1\n+2\n");
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].hunks[0].lines, vec!["-a", "+b"]);
        assert_eq!((d[1].change, d[1].old_path.clone()), ("added", None));
        assert_eq!(unquote(r#""a/x\ty\303\251""#), "a/x\tyé");
        let w = worktrees(
            b"worktree /a\0HEAD 1\0branch refs/heads/main\0\0worktree /b\0HEAD 2\0detached\0\0",
        );
        assert_eq!(w.len(), 2);
        assert_eq!(w[0].branch.as_deref(), Some("main"));
        assert!(w[1].detached);
    }
}
