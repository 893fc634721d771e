//! The inbound side of the fake Bot API: building updates as Telegram does (users, chats,
//! entities, files), getUpdates (offsets, long poll, 409s), the webhook methods and the
//! webhook delivery thread.

use std::io::ErrorKind;
use std::net::TcpStream;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{
    BOT_ID, BOT_USERNAME, Params, Reply, Shared, State, StoredFile, Webhook, bad, error, hang,
    lock, now, ok,
};

pub(super) const CONFLICT_POLL: &str = "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running";
const CONFLICT_WEBHOOK: &str = "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first";
const CONFLICT_SET_WEBHOOK: &str = "Conflict: terminated by setWebhook request";

/// How often a held poll looks at its client's socket and the webhook.
const POLL_TICK: Duration = Duration::from_millis(50);

pub(super) fn user(id: i64) -> Value {
    json!({"id": id, "is_bot": false, "first_name": format!("User{id}"),
           "username": format!("user{id}"), "language_code": "en"})
}

pub(super) fn bot_user() -> Value {
    json!({"id": BOT_ID, "is_bot": true, "first_name": "Warren Test", "username": BOT_USERNAME})
}

/// getMe's answer.
pub(super) fn bot_user_full() -> Value {
    let mut me = bot_user();
    if let Some(o) = me.as_object_mut() {
        o.insert("can_join_groups".into(), json!(true));
        o.insert("can_read_all_group_messages".into(), json!(false));
        o.insert("supports_inline_queries".into(), json!(false));
        o.insert("can_connect_to_business".into(), json!(false));
        o.insert("has_main_web_app".into(), json!(false));
    }
    me
}

pub(super) fn private_chat(id: i64) -> Value {
    json!({"id": id, "type": "private", "first_name": format!("User{id}"),
           "username": format!("user{id}")})
}

/// Sets `text` and the entities Telegram derives from it: a leading `/command` (with an
/// optional `@bot`) and `@mentions`, offsets and lengths in UTF-16 units.
pub(super) fn set_text(message: &mut Value, text: &str) {
    message["text"] = json!(text);
    let mut entities = Vec::new();
    let mut offset = 0usize;
    let mut token_start: Option<(usize, usize)> = None; // (byte, utf16)
    let push = |from: (usize, usize), end_byte: usize, entities: &mut Vec<Value>| {
        let word = &text[from.0..end_byte];
        let name_len = |w: &str| {
            w.chars()
                .skip(1)
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '@')
                .count()
        };
        if word.starts_with('/') && from.0 == 0 && name_len(word) > 0 {
            entities
                .push(json!({"type": "bot_command", "offset": 0, "length": 1 + name_len(word)}));
        } else if word.starts_with('@') && name_len(word) > 0 {
            entities
                .push(json!({"type": "mention", "offset": from.1, "length": 1 + name_len(word)}));
        }
    };
    for (i, c) in text.char_indices() {
        if c.is_whitespace() {
            if let Some(from) = token_start.take() {
                push(from, i, &mut entities);
            }
        } else if token_start.is_none() {
            token_start = Some((i, offset));
        }
        offset += c.len_utf16();
    }
    if let Some(from) = token_start {
        push(from, text.len(), &mut entities);
    }
    if !entities.is_empty() {
        message["entities"] = Value::Array(entities);
    }
}

/// The bot's last message in `chat`, or one made up (and stored) for a reply to point at.
pub(super) fn bot_message_to_reply(st: &mut State, chat: &Value) -> Value {
    let chat_id = chat["id"].as_i64().unwrap_or_default();
    st.chats.insert(chat_id, chat.clone());
    let last = st
        .messages
        .iter()
        .filter(|((c, _), m)| *c == chat_id && m["from"]["id"].as_i64() == Some(BOT_ID))
        .max_by_key(|((_, id), _)| *id)
        .map(|(_, m)| m.clone());
    last.unwrap_or_else(|| {
        let message_id = st.message_id(chat_id);
        let m = json!({"message_id": message_id, "from": bot_user(), "chat": chat,
                       "date": now(), "text": "(an earlier message of the bot)"});
        st.messages.insert((chat_id, message_id), m.clone());
        m
    })
}

