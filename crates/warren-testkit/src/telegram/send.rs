//! The outbound side of the fake Bot API: sendMessage, edits, files, chat actions, callback
//! answers, deleteMessage and getFile, with Telegram's checks and error texts; every accepted
//! call is recorded as a [`Sent`].

use serde_json::{Map, Value, json};

use super::updates::{bot_user, store_file};
use super::{BOT_ID, Params, Reply, Sent, Shared, State, bad, lock, now, ok, wire};

/// sendMessage's and editMessageText's text limit, in UTF-16 units after entity parsing.
pub(super) const TEXT_LIMIT: usize = 4096;
/// A caption's limit.
const CAPTION_LIMIT: usize = 1024;
const NOT_MODIFIED: &str = "message is not modified: specified new message content and reply \
                            markup are exactly the same as a current content and reply markup \
                            of the message";

/// The chat of a call: 400 "chat_id is empty" without one, "chat not found" for a chat the
/// bot has never seen.
fn chat(st: &State, p: &Params<'_>) -> Result<(i64, Value), Reply> {
    let Some(raw) = p.string("chat_id").filter(|s| !s.is_empty()) else {
        return Err(bad("chat_id is empty"));
    };
    let id: i64 = raw.trim().parse().map_err(|_| bad("chat not found"))?;
    st.chats
        .get(&id)
        .map(|c| (id, c.clone()))
        .ok_or_else(|| bad("chat not found"))
}

/// `parse_mode` as given, if Telegram knows it.
fn parse_mode(p: &Params<'_>) -> Result<Option<String>, Reply> {
    match p.string("parse_mode").filter(|m| !m.is_empty()) {
        None => Ok(None),
        Some(m)
            if ["markdownv2", "markdown", "html"].contains(&m.to_ascii_lowercase().as_str()) =>
        {
            Ok(Some(m))
        }
        Some(_) => Err(bad("unsupported parse_mode")),
    }
}

/// The length Telegram checks: UTF-16 units of the text after entity parsing. HTML: tags
/// removed, `&...;` entities one character; MarkdownV2/Markdown: escapes collapsed, the
/// markup characters and link targets removed (an approximation that never counts less than
/// Telegram for well-formed markup).
pub(super) fn visible_len(text: &str, parse_mode: Option<&str>) -> usize {
    let mode = parse_mode.map(str::to_ascii_lowercase);
    let mut n = 0;
    let mut chars = text.chars().peekable();
    match mode.as_deref() {
        Some("html") => {
            while let Some(c) = chars.next() {
                match c {
                    '<' => {
                        for d in chars.by_ref() {
                            if d == '>' {
                                break;
                            }
                        }
                    }
                    '&' => {
                        for d in chars.by_ref() {
                            if d == ';' {
                                break;
                            }
                        }
                        n += 1;
                    }
                    c => n += c.len_utf16(),
                }
            }
        }
        Some("markdownv2") | Some("markdown") => {
            while let Some(c) = chars.next() {
                match c {
                    '\\' => n += chars.next().map_or(0, char::len_utf16),
                    '*' | '_' | '~' | '|' | '`' | '[' => {}
                    ']' if chars.peek() == Some(&'(') => {
                        for d in chars.by_ref() {
                            if d == ')' {
                                break;
                            }
                        }
                    }
                    ']' => {}
                    c => n += c.len_utf16(),
                }
            }
        }
        _ => n = text.encode_utf16().count(),
    }
    n
}

/// `reply_markup`, checked: an inline button's `callback_data` is 1-64 bytes.
fn reply_markup(p: &Params<'_>) -> Result<Option<Value>, Reply> {
    let Some(markup) = p.json("reply_markup") else {
        return Ok(None);
    };
    let buttons = markup["inline_keyboard"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_array)
        .flatten();
    for b in buttons {
        if let Some(data) = b.get("callback_data").and_then(Value::as_str)
            && (data.is_empty() || data.len() > 64)
        {
            return Err(bad("BUTTON_DATA_INVALID"));
        }
        if b.get("text").and_then(Value::as_str).is_none() {
            return Err(bad(
                "can't parse inline keyboard button: Field \"text\" must be of type String",
            ));
        }
        let actions = [
            "callback_data",
            "url",
            "web_app",
            "login_url",
            "switch_inline_query",
            "switch_inline_query_current_chat",
            "copy_text",
            "pay",
        ];
        if !actions.iter().any(|a| b.get(a).is_some()) {
            return Err(bad(
                "can't parse inline keyboard button: Text buttons are unallowed in the inline keyboard",
            ));
        }
    }
    Ok(Some(markup))
}

