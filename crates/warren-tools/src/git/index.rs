//! The gitlink (submodule) entries of a git index file, found without running git (GIT-4).
//!
//! git looks into `<path>/.git` of every gitlink in the index (to compare the submodule's HEAD
//! with the recorded commit) in `status`, `diff`, `add`, `switch`, `stash`, ... whatever the
//! `--ignore-submodules` setting, so each of those `.git` entries must be checked before git
//! starts. Entries are decoded the way git's `create_from_disk` does (versions 2, 3 and 4; the
//! name length from the flags, NUL-terminated when it overflows). The object hash size is
//! taken from the repository config by git; instead of parsing that config, the index is decoded
//! with both sizes (SHA-1 and SHA-256) and the gitlinks of every decoding that succeeds are
//! kept, so a disagreement can only add paths to check. A split index names its shared index
//! (`sharedindex.<hash>`), whose entries git merges in: the caller decodes it too.

/// Size of an index entry before the object id: ctime, mtime, dev, ino, mode, uid, gid, size.
const STAT_BYTES: usize = 40;
const HASH_SIZES: [usize; 2] = [20, 32];
const EXTENDED: u16 = 0x4000;
const NAME_MASK: u16 = 0x0fff;
const S_IFMT: u32 = 0o170_000;
const S_IFGITLINK: u32 = 0o160_000;

/// What the index says about submodules.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Gitlinks {
    /// Paths (relative to the work tree, as stored) of every gitlink entry.
    pub paths: Vec<Vec<u8>>,
    /// File names of the shared indexes a split index refers to (`sharedindex.<hex>`).
    pub shared: Vec<String>,
}

/// Why an index file could not be decoded (with either object id size).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    #[error("not a git index (no DIRC signature)")]
    NoSignature,
    #[error("unsupported index version {0}")]
    Version(u32),
    #[error("malformed name field in the index")]
    MalformedName,
    #[error("truncated index (decoded with {hash}-byte object ids)")]
    Truncated { hash: usize },
    #[error("unreadable index")]
    Unreadable,
}

/// Decodes `bytes` (a whole index file). Errors when no decoding succeeds: git would refuse
/// such an index too, and an index that cannot be read cannot be checked.
pub fn gitlinks(bytes: &[u8]) -> Result<Gitlinks, IndexError> {
    let mut out = Gitlinks::default();
    let mut first_error = None;
    let mut decoded = false;
    for hash in HASH_SIZES {
        match decode(bytes, hash) {
            Ok(one) => {
                decoded = true;
                for p in one.paths {
                    if !out.paths.contains(&p) {
                        out.paths.push(p);
                    }
                }
                for s in one.shared {
                    if !out.shared.contains(&s) {
                        out.shared.push(s);
                    }
                }
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if decoded {
        Ok(out)
    } else {
        Err(first_error.unwrap_or(IndexError::Unreadable))
    }
}

fn be16(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

fn be32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

/// git's `decode_varint`: returns the value and the bytes it used (0 used on overflow, as git
/// then leaves the cursor where it was).
fn varint(bytes: &[u8]) -> Option<(usize, usize)> {
    let mut used = 1;
    let mut c = *bytes.first()?;
    let mut val = u64::from(c & 127);
    while c & 128 != 0 {
        val = val.wrapping_add(1);
        if val == 0 || val >> (64 - 7) != 0 {
            return Some((0, 0));
        }
        c = *bytes.get(used)?;
        used += 1;
        val = (val << 7) + u64::from(c & 127);
    }
    Some((usize::try_from(val).unwrap_or(usize::MAX), used))
}

fn nul_terminated(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|b| *b == 0)
}

fn decode(bytes: &[u8], hash: usize) -> Result<Gitlinks, IndexError> {
    let truncated = || IndexError::Truncated { hash };
    if bytes.len() < 12 + hash || &bytes[..4] != b"DIRC" {
        return Err(IndexError::NoSignature);
    }
    let version = be32(bytes, 4).ok_or_else(truncated)?;
    if !(2..=4).contains(&version) {
        return Err(IndexError::Version(version));
    }
    let count = be32(bytes, 8).ok_or_else(truncated)?;
    let mut out = Gitlinks::default();
    let mut pos = 12usize;
    let mut previous: Option<Vec<u8>> = None;
    for _ in 0..count {
        let mode = be32(bytes, pos + 24).ok_or_else(truncated)?;
        let flags_at = pos + STAT_BYTES + hash;
        let flags = be16(bytes, flags_at).ok_or_else(truncated)?;
        let mut name_at = flags_at + 2;
        if flags & EXTENDED != 0 {
            name_at += 2;
        }
        let field = usize::from(flags & NAME_MASK);
        let (name, size) = if version == 4 {
            let (strip, used) =
                varint(bytes.get(name_at..).ok_or_else(truncated)?).ok_or_else(truncated)?;
            let copy = match &previous {
                Some(prev) if prev.len() < strip => {
                    return Err(IndexError::MalformedName);
                }
                Some(prev) => prev.len() - strip,
                None => 0,
            };
            let suffix_at = name_at + used;
            let rest = bytes.get(suffix_at..).ok_or_else(truncated)?;
            let len = if field == usize::from(NAME_MASK) {
                nul_terminated(rest).ok_or_else(truncated)? + copy
            } else {
                field
            };
            let own = len.checked_sub(copy).ok_or_else(truncated)?;
            let suffix = rest.get(..own).ok_or_else(truncated)?;
            let mut name = previous
                .as_deref()
                .map(|p| p[..copy].to_vec())
                .unwrap_or_default();
            name.extend_from_slice(suffix);
            (name, suffix_at - pos + own + 1)
        } else {
            let rest = bytes.get(name_at..).ok_or_else(truncated)?;
            let len = if field == usize::from(NAME_MASK) {
                nul_terminated(rest).ok_or_else(truncated)?
            } else {
                field
            };
            let name = rest.get(..len).ok_or_else(truncated)?.to_vec();
            (name, (name_at - pos + len + 8) & !7)
        };
        if pos + size > bytes.len() {
            return Err(truncated());
        }
        if mode & S_IFMT == S_IFGITLINK {
            // git treats the name as a C string.
            let path = name.split(|b| *b == 0).next().unwrap_or_default().to_vec();
            if !out.paths.contains(&path) {
                out.paths.push(path);
            }
        }
        previous = Some(name);
        pos += size;
    }
    // Extensions, up to the trailing checksum: only the split index link matters here.
    let end = bytes.len().saturating_sub(hash);
    while pos + 8 <= end {
        let Some(size) = be32(bytes, pos + 4).and_then(|s| usize::try_from(s).ok()) else {
            break;
        };
        let Some(data) = bytes.get(pos + 8..(pos + 8).saturating_add(size)) else {
            break;
        };
        if &bytes[pos..pos + 4] == b"link"
            && let Some(id) = data.get(..hash)
            && id.iter().any(|b| *b != 0)
        {
            let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
            out.shared.push(format!("sharedindex.{hex}"));
        }
        pos += 8 + size;
    }
    Ok(out)
}