/// Stores `bytes` as a new file under `dir`; returns `{file_id, file_unique_id, file_size}`.
pub(super) fn store_file(st: &mut State, dir: &str, ext: &str, bytes: Vec<u8>) -> Value {
    st.next_file += 1;
    let n = st.next_file;
    let file_id = format!("BQACAgIAAxkBAAI{n:06}FakeFileId");
    let unique_id = format!("AgAD{n:04}");
    let size = bytes.len();
    st.files.insert(
        file_id.clone(),
        StoredFile {
            unique_id: unique_id.clone(),
            path: format!("{dir}/file_{n}.{ext}"),
            bytes,
        },
    );
    json!({"file_id": file_id, "file_unique_id": unique_id, "file_size": size})
}

/// Appends one update of `kind` (`message`, `callback_query`) unless the bot's sticky
/// `allowed_updates` excludes it (Telegram then never creates it); returns its id.
pub(super) fn push(
    shared: &Shared,
    mut st: MutexGuard<'_, State>,
    kind: &str,
    payload: Value,
) -> i64 {
    let id = st.next_update_id;
    st.next_update_id += 1;
    let update = json!({"update_id": id, kind: payload});
    st.history.insert(id, update.clone());
    let allowed = st
        .allowed_updates
        .as_ref()
        .is_none_or(|a| a.iter().any(|k| k == kind));
    if allowed {
        st.updates.push_back((id, update));
    }
    drop(st);
    shared.changed.notify_all();
    id
}

/// Confirms by `offset`: a positive one drops every update below it; a negative one keeps
/// only the last `-offset` updates.
fn confirm(st: &mut State, offset: i64) {
    if offset > 0 {
        while st.updates.front().is_some_and(|(id, _)| *id < offset) {
            st.updates.pop_front();
        }
        st.confirmed_offset = st.confirmed_offset.max(offset);
    } else if offset < 0 {
        let keep = usize::try_from(offset.unsigned_abs()).unwrap_or(usize::MAX);
        while st.updates.len() > keep {
            st.updates.pop_front();
        }
        let first = st.updates.front().map_or(st.next_update_id, |(id, _)| *id);
        st.confirmed_offset = st.confirmed_offset.max(first);
    }
}

/// getUpdates: 409 while a webhook is set or another poll is held; confirms by `offset`; holds
/// up to `timeout` seconds until an update is there; `[]` at the timeout.
pub(super) fn get_updates(shared: &Shared, stream: &TcpStream, p: &Params<'_>) -> Reply {
    let mut st = lock(shared);
    if st.webhook.is_some() {
        return error(409, CONFLICT_WEBHOOK);
    }
    if st.polling {
        return error(409, CONFLICT_POLL);
    }
    if let Some(offset) = p.int("offset") {
        confirm(&mut st, offset);
    }
    if let Some(Value::Array(kinds)) = p.json("allowed_updates") {
        let kinds: Vec<String> = kinds
            .iter()
            .filter_map(|k| k.as_str().map(str::to_string))
            .collect();
        st.allowed_updates = (!kinds.is_empty()).then_some(kinds);
    }
    let limit = usize::try_from(p.int("limit").unwrap_or(100).clamp(1, 100)).unwrap_or(100);
    let timeout = u64::try_from(p.int("timeout").unwrap_or(0)).unwrap_or(0);
    let deadline = Instant::now() + Duration::from_secs(timeout);
    st.polling = true;
    loop {
        let ready: Vec<Value> = st
            .updates
            .iter()
            .take(limit)
            .map(|(_, u)| u.clone())
            .collect();
        if !ready.is_empty() || st.stop || Instant::now() >= deadline {
            st.polling = false;
            drop(st);
            shared.changed.notify_all();
            return ok(Value::Array(ready));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        st = shared
            .changed
            .wait_timeout(st, left.min(POLL_TICK))
            .map_or_else(|p| p.into_inner().0, |(g, _)| g);
        if st.webhook.is_some() {
            st.polling = false;
            return error(409, CONFLICT_SET_WEBHOOK);
        }
        if client_gone(stream) {
            st.polling = false;
            return Reply::Silent;
        }
    }
}

/// Whether the client of a held request has closed its socket.
fn client_gone(stream: &TcpStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return true;
    }
    let mut byte = [0u8; 1];
    let gone = match stream.peek(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted),
    };
    let _ = stream.set_nonblocking(false);
    gone
}