/// The message a call replies to: `reply_to_message_id` or `reply_parameters.message_id`.
fn reply_to(p: &Params<'_>) -> Option<i64> {
    p.int("reply_to_message_id").or_else(|| {
        p.json("reply_parameters")
            .and_then(|r| r["message_id"].as_i64())
    })
}

/// Records an accepted call and wakes waiters.
#[allow(clippy::too_many_arguments)]
fn record(
    shared: &Shared,
    mut st: std::sync::MutexGuard<'_, State>,
    method: &str,
    chat_id: i64,
    message_id: Option<i64>,
    text: Option<String>,
    p: &Params<'_>,
    params: Map<String, Value>,
    file: Option<(String, Vec<u8>)>,
) {
    st.sent.push(Sent {
        method: method.to_string(),
        chat_id,
        message_id,
        text,
        parse_mode: p.string("parse_mode"),
        reply_markup: p.json("reply_markup"),
        message_thread_id: p.int("message_thread_id"),
        reply_to_message_id: reply_to(p),
        body: Value::Object(params),
        file,
    });
    drop(st);
    shared.changed.notify_all();
}

/// A new bot message in `chat` with the common fields of a send.
fn new_message(
    st: &mut State,
    chat_id: i64,
    chat: Value,
    p: &Params<'_>,
    markup: Option<&Value>,
) -> Result<Value, Reply> {
    let replied = match reply_to(p) {
        None => None,
        Some(id) => match st.messages.get(&(chat_id, id)) {
            Some(m) => Some(m.clone()),
            None if p.boolean("allow_sending_without_reply")
                || p.json("reply_parameters")
                    .is_some_and(|r| r["allow_sending_without_reply"] == json!(true)) =>
            {
                None
            }
            None => return Err(bad("message to be replied not found")),
        },
    };
    let message_id = st.message_id(chat_id);
    let mut m = json!({"message_id": message_id, "from": bot_user(), "chat": chat, "date": now()});
    if let Some(thread) = p.int("message_thread_id") {
        m["message_thread_id"] = json!(thread);
        m["is_topic_message"] = json!(true);
    }
    if let Some(r) = replied {
        m["reply_to_message"] = r;
    }
    if let Some(k) = markup.filter(|k| k.get("inline_keyboard").is_some()) {
        m["reply_markup"] = k.clone();
    }
    Ok(m)
}

macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(reply) => return reply,
        }
    };
}

/// sendMessage.
pub(super) fn send_message(shared: &Shared, p: &Params<'_>, params: Map<String, Value>) -> Reply {
    let mut st = lock(shared);
    let (chat_id, chat) = tri!(chat(&st, p));
    let text = p.string("text").unwrap_or_default();
    if text.trim().is_empty() {
        return bad("message text is empty");
    }
    let mode = tri!(parse_mode(p));
    if visible_len(&text, mode.as_deref()) > TEXT_LIMIT {
        return bad("message is too long");
    }
    let markup = tri!(reply_markup(p));
    let mut m = tri!(new_message(&mut st, chat_id, chat, p, markup.as_ref()));
    m["text"] = json!(text);
    let id = m["message_id"].as_i64();
    st.messages
        .insert((chat_id, id.unwrap_or_default()), m.clone());
    record(
        shared,
        st,
        "sendMessage",
        chat_id,
        id,
        Some(text),
        p,
        params,
        None,
    );
    ok(m)
}

