//! Media from Telegram through the real daemon (issue 38 §5): a photo is saved into the
//! agent's workspace under `inbox/<date>/` and reaches the provider as an image part, in the
//! OpenAI and in the Anthropic wire format (asserted on the fake LLM's recorded request body);
//! a document over `media_max_bytes` is refused with a message and nothing is written; a
//! document named `../../etc/x` lands sanitised inside `inbox/`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use warren_core::Image;
use warren_testkit::fake_llm::{FakeOpenAi, FakeReply};
use warren_testkit::telegram::FakeTelegram;
use warren_testkit::{DaemonChild, TempRoot, free_port, text};

use crate::common::{bin, fake_config, wait_until};

type R = Result<(), Box<dyn std::error::Error>>;

const WAIT: Duration = Duration::from_secs(30);
const OWNER: i64 = 7;

/// A daemon with agent `main` on `fake` and channel `telegram.home` on `tg` owned by
/// [`OWNER`], with `channel_extra` in the channel's table.
fn start(
    root: &TempRoot,
    fake: &FakeOpenAi,
    tg: &FakeTelegram,
    channel_extra: &str,
) -> Result<DaemonChild, Box<dyn std::error::Error>> {
    let config = fake_config(
        fake,
        "sk-media-secret",
        free_port()?,
        "",
        &format!(
            "\n[channels.telegram.home]\nagent = \"main\"\napi_base = \"{}\"\nowners = [\"{OWNER}\"]\n\
             poll_timeout_secs = 1\nhealth_window_secs = 10\n{channel_extra}\n",
            tg.api_base()
        ),
    );
    std::fs::create_dir_all(root.path())?;
    root.write_config(&config)?;
    let out = root.run(
        bin(),
        &["config", "set", "channels.telegram.home.token", tg.token()],
    )?;
    assert!(out.status.success(), "{:?}", text(&out));
    let mut daemon = DaemonChild::spawn(root.warren(bin(), &["daemon"]))?;
    daemon.wait_for("warren daemon ready", WAIT)?;
    Ok(daemon)
}

fn workspace(root: &TempRoot) -> PathBuf {
    root.path().join("agents").join("main").join("workspace")
}

/// Every file under `dir`, relative to it.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(rel) = path.strip_prefix(dir) {
                out.push(rel.display().to_string());
            }
        }
    }
    out.sort();
    out
}

fn reply_to_owner(tg: &FakeTelegram, needle: &str) -> Result<String, Box<dyn std::error::Error>> {
    let mut found = None;
    wait_until(&format!("a reply containing {needle:?}"), WAIT, || {
        found = tg
            .sent()
            .into_iter()
            .filter(|s| s.method == "sendMessage" && s.chat_id == OWNER)
            .filter_map(|s| s.text)
            .find(|t| t.contains(needle));
        Ok(found.is_some())
    })?;
    Ok(found.unwrap_or_default())
}

/// The last user message of the first request the fake LLM got.
fn user_message(fake: &FakeOpenAi) -> Value {
    let requests = fake.requests();
    let messages = requests
        .first()
        .map(|r| r.body["messages"].clone())
        .unwrap_or(Value::Null);
    messages
        .as_array()
        .and_then(|ms| ms.iter().rev().find(|m| m["role"] == "user").cloned())
        .unwrap_or(Value::Null)
}