/// setWebhook: `url` (empty removes the webhook; `http://` is accepted, as a self-hosted Bot
/// API server does), `secret_token`, `drop_pending_updates`, `allowed_updates`. A held poll
/// ends with 409.
pub(super) fn set_webhook(shared: &Shared, p: &Params<'_>) -> Reply {
    let url = p.string("url").unwrap_or_default();
    if url.is_empty() {
        return delete_webhook(shared, p);
    }
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        return bad("bad webhook: An HTTPS URL must be provided for webhook");
    }
    let secret = p.string("secret_token").filter(|s| !s.is_empty());
    if let Some(s) = &secret
        && (s.len() > 256
            || !s
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'))
    {
        return bad("secret token contains unallowed characters");
    }
    let mut st = lock(shared);
    if p.boolean("drop_pending_updates") {
        let next = st.next_update_id;
        confirm(&mut st, next);
    }
    if let Some(Value::Array(kinds)) = p.json("allowed_updates") {
        let kinds: Vec<String> = kinds
            .iter()
            .filter_map(|k| k.as_str().map(str::to_string))
            .collect();
        st.allowed_updates = (!kinds.is_empty()).then_some(kinds);
    }
    st.webhook = Some(Webhook { url, secret });
    st.webhook_error = None;
    drop(st);
    shared.changed.notify_all();
    Reply::Json(
        200,
        json!({"ok": true, "result": true, "description": "Webhook was set"}),
    )
}

/// deleteWebhook (`drop_pending_updates`).
pub(super) fn delete_webhook(shared: &Shared, p: &Params<'_>) -> Reply {
    let mut st = lock(shared);
    if p.boolean("drop_pending_updates") {
        let next = st.next_update_id;
        confirm(&mut st, next);
    }
    let had = st.webhook.take().is_some();
    drop(st);
    shared.changed.notify_all();
    let description = if had {
        "Webhook was deleted"
    } else {
        "Webhook is already deleted"
    };
    Reply::Json(
        200,
        json!({"ok": true, "result": true, "description": description}),
    )
}

/// getWebhookInfo.
pub(super) fn webhook_info(shared: &Shared) -> Reply {
    let st = lock(shared);
    let mut info = json!({"url": st.webhook.as_ref().map_or("", |w| w.url.as_str()),
                          "has_custom_certificate": false,
                          "pending_update_count": st.updates.len()});
    if st.webhook.is_some() {
        info["max_connections"] = json!(40);
        info["ip_address"] = json!("127.0.0.1");
        if let Some((date, message)) = &st.webhook_error {
            info["last_error_date"] = json!(date);
            info["last_error_message"] = json!(message);
        }
    }
    if let Some(a) = &st.allowed_updates {
        info["allowed_updates"] = json!(a);
    }
    ok(info)
}

/// The webhook delivery loop (one thread per server): while a webhook is set, POSTs the oldest
/// pending update to it (or to the test's target) until it answers 2xx, then the next; waits
/// 50 ms after a failure, doubling up to 1 s.
pub(super) fn deliver_webhooks(shared: &Shared) {
    const FIRST: Duration = Duration::from_millis(50);
    let mut backoff = FIRST;
    loop {
        let (url, secret, id, update) = {
            let mut st = lock(shared);
            loop {
                if st.stop {
                    return;
                }
                if let (Some(w), Some((id, u))) = (&st.webhook, st.updates.front()) {
                    let url = st.webhook_target.clone().unwrap_or_else(|| w.url.clone());
                    break (url, w.secret.clone(), *id, u.clone());
                }
                st = shared
                    .changed
                    .wait_timeout(st, Duration::from_millis(200))
                    .map_or_else(|p| p.into_inner().0, |(g, _)| g);
            }
        };
        let outcome = super::wire::post_webhook(&url, secret.as_deref(), &update.to_string());
        let mut st = lock(shared);
        match outcome {
            Ok(status) if (200..300).contains(&status) => {
                if st.updates.front().map(|(i, _)| *i) == Some(id) {
                    st.updates.pop_front();
                }
                st.confirmed_offset = st.confirmed_offset.max(id + 1);
                drop(st);
                shared.changed.notify_all();
                backoff = FIRST;
            }
            failed => {
                let message = match failed {
                    Ok(status) => format!("Wrong response from the webhook: {status}"),
                    Err(e) => e,
                };
                st.webhook_error = Some((now(), message));
                drop(st);
                hang(shared, Some(Instant::now() + backoff));
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}
