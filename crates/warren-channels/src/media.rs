//! Inbound media (issue 38 §5): a photo (the largest size within the cap), a document or a
//! voice note is fetched with `getFile` and saved into the serving agent's workspace as
//! `inbox/<date>/<sanitised name>` through a confined directory handle (never `std::fs` on a
//! path inside the agent-writable workspace), then given to the turn: an image as an image part
//! of the user's message (both provider wire formats), every file as a note naming its
//! workspace path. A file over `media_max_bytes` is refused with a message to the sender, and
//! nothing is written.

use serde_json::{Value, json};
use warren_config::InstallRoot;
use warren_config::schema::channels::TelegramChannel;
use warren_core::Image;
use warren_security::confined_dir::{ConfinedDir, DirError};

use warren_runtime::host::AgentHost;
use warren_store::channels::{ChannelStore, InboxRow, Outbound};

use crate::platform::PlatformError;

/// Where files come from (the Telegram adapter implements it on its Bot API client; this
/// module stays below the adapter). Blocking: called on blocking threads.
pub trait FileSource: Send + Sync {
    /// `getFile`: the file's download path and its size when known.
    fn locate(&self, file_id: &str) -> Result<(String, Option<u64>), PlatformError>;
    /// The file's bytes; `None` when it is over `limit` bytes (reading stops there).
    fn fetch(&self, path: &str, limit: u64) -> Result<Option<Vec<u8>>, PlatformError>;
}

/// Longest saved file name (characters).
const MAX_NAME: usize = 100;

/// Why an attachment was not taken in.
#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    /// Over the channel's `media_max_bytes`: the sender is told, nothing is written.
    #[error("{channel}: the {kind} is {size} bytes, over media_max_bytes ({limit})")]
    TooLarge {
        channel: String,
        kind: String,
        size: String,
        limit: u64,
    },
    #[error("{channel}: fetching the {kind} failed: {cause}")]
    Fetch {
        channel: String,
        kind: String,
        cause: PlatformError,
    },
    #[error("{channel}: saving {path} into the workspace failed: {cause}")]
    Save {
        channel: String,
        path: String,
        cause: Box<DirError>,
    },
    #[error("{channel}: the agent's workspace {path} does not exist")]
    NoWorkspace { channel: String, path: String },
}

impl MediaError {
    /// What the sender is told.
    pub fn for_sender(&self) -> String {
        match self {
            MediaError::TooLarge { kind, limit, .. } => {
                let most = if *limit >= 1024 * 1024 {
                    format!("{} MB", limit / (1024 * 1024))
                } else {
                    format!("{limit} bytes")
                };
                format!(
                    "That {kind} is too large: this bot takes files up to {most}. Nothing was saved."
                )
            }
            _ => "Sorry, that file could not be received; nothing was saved.".to_string(),
        }
    }
}

/// The media of a Telegram message, for the inbox row's payload (`Null` without any): its kind,
/// the candidate files (a photo's sizes, smallest first) with their sizes, the file's name and
/// media type when Telegram gives them, and the message id.
pub fn describe(message: &Value) -> Value {
    let file = |f: &Value| json!({"file_id": f["file_id"], "file_size": f["file_size"]});
    let (kind, files, name, mime) = if let Some(sizes) = message["photo"].as_array() {
        let files: Vec<Value> = sizes.iter().map(file).collect();
        ("photo", files, Value::Null, json!("image/jpeg"))
    } else if let Some(doc) = message.get("document") {
        (
            "document",
            vec![file(doc)],
            doc["file_name"].clone(),
            doc["mime_type"].clone(),
        )
    } else if let Some(voice) = message.get("voice") {
        (
            "voice",
            vec![file(voice)],
            Value::Null,
            voice["mime_type"].clone(),
        )
    } else if let Some(audio) = message.get("audio") {
        (
            "audio",
            vec![file(audio)],
            audio["file_name"].clone(),
            audio["mime_type"].clone(),
        )
    } else {
        return Value::Null;
    };
    json!({"kind": kind, "files": files, "name": name, "mime": mime, "message_id": message["message_id"]})
}

/// A file saved from a message.
#[derive(Debug, Clone, PartialEq)]
pub struct Saved {
    pub kind: String,
    /// Relative to the workspace: `inbox/<date>/<name>`.
    pub path: String,
    pub size: usize,
    /// Set for an image the model can see.
    pub image: Option<Image>,
}

impl Saved {
    /// The note the turn's input carries.
    pub fn note(&self) -> String {
        format!(
            "[{} saved in your workspace at {} ({} bytes)]",
            self.kind, self.path, self.size
        )
    }
}

/// `input` with a note about `saved` (and the images to attach).
pub fn input_with(input: &str, saved: Option<&Saved>) -> (String, Vec<Image>) {
    let Some(saved) = saved else {
        return (input.to_string(), Vec::new());
    };
    let text = if input.trim().is_empty() || input.starts_with(&format!("[{}", saved.kind)) {
        saved.note()
    } else {
        format!("{input}\n\n{}", saved.note())
    };
    (text, saved.image.clone().into_iter().collect())
}