/// A photo through `fake` (OpenAI or Anthropic): the full size is saved and sent as an image.
fn a_photo_reaches_the_provider(fake: FakeOpenAi, expect: impl Fn(&Image) -> Value) -> R {
    let (root, tg) = (TempRoot::new()?, FakeTelegram::start()?);
    let daemon = start(&root, &fake, &tg, "")?;
    fake.push(FakeReply::text("A red square."));
    let photo: Vec<u8> = (0..4000u32).map(|i| (i * 7 % 251) as u8).collect();
    tg.push_photo(OWNER, OWNER, photo.clone(), Some("what is this?"));
    reply_to_owner(&tg, "A red square.")?;
    let user = user_message(&fake);
    let parts = user["content"].as_array().cloned().unwrap_or_default();
    let image = Image::from_bytes("image/jpeg", &photo);
    assert!(
        parts.contains(&expect(&image)),
        "no image part of the full-size photo in {user}"
    );
    let text = parts
        .first()
        .map(|p| p["text"].to_string())
        .unwrap_or_default();
    assert!(
        text.contains("what is this?") && text.contains("inbox/"),
        "{text}"
    );
    let saved = files_under(&workspace(&root).join("inbox"));
    assert_eq!(saved.len(), 1, "{saved:?}");
    assert_eq!(
        std::fs::read(workspace(&root).join("inbox").join(&saved[0]))?,
        photo
    );
    stop(daemon)
}

fn stop(mut daemon: DaemonChild) -> R {
    daemon.signal("TERM")?;
    daemon.wait(WAIT)?;
    Ok(())
}

#[test]
fn a_photo_reaches_an_openai_provider_as_an_image_url_part_issue38() -> R {
    a_photo_reaches_the_provider(
        FakeOpenAi::start()?,
        |image| json!({"type": "image_url", "image_url": {"url": image.data_url()}}),
    )
}

#[test]
fn a_photo_reaches_an_anthropic_provider_as_a_base64_image_block_issue38() -> R {
    a_photo_reaches_the_provider(
        FakeOpenAi::start_anthropic()?,
        |image| json!({"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": image.base64}}),
    )
}

#[test]
fn an_oversized_document_is_refused_and_nothing_is_written_issue38() -> R {
    let (root, fake, tg) = (
        TempRoot::new()?,
        FakeOpenAi::start()?,
        FakeTelegram::start()?,
    );
    let daemon = start(&root, &fake, &tg, "media_max_bytes = 1000")?;
    tg.push_document(
        OWNER,
        OWNER,
        "big.bin",
        "application/octet-stream",
        vec![1; 5000],
    );
    let refusal = reply_to_owner(&tg, "too large")?;
    assert!(
        refusal.contains("1000 bytes") && refusal.contains("Nothing was saved"),
        "{refusal}"
    );
    assert!(
        files_under(&workspace(&root))
            .iter()
            .all(|f| !f.starts_with("inbox")),
        "{:?}",
        files_under(&workspace(&root))
    );
    assert!(fake.requests().is_empty(), "a refused file made a turn");
    assert!(
        !tg.requests().iter().any(|(m, _)| m == "getFile"),
        "the file was fetched although Telegram said it was too large"
    );
    stop(daemon)
}

#[test]
fn a_document_named_to_escape_lands_sanitised_inside_inbox_issue38() -> R {
    let (root, fake, tg) = (
        TempRoot::new()?,
        FakeOpenAi::start()?,
        FakeTelegram::start()?,
    );
    let daemon = start(&root, &fake, &tg, "")?;
    fake.push(FakeReply::text("Got the file."));
    tg.push_document(
        OWNER,
        OWNER,
        "../../etc/x",
        "text/plain",
        b"hello\n".to_vec(),
    );
    reply_to_owner(&tg, "Got the file.")?;
    let inbox = workspace(&root).join("inbox");
    let saved = files_under(&inbox);
    assert_eq!(saved.len(), 1, "{saved:?}");
    assert!(saved[0].ends_with("/etc_x"), "{saved:?}");
    assert_eq!(std::fs::read_to_string(inbox.join(&saved[0]))?, "hello\n");
    for outside in [
        root.path().join("agents").join("main").join("etc"),
        root.path().join("agents").join("etc"),
    ] {
        assert!(!outside.exists(), "{} was written", outside.display());
    }
    // The turn names the file's workspace path (a document is a note, not an image part).
    let user = user_message(&fake);
    let content = user["content"].as_str().unwrap_or_default();
    assert!(content.contains(&format!("inbox/{}", saved[0])), "{user}");
    stop(daemon)
}