/// The bot's own message `message_id` of the call's chat, for an edit.
fn own_message(st: &State, p: &Params<'_>) -> Result<(i64, i64, Value), Reply> {
    let (chat_id, _) = chat(st, p)?;
    let Some(message_id) = p.int("message_id") else {
        return Err(bad("message identifier is not specified"));
    };
    let m = st
        .messages
        .get(&(chat_id, message_id))
        .ok_or_else(|| bad("message to edit not found"))?;
    if m["from"]["id"].as_i64() != Some(BOT_ID) {
        return Err(bad("message can't be edited"));
    }
    Ok((chat_id, message_id, m.clone()))
}

/// editMessageText: the text and the inline keyboard (absent: removed, as Telegram does).
pub(super) fn edit_text(shared: &Shared, p: &Params<'_>, params: Map<String, Value>) -> Reply {
    if p.string("inline_message_id").is_some() {
        return ok(json!(true));
    }
    let mut st = lock(shared);
    let (chat_id, message_id, old) = tri!(own_message(&st, p));
    let text = p.string("text").unwrap_or_default();
    if text.trim().is_empty() {
        return bad("message text is empty");
    }
    let mode = tri!(parse_mode(p));
    if visible_len(&text, mode.as_deref()) > TEXT_LIMIT {
        return bad("message is too long");
    }
    let markup = tri!(reply_markup(p));
    if old["text"] == json!(text) && old.get("reply_markup") == markup.as_ref() {
        return bad(NOT_MODIFIED);
    }
    let mut m = old;
    m["text"] = json!(text);
    m["edit_date"] = json!(now());
    set_markup(&mut m, markup);
    st.messages.insert((chat_id, message_id), m.clone());
    record(
        shared,
        st,
        "editMessageText",
        chat_id,
        Some(message_id),
        Some(text),
        p,
        params,
        None,
    );
    ok(m)
}

fn set_markup(m: &mut Value, markup: Option<Value>) {
    if let Some(o) = m.as_object_mut() {
        match markup {
            Some(k) => o.insert("reply_markup".into(), k),
            None => o.remove("reply_markup"),
        };
    }
}

/// editMessageReplyMarkup (absent markup removes the keyboard).
pub(super) fn edit_markup(shared: &Shared, p: &Params<'_>, params: Map<String, Value>) -> Reply {
    if p.string("inline_message_id").is_some() {
        return ok(json!(true));
    }
    let mut st = lock(shared);
    let (chat_id, message_id, old) = tri!(own_message(&st, p));
    let markup = tri!(reply_markup(p));
    if old.get("reply_markup") == markup.as_ref() {
        return bad(NOT_MODIFIED);
    }
    let mut m = old;
    m["edit_date"] = json!(now());
    set_markup(&mut m, markup);
    st.messages.insert((chat_id, message_id), m.clone());
    record(
        shared,
        st,
        "editMessageReplyMarkup",
        chat_id,
        Some(message_id),
        None,
        p,
        params,
        None,
    );
    ok(m)
}

/// sendDocument / sendPhoto: the file uploaded (multipart) or a known `file_id`.
pub(super) fn send_file(
    shared: &Shared,
    p: &Params<'_>,
    params: Map<String, Value>,
    request: &wire::Request,
    method: &str,
) -> Reply {
    let field = if method == "sendPhoto" {
        "photo"
    } else {
        "document"
    };
    let mut st = lock(shared);
    let (chat_id, chat) = tri!(chat(&st, p));
    let caption = p.string("caption");
    let mode = tri!(parse_mode(p));
    if caption
        .as_deref()
        .is_some_and(|c| visible_len(c, mode.as_deref()) > CAPTION_LIMIT)
    {
        return bad("message caption is too long");
    }
    let markup = tri!(reply_markup(p));
    let (name, bytes, file) = if let Some((name, bytes)) = request.files.get(field) {
        let ext = name.rsplit_once('.').map_or("bin", |(_, e)| e);
        let dir = if field == "photo" {
            "photos"
        } else {
            "documents"
        };
        let file = store_file(&mut st, dir, ext, bytes.clone());
        (name.clone(), bytes.clone(), file)
    } else if let Some(id) = p.string(field).filter(|s| !s.is_empty()) {
        let Some(f) = st.files.get(&id) else {
            return bad("wrong file identifier/HTTP URL specified");
        };
        let name = f.path.rsplit('/').next().unwrap_or_default().to_string();
        let file = json!({"file_id": id, "file_unique_id": f.unique_id,
                          "file_size": f.bytes.len()});
        (name, f.bytes.clone(), file)
    } else {
        return bad(&format!("there is no {field} in the request"));
    };
    let mut m = tri!(new_message(&mut st, chat_id, chat, p, markup.as_ref()));
    if field == "photo" {
        m["photo"] = json!([file]);
    } else {
        let mut doc = file;
        doc["file_name"] = json!(name);
        doc["mime_type"] = json!(mime_of(&name));
        m["document"] = doc;
    }
    if let Some(c) = &caption {
        m["caption"] = json!(c);
    }
    let id = m["message_id"].as_i64();
    st.messages
        .insert((chat_id, id.unwrap_or_default()), m.clone());
    record(
        shared,
        st,
        method,
        chat_id,
        id,
        caption,
        p,
        params,
        Some((name, bytes)),
    );
    ok(m)
}