/// A file name safe to create in `inbox/<date>/`: the separators, control characters and
/// characters shells and other systems trip on become `_`, `..` runs become one `.`, leading
/// dots, underscores and spaces go, at most [`MAX_NAME`] characters; `file` when nothing is
/// left.
pub fn sanitize(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_control() || matches!(c, '/' | '\\' | ':' | '*' | '?' | '"' | '<' | '>' | '|') {
                '_'
            } else {
                c
            }
        })
        .collect();
    while out.contains("..") {
        out = out.replace("..", ".");
    }
    let out: String = out
        .trim_start_matches(['.', '_', ' '])
        .trim_end_matches([' ', '.'])
        .chars()
        .take(MAX_NAME)
        .collect();
    if out.is_empty() {
        "file".to_string()
    } else {
        out
    }
}

/// Whether `mime` is an image type providers take.
fn is_image(mime: &str) -> bool {
    matches!(
        mime,
        "image/jpeg" | "image/png" | "image/gif" | "image/webp"
    )
}

/// Fetches and saves the media of a row's `payload` for `channel` (blocking: run it on a
/// blocking thread); `Ok(None)` when the message has none.
pub fn take_in(
    source: &dyn FileSource,
    root: &InstallRoot,
    name: &str,
    channel: &TelegramChannel,
    payload: &Value,
) -> Result<Option<Saved>, MediaError> {
    let media = &payload["media"];
    let Some(kind) = media["kind"].as_str() else {
        return Ok(None);
    };
    let limit = channel.media_max_bytes;
    let too_large = |size: String| MediaError::TooLarge {
        channel: name.to_string(),
        kind: kind.to_string(),
        size,
        limit,
    };
    let files = media["files"].as_array().cloned().unwrap_or_default();
    // A photo: the largest size within the cap (Telegram lists them smallest first).
    let chosen = files
        .iter()
        .rev()
        .find(|f| f["file_size"].as_u64().is_none_or(|s| s <= limit))
        .cloned();
    let Some(file) = chosen else {
        let size = files
            .last()
            .and_then(|f| f["file_size"].as_u64())
            .unwrap_or_default();
        return Err(too_large(size.to_string()));
    };
    let fetch = |cause: PlatformError| MediaError::Fetch {
        channel: name.to_string(),
        kind: kind.to_string(),
        cause,
    };
    let (remote, size) = source
        .locate(file["file_id"].as_str().unwrap_or_default())
        .map_err(fetch)?;
    if let Some(size) = size.filter(|s| *s > limit) {
        return Err(too_large(size.to_string()));
    }
    let Some(bytes) = source.fetch(&remote, limit).map_err(fetch)? else {
        return Err(too_large(format!("more than {limit}")));
    };
    let extension = remote
        .rsplit_once('.')
        .map(|(_, e)| sanitize(e))
        .filter(|e| !e.is_empty() && e.len() <= 8);
    let file_name = match media["name"].as_str() {
        Some(given) => sanitize(given),
        None => {
            let id = media["message_id"].as_i64().unwrap_or_default();
            let base = format!("{kind}-{id}");
            extension.map_or(base.clone(), |e| format!("{base}.{e}"))
        }
    };
    let mime = media["mime"].as_str().unwrap_or_default().to_string();
    let path = save(root, channel, name, &file_name, &bytes)?;
    Ok(Some(Saved {
        kind: kind.to_string(),
        size: bytes.len(),
        image: is_image(&mime).then(|| Image::from_bytes(mime.clone(), &bytes)),
        path,
    }))
}

/// Writes `bytes` as `inbox/<today>/<file_name>` (a free variant of the name) in the channel's
/// agent's workspace through a confined handle; the path relative to the workspace.
fn save(
    root: &InstallRoot,
    channel: &TelegramChannel,
    name: &str,
    file_name: &str,
    bytes: &[u8],
) -> Result<String, MediaError> {
    let workspace = root.agent_workspace(&channel.agent);
    let date = time::OffsetDateTime::now_utc().date().to_string();
    let dir_rel = format!("inbox/{date}");
    let failed = |path: String| {
        let channel = name.to_string();
        move |cause: DirError| MediaError::Save {
            channel,
            path,
            cause: Box::new(cause),
        }
    };
    let top = ConfinedDir::open_root(&workspace)
        .map_err(failed(workspace.display().to_string()))?
        .ok_or_else(|| MediaError::NoWorkspace {
            channel: name.to_string(),
            path: workspace.display().to_string(),
        })?;
    let dir = top
        .open_dir(&dir_rel, true)
        .map_err(failed(dir_rel.clone()))?
        .ok_or_else(|| MediaError::NoWorkspace {
            channel: name.to_string(),
            path: workspace.join(&dir_rel).display().to_string(),
        })?;
    let (stem, ext) = match file_name.rsplit_once('.') {
        Some((s, e)) if !s.is_empty() => (s.to_string(), format!(".{e}")),
        _ => (file_name.to_string(), String::new()),
    };
    let mut candidate = file_name.to_string();
    let mut n = 1;
    while dir
        .stat(&candidate)
        .map_err(failed(format!("{dir_rel}/{candidate}")))?
        .is_some()
    {
        n += 1;
        candidate = format!("{stem}-{n}{ext}");
    }
    dir.write_atomic(&candidate, bytes)
        .map_err(failed(format!("{dir_rel}/{candidate}")))?;
    Ok(format!("{dir_rel}/{candidate}"))
}

/// What a channel's worker hands [`take_media`].
pub struct Intake<'a> {
    pub files: &'a std::sync::Arc<dyn FileSource>,
    pub host: &'a AgentHost,
    pub store: &'a std::sync::Arc<ChannelStore>,
    /// `telegram.<name>`.
    pub name: &'a str,
    pub config: &'a TelegramChannel,
}

/// The input and images of `row`'s turn, its media saved first; `None` when the media was
/// refused (the sender's reply is queued and the row done without a turn: wake the sender).
pub async fn take_media(me: Intake<'_>, row: &InboxRow) -> Option<(String, Vec<Image>)> {
    let payload: Value = row
        .payload
        .as_deref()
        .and_then(|p| serde_json::from_str(p).ok())
        .unwrap_or(Value::Null);
    if payload["media"].is_null() {
        return Some((row.text.clone(), Vec::new()));
    }
    let (files, root, name, config) = (
        std::sync::Arc::clone(me.files),
        me.host.root().clone(),
        me.name.to_string(),
        me.config.clone(),
    );
    let taken = tokio::task::spawn_blocking(move || {
        take_in(files.as_ref(), &root, &name, &config, &payload)
    })
    .await;
    let refusal = match taken {
        Ok(Ok(saved)) => return Some(input_with(&row.text, saved.as_ref())),
        Ok(Err(e)) => e,
        Err(e) => MediaError::NoWorkspace {
            channel: me.name.to_string(),
            path: format!("(the fetch task failed: {e})"),
        },
    };
    tracing::warn!(channel = %me.name, "{refusal}");
    let reply = Outbound {
        inbox_id: Some(row.id),
        purpose: "reply".to_string(),
        chat_id: row.chat_id.clone(),
        thread_id: row.thread_id.clone(),
        text: refusal.for_sender(),
        markup: None,
        plain: true,
    };
    let (store, name, id, note) = (
        std::sync::Arc::clone(me.store),
        me.name.to_string(),
        row.id,
        refusal.to_string(),
    );
    let stored = tokio::task::spawn_blocking(move || {
        store.finish_turn(&name, id, Some(&note), Some(&reply))
    })
    .await;
    if !matches!(stored, Ok(Ok(_))) {
        tracing::error!(channel = %me.name, "the refusal of inbox row {id} was not stored");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitised_issue38() {
        assert_eq!(sanitize("../../etc/x"), "etc_x");
        assert_eq!(sanitize(".bashrc"), "bashrc");
        assert_eq!(sanitize(".."), "file");
        assert_eq!(sanitize("a\u{0}b\nc.txt"), "a_b_c.txt");
        assert_eq!(sanitize("report 2026.pdf"), "report 2026.pdf");
        assert_eq!(sanitize("C:\\Users\\x.doc"), "C__Users_x.doc");
        assert_eq!(sanitize(&"a".repeat(300)).len(), MAX_NAME);
        for evil in [
            "../../etc/x",
            "/abs/path",
            "..\\..\\win",
            ".hidden",
            "a/../../b",
            "\u{7}",
        ] {
            let s = sanitize(evil);
            assert!(
                !s.contains('/') && !s.contains("..") && !s.starts_with('.'),
                "{evil} -> {s}"
            );
            assert!(!s.chars().any(char::is_control), "{evil} -> {s}");
        }
    }

    #[test]
    fn media_is_described_and_noted_issue38() {
        let photo = json!({"message_id": 5, "photo": [{"file_id": "s", "file_size": 10}, {"file_id": "l", "file_size": 40}]});
        let d = describe(&photo);
        assert_eq!(
            (d["kind"].as_str(), d["files"][1]["file_id"].as_str()),
            (Some("photo"), Some("l"))
        );
        let doc = json!({"message_id": 6, "document": {"file_id": "d", "file_name": "a.pdf", "mime_type": "application/pdf"}});
        assert_eq!(describe(&doc)["name"], "a.pdf");
        assert_eq!(describe(&json!({"text": "hi"})), Value::Null);
        let saved = Saved {
            kind: "document".into(),
            path: "inbox/2026-12-02/a.pdf".into(),
            size: 3,
            image: None,
        };
        let (text, images) = input_with("read this", Some(&saved));
        assert!(text.starts_with(
            "read this\n\n[document saved in your workspace at inbox/2026-12-02/a.pdf"
        ));
        assert!(images.is_empty());
        assert_eq!(input_with("", Some(&saved)).0, saved.note());
    }
}