fn mime_of(name: &str) -> &'static str {
    match name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .as_deref()
    {
        Some("txt" | "md") => "text/plain",
        Some("pdf") => "application/pdf",
        Some("json") => "application/json",
        Some("png") => "image/png",
        Some("jpg" | "jpeg") => "image/jpeg",
        Some("zip") => "application/zip",
        _ => "application/octet-stream",
    }
}

/// sendChatAction.
pub(super) fn chat_action(shared: &Shared, p: &Params<'_>, params: Map<String, Value>) -> Reply {
    const ACTIONS: &[&str] = &[
        "typing",
        "upload_photo",
        "record_video",
        "upload_video",
        "record_voice",
        "upload_voice",
        "upload_document",
        "choose_sticker",
        "find_location",
        "record_video_note",
        "upload_video_note",
    ];
    let st = lock(shared);
    let (chat_id, _) = tri!(chat(&st, p));
    if !p
        .string("action")
        .is_some_and(|a| ACTIONS.contains(&a.as_str()))
    {
        return bad("wrong parameter action in request");
    }
    record(
        shared,
        st,
        "sendChatAction",
        chat_id,
        None,
        None,
        p,
        params,
        None,
    );
    ok(json!(true))
}

/// answerCallbackQuery: once per query id.
pub(super) fn answer_callback(
    shared: &Shared,
    p: &Params<'_>,
    params: Map<String, Value>,
) -> Reply {
    let mut st = lock(shared);
    let id = p.string("callback_query_id").unwrap_or_default();
    let Some((chat_id, message_id)) = st.callbacks.remove(&id) else {
        return bad("query is too old and response timeout expired or query ID is invalid");
    };
    let text = p.string("text");
    record(
        shared,
        st,
        "answerCallbackQuery",
        chat_id,
        Some(message_id),
        text,
        p,
        params,
        None,
    );
    ok(json!(true))
}

/// deleteMessage.
pub(super) fn delete_message(shared: &Shared, p: &Params<'_>, params: Map<String, Value>) -> Reply {
    let mut st = lock(shared);
    let (chat_id, _) = tri!(chat(&st, p));
    let message_id = p.int("message_id").unwrap_or_default();
    if st.messages.remove(&(chat_id, message_id)).is_none() {
        return bad("message to delete not found");
    }
    record(
        shared,
        st,
        "deleteMessage",
        chat_id,
        Some(message_id),
        None,
        p,
        params,
        None,
    );
    ok(json!(true))
}

/// getFile.
pub(super) fn get_file(shared: &Shared, p: &Params<'_>) -> Reply {
    let st = lock(shared);
    let id = p.string("file_id").unwrap_or_default();
    match st.files.get(&id) {
        Some(f) => ok(json!({"file_id": id, "file_unique_id": f.unique_id,
                             "file_size": f.bytes.len(), "file_path": f.path})),
        None => bad("invalid file_id"),
    }
}
