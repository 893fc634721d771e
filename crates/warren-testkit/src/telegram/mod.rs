//! A local Telegram Bot API server speaking the real wire format (issue 38 §Tests;
//! <https://core.telegram.org/bots/api>): methods at `{api_base}/bot{token}/{method}` (GET with
//! a query string, or POST with a JSON, form or multipart body), files at
//! `{api_base}/file/bot{token}/{file_path}`, answers `{"ok":true,"result":...}` or
//! `{"ok":false,"error_code":N,"description":"...","parameters":{"retry_after":S}}`.
//!
//! What it does as Telegram does: long polling with `offset` (an update below the offset is
//! confirmed and gone; a negative offset keeps the last `-offset`), `limit`, `timeout` and a
//! sticky `allowed_updates`; a second getUpdates while one is held gets 409 "terminated by other
//! getUpdates request" (a held poll whose client closed its socket is let go); getUpdates while
//! a webhook is set gets 409, and setWebhook ends a held poll with 409; with a webhook, each
//! update is POSTed (in order, one at a time) with `X-Telegram-Bot-Api-Secret-Token` until the
//! receiver answers 2xx; sendMessage over 4,096 UTF-16 units (of the text after entity parsing)
//! is 400 "message is too long"; a chat the bot has never seen is 400 "chat not found" (a user
//! must write first, or [`FakeTelegram::know_chat`]); edits of unknown messages, unchanged
//! edits ("message is not modified"), stale callback query ids, unknown file ids and replies to
//! unknown messages get Telegram's 400s. Markup is not parsed: a rejected markup is
//! [`Fault::BadMarkup`]. Every request is recorded ([`FakeTelegram::requests`]) and every call
//! that reaches a chat ([`FakeTelegram::sent`]). Each connection is answered with
//! `Connection: close`. Dropping the server stops it and lets every held request go.

mod send;
mod updates;
mod wire;

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

/// The bot token the fake accepts; any other gets 401.
pub const TOKEN: &str = "123456:TEST-TOKEN";
/// The bot's user id (a token's prefix is its bot's id).
pub const BOT_ID: i64 = 123_456;
/// The bot's username (getMe).
pub const BOT_USERNAME: &str = "warren_test_bot";

/// A fault for the next call of one method ([`FakeTelegram::fail_next`]). A fault answers the
/// call instead of the method: nothing is confirmed, sent or recorded in [`FakeTelegram::sent`]
/// (except [`Fault::LoseResponse`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// 409 "Conflict: terminated by other getUpdates request; make sure that only one bot
    /// instance is running".
    Conflict409,
    /// 429 "Too Many Requests: retry after S" with `parameters.retry_after`.
    RetryAfter(u32),
    /// 400 "Bad Request: message is too long".
    TooLong,
    /// 400 "Bad Request: can't parse entities: ...".
    BadMarkup,
    /// This status with Telegram's description for it (500, 502, ...).
    ServerError(u16),
    /// Read the request, then close the socket without an answer.
    DropConnection,
    /// Read the request and say nothing for this long, then close the socket.
    Hang(Duration),
    /// Read the request and say nothing until the server is dropped.
    HangForever,
    /// Do the call (the message is sent and recorded), then close the socket without an
    /// answer: the client cannot know it succeeded.
    LoseResponse,
}

/// One call the bot made that reaches a chat, in order: sendMessage, editMessageText,
/// editMessageReplyMarkup, sendDocument, sendPhoto, sendChatAction, answerCallbackQuery,
/// deleteMessage. Only calls Telegram accepted are recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Sent {
    pub method: String,
    pub chat_id: i64,
    /// The new message's id (sends), the edited or deleted one (edits), the callback's message
    /// (answerCallbackQuery); `None` for sendChatAction.
    pub message_id: Option<i64>,
    /// `text`, or the `caption` of a document or photo, or answerCallbackQuery's `text`.
    pub text: Option<String>,
    pub parse_mode: Option<String>,
    /// Decoded (a JSON-serialized string parameter is parsed).
    pub reply_markup: Option<Value>,
    pub message_thread_id: Option<i64>,
    /// `reply_to_message_id`, or `reply_parameters.message_id`.
    pub reply_to_message_id: Option<i64>,
    /// Every parameter as received (form and query values as strings).
    pub body: Value,
    /// An uploaded file: (file name, bytes).
    pub file: Option<(String, Vec<u8>)>,
}

/// The methods [`FakeTelegram::wait_sent`] counts: those that put a new message in a chat.
pub const MESSAGE_METHODS: &[&str] = &["sendMessage", "sendDocument", "sendPhoto"];

/// The fake server (see the module doc). Dropping it stops it.
pub struct FakeTelegram {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Signalled on every change (an update pushed, a message sent, a webhook set, stop).
    changed: Condvar,
}

/// A stored file: what getFile answers and the download serves.
struct StoredFile {
    unique_id: String,
    path: String,
    bytes: Vec<u8>,
}

/// A set webhook.
struct Webhook {
    url: String,
    secret: Option<String>,
}

#[derive(Default)]
struct State {
    stop: bool,
    next_update_id: i64,
    /// Updates not yet confirmed, oldest first.
    updates: VecDeque<(i64, Value)>,
    /// Every update ever pushed.
    history: HashMap<i64, Value>,
    confirmed_offset: i64,
    /// A getUpdates is being held.
    polling: bool,
    allowed_updates: Option<Vec<String>>,
    webhook: Option<Webhook>,
    webhook_target: Option<String>,
    webhook_error: Option<(i64, String)>,
    /// Chats the bot has seen: id -> the `chat` object.
    chats: HashMap<i64, Value>,
    next_message_id: HashMap<i64, i64>,
    /// Messages by (chat id, message id).
    messages: HashMap<(i64, i64), Value>,
    files: HashMap<String, StoredFile>,
    next_file: u64,
    /// Callback query id -> (chat id, message id).
    callbacks: HashMap<String, (i64, i64)>,
    next_callback: u64,
    sent: Vec<Sent>,
    requests: Vec<(String, Value)>,
    /// Calls answered with an error: (method, status, description).
    refused: Vec<(String, u16, String)>,
    faults: HashMap<String, VecDeque<Fault>>,
}

impl State {
    fn message_id(&mut self, chat_id: i64) -> i64 {
        let next = self.next_message_id.entry(chat_id).or_insert(1);
        let id = *next;
        *next += 1;
        id
    }
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.state.lock().unwrap_or_else(|p| p.into_inner())
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl FakeTelegram {
    /// Starts a server on a free port of 127.0.0.1.
    pub fn start() -> io::Result<FakeTelegram> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                next_update_id: 10_000,
                ..State::default()
            }),
            changed: Condvar::new(),
        });
        let s = Arc::clone(&shared);
        thread::spawn(move || {
            for stream in listener.incoming() {
                if lock(&s).stop {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let s = Arc::clone(&s);
                thread::spawn(move || serve(stream, &s));
            }
        });
        let s = Arc::clone(&shared);
        thread::spawn(move || updates::deliver_webhooks(&s));
        Ok(FakeTelegram { addr, shared })
    }

    /// The bot token this server accepts (`123456:TEST-TOKEN`).
    pub fn token(&self) -> &str {
        TOKEN
    }

    /// `http://127.0.0.1:PORT`.
    pub fn api_base(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn bot_user_id(&self) -> i64 {
        BOT_ID
    }

    pub fn bot_username(&self) -> &str {
        BOT_USERNAME
    }

    /// A private message from user `from_id` in chat `chat_id` (a user's private chat id is
    /// their user id). Returns the update id.
    pub fn push_text(&self, chat_id: i64, from_id: i64, text: &str) -> i64 {
        self.push_message(updates::private_chat(chat_id), from_id, |m| {
            updates::set_text(m, text);
        })
    }

    /// A message in a basic group; `reply_to_bot` makes it a reply to the bot's last message
    /// there (or to a bot message made up for it). Mention the bot by writing `@{username}`.
    pub fn push_group_text(
        &self,
        chat_id: i64,
        from_id: i64,
        text: &str,
        reply_to_bot: bool,
    ) -> i64 {
        let chat = json!({"id": chat_id, "type": "group", "title": format!("Group {chat_id}"),
                          "all_members_are_administrators": true});
        let mut st = lock(&self.shared);
        let replied = reply_to_bot.then(|| updates::bot_message_to_reply(&mut st, &chat));
        drop(st);
        self.push_message(chat, from_id, |m| {
            updates::set_text(m, text);
            if let Some(r) = replied {
                m["reply_to_message"] = r;
            }
        })
    }

    /// A message in topic `thread_id` of a forum supergroup (`is_forum`, `message_thread_id`,
    /// `is_topic_message`).
    pub fn push_topic_text(&self, chat_id: i64, thread_id: i64, from_id: i64, text: &str) -> i64 {
        let chat = json!({"id": chat_id, "type": "supergroup", "title": format!("Forum {chat_id}"),
                          "is_forum": true});
        self.push_message(chat, from_id, |m| {
            updates::set_text(m, text);
            m["message_thread_id"] = json!(thread_id);
            m["is_topic_message"] = json!(true);
        })
    }

    /// A photo in a private chat: `photo` holds two sizes, ascending as Telegram sends them: a
    /// thumbnail (file of the first quarter of `bytes`, so a test can tell which was fetched)
    /// and the full size (all of `bytes`).
    pub fn push_photo(
        &self,
        chat_id: i64,
        from_id: i64,
        bytes: Vec<u8>,
        caption: Option<&str>,
    ) -> i64 {
        let thumb = bytes[..bytes.len() / 4].to_vec();
        let mut st = lock(&self.shared);
        let small = updates::store_file(&mut st, "photos", "jpg", thumb);
        let large = updates::store_file(&mut st, "photos", "jpg", bytes);
        drop(st);
        self.push_message(updates::private_chat(chat_id), from_id, |m| {
            m["photo"] = json!([
                with(&small, &[("width", json!(90)), ("height", json!(60))]),
                with(&large, &[("width", json!(1280)), ("height", json!(853))]),
            ]);
            if let Some(c) = caption {
                m["caption"] = json!(c);
            }
        })
    }

    /// A document (`file_name`, `mime_type`, `file_id`, `file_unique_id`, `file_size`).
    pub fn push_document(
        &self,
        chat_id: i64,
        from_id: i64,
        name: &str,
        mime: &str,
        bytes: Vec<u8>,
    ) -> i64 {
        let ext = name.rsplit_once('.').map_or("bin", |(_, e)| e).to_string();
        let file = updates::store_file(&mut lock(&self.shared), "documents", &ext, bytes);
        self.push_message(updates::private_chat(chat_id), from_id, |m| {
            m["document"] = with(
                &file,
                &[("file_name", json!(name)), ("mime_type", json!(mime))],
            );
        })
    }

    /// A voice note (`audio/ogg`, `duration` in seconds).
    pub fn push_voice(&self, chat_id: i64, from_id: i64, bytes: Vec<u8>, duration: u32) -> i64 {
        let file = updates::store_file(&mut lock(&self.shared), "voice", "oga", bytes);
        self.push_message(updates::private_chat(chat_id), from_id, |m| {
            m["voice"] = with(
                &file,
                &[
                    ("duration", json!(duration)),
                    ("mime_type", json!("audio/ogg")),
                ],
            );
        })
    }

    /// A button press: a `callback_query` update with a fresh query id, `data`, and the
    /// message `message_id` of chat `chat_id` the button is on (as the bot sent it, or made up
    /// when the fake does not know it).
    pub fn push_callback(&self, chat_id: i64, from_id: i64, message_id: i64, data: &str) -> i64 {
        let mut st = lock(&self.shared);
        st.next_callback += 1;
        let id = format!("{}", 4_242_000_000_000_000_000u64 + st.next_callback);
        st.callbacks.insert(id.clone(), (chat_id, message_id));
        let chat = st
            .chats
            .get(&chat_id)
            .cloned()
            .unwrap_or_else(|| updates::private_chat(chat_id));
        st.chats.insert(chat_id, chat.clone());
        let message = st
            .messages
            .get(&(chat_id, message_id))
            .cloned()
            .unwrap_or_else(|| {
                json!({"message_id": message_id, "from": updates::bot_user(), "chat": chat,
                   "date": now(), "text": ""})
            });
        let query = json!({"id": id, "from": updates::user(from_id), "message": message,
                           "chat_instance": format!("{}", chat_id.unsigned_abs() * 7 + 1),
                           "data": data});
        updates::push(&self.shared, st, "callback_query", query)
    }

    /// Makes chat `chat_id` known, as if its user had started the bot earlier (a private chat
    /// whose id is the user's id), without an update.
    pub fn know_chat(&self, chat_id: i64) {
        lock(&self.shared)
            .chats
            .entry(chat_id)
            .or_insert_with(|| updates::private_chat(chat_id));
    }

    /// The update `update_id` as it was pushed (for its message id, the file ids).
    pub fn update(&self, update_id: i64) -> Option<Value> {
        lock(&self.shared).history.get(&update_id).cloned()
    }

    /// Every accepted call that reaches a chat, in order (see [`Sent`]).
    pub fn sent(&self) -> Vec<Sent> {
        lock(&self.shared).sent.clone()
    }

    /// Waits until the bot has put at least `n` messages in chats ([`MESSAGE_METHODS`]) and
    /// returns those sends, in order; panics with what was sent on timeout.
    pub fn wait_sent(&self, n: usize, timeout: Duration) -> Vec<Sent> {
        let deadline = Instant::now() + timeout;
        let mut st = lock(&self.shared);
        loop {
            let messages: Vec<Sent> = st
                .sent
                .iter()
                .filter(|s| MESSAGE_METHODS.contains(&s.method.as_str()))
                .cloned()
                .collect();
            if messages.len() >= n {
                return messages;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let all = st.sent.clone();
                let polls = st
                    .requests
                    .iter()
                    .filter(|(m, _)| m == "getUpdates")
                    .count();
                let others: Vec<&Value> = st
                    .requests
                    .iter()
                    .filter(|(m, _)| m != "getUpdates")
                    .map(|(_, p)| p)
                    .collect();
                let hint = if st.refused.iter().any(|r| r.2.ends_with("chat not found")) {
                    "\n(\"chat not found\": the bot may write only to chats that wrote to it; \
                     push a message from that chat first or call FakeTelegram::know_chat)"
                } else {
                    ""
                };
                let message = format!(
                    "fake Telegram: {n} messages not sent within {timeout:?}; sent {}: {all:#?}\n\
                     refused: {:#?}\nother requests ({polls} getUpdates besides): {others:#?}{hint}",
                    messages.len(),
                    st.refused,
                );
                drop(st);
                panic!("{message}");
            }
            st = self
                .shared
                .changed
                .wait_timeout(st, left)
                .map_or_else(|p| p.into_inner().0, |(g, _)| g);
        }
    }

    /// Every call answered with an error (faults included), in order: (method, status,
    /// description).
    pub fn refused(&self) -> Vec<(String, u16, String)> {
        lock(&self.shared).refused.clone()
    }

    /// Every request, in arrival order: (method as in the URL, parameters; an uploaded file's
    /// field holds `"<file name>"`).
    pub fn requests(&self) -> Vec<(String, Value)> {
        lock(&self.shared).requests.clone()
    }

    /// The highest offset a getUpdates call (or a webhook delivery) has confirmed: every
    /// update below it is gone.
    pub fn confirmed_offset(&self) -> i64 {
        lock(&self.shared).confirmed_offset
    }

    /// Whether a getUpdates long poll is being held right now (a second one would get 409).
    pub fn polling(&self) -> bool {
        lock(&self.shared).polling
    }

    /// Updates not yet confirmed.
    pub fn pending_updates(&self) -> usize {
        lock(&self.shared).updates.len()
    }

    /// Answers the next call of `method` (case-insensitive, e.g. "getUpdates") with `fault`;
    /// faults queue per method, one call each.
    pub fn fail_next(&self, method: &str, fault: Fault) {
        lock(&self.shared)
            .faults
            .entry(method.to_ascii_lowercase())
            .or_default()
            .push_back(fault);
    }

    /// Where webhook deliveries really go: the bot registers its public URL with setWebhook
    /// (getWebhookInfo reports that URL) and the fake POSTs to this `http://` URL instead (a
    /// test's local gateway). `None`: deliver to the registered URL itself.
    pub fn set_webhook_target(&self, url: Option<String>) {
        lock(&self.shared).webhook_target = url;
        self.shared.changed.notify_all();
    }

    /// The registered webhook URL, if one is set.
    pub fn webhook_url(&self) -> Option<String> {
        lock(&self.shared).webhook.as_ref().map(|w| w.url.clone())
    }

    fn push_message(&self, chat: Value, from_id: i64, fill: impl FnOnce(&mut Value)) -> i64 {
        let mut st = lock(&self.shared);
        let chat_id = chat["id"].as_i64().unwrap_or_default();
        st.chats.insert(chat_id, chat.clone());
        let message_id = st.message_id(chat_id);
        let mut message = json!({"message_id": message_id, "from": updates::user(from_id),
                                 "chat": chat, "date": now()});
        fill(&mut message);
        st.messages.insert((chat_id, message_id), message.clone());
        updates::push(&self.shared, st, "message", message)
    }
}

impl Drop for FakeTelegram {
    fn drop(&mut self) {
        lock(&self.shared).stop = true;
        self.shared.changed.notify_all();
        // Wake the accept loop so it sees the stop.
        let _ = TcpStream::connect(self.addr);
    }
}

/// `value` (an object) with `extra` fields added.
fn with(value: &Value, extra: &[(&str, Value)]) -> Value {
    let mut v = value.clone();
    if let Some(o) = v.as_object_mut() {
        for (k, x) in extra {
            o.insert((*k).to_string(), x.clone());
        }
    }
    v
}

/// What a call answers.
enum Reply {
    Json(u16, Value),
    /// Close the socket without an answer.
    Silent,
}

fn ok(result: Value) -> Reply {
    Reply::Json(200, json!({"ok": true, "result": result}))
}

fn error(code: u16, description: &str) -> Reply {
    Reply::Json(
        code,
        json!({"ok": false, "error_code": code, "description": description}),
    )
}

fn bad(description: &str) -> Reply {
    error(400, &format!("Bad Request: {description}"))
}

/// Serves one connection: one request, one answer (or none), then close.
fn serve(mut stream: TcpStream, shared: &Shared) {
    let Ok(Some(request)) = wire::read_request(&stream) else {
        return;
    };
    let path = request.path.clone();
    if let Some(rest) = path.strip_prefix("/file/bot") {
        let (token, file_path) = rest.split_once('/').unwrap_or((rest, ""));
        let bytes = (token == TOKEN)
            .then(|| {
                let st = lock(shared);
                st.files
                    .values()
                    .find(|f| f.path == file_path)
                    .map(|f| f.bytes.clone())
            })
            .flatten();
        let _ = match bytes {
            Some(b) => wire::respond(&mut stream, 200, "application/octet-stream", &b),
            None => answer(&mut stream, error(404, "Not Found")),
        };
        return;
    }
    let Some((token, method)) = path
        .strip_prefix("/bot")
        .and_then(|rest| rest.split_once('/'))
    else {
        let _ = answer(&mut stream, error(404, "Not Found"));
        return;
    };
    let mut params = request.params.clone();
    for (field, (name, _)) in &request.files {
        params.insert(field.clone(), json!(format!("<{name}>")));
    }
    let fault = {
        let mut st = lock(shared);
        st.requests
            .push((method.to_string(), Value::Object(params.clone())));
        if token != TOKEN {
            None
        } else {
            st.faults
                .get_mut(&method.to_ascii_lowercase())
                .and_then(VecDeque::pop_front)
        }
    };
    let reply = if token != TOKEN {
        error(401, "Unauthorized")
    } else {
        match fault {
            None => dispatch(shared, &stream, method, &request, params),
            Some(Fault::LoseResponse) => {
                let _ = dispatch(shared, &stream, method, &request, params);
                Reply::Silent
            }
            Some(f) => fault_reply(shared, f),
        }
    };
    if let Reply::Json(status, body) = &reply
        && *status != 200
    {
        let description = body["description"].as_str().unwrap_or_default().to_string();
        lock(shared)
            .refused
            .push((method.to_string(), *status, description));
    }
    let _ = answer(&mut stream, reply);
}

fn answer(stream: &mut TcpStream, reply: Reply) -> io::Result<()> {
    match reply {
        Reply::Json(status, body) => wire::respond(
            stream,
            status,
            "application/json",
            body.to_string().as_bytes(),
        ),
        Reply::Silent => Ok(()),
    }
}

fn fault_reply(shared: &Shared, fault: Fault) -> Reply {
    match fault {
        Fault::Conflict409 => error(409, updates::CONFLICT_POLL),
        Fault::RetryAfter(s) => Reply::Json(
            429,
            json!({"ok": false, "error_code": 429,
                   "description": format!("Too Many Requests: retry after {s}"),
                   "parameters": {"retry_after": s}}),
        ),
        Fault::TooLong => bad("message is too long"),
        Fault::BadMarkup => {
            bad("can't parse entities: Can't find end of Bold entity at byte offset 0")
        }
        Fault::ServerError(code) => error(
            code,
            match code {
                500 => "Internal Server Error",
                502 => "Bad Gateway",
                503 => "Service Unavailable",
                504 => "Gateway Timeout",
                _ => "Server Error",
            },
        ),
        Fault::DropConnection | Fault::LoseResponse => Reply::Silent,
        Fault::Hang(d) => {
            hang(shared, Some(Instant::now() + d));
            Reply::Silent
        }
        Fault::HangForever => {
            hang(shared, None);
            Reply::Silent
        }
    }
}

/// Waits until `until` (or forever) or the server stops.
fn hang(shared: &Shared, until: Option<Instant>) {
    let mut st = lock(shared);
    while !st.stop {
        let left = until.map(|u| u.saturating_duration_since(Instant::now()));
        if left.is_some_and(|l| l.is_zero()) {
            return;
        }
        st = shared
            .changed
            .wait_timeout(st, left.unwrap_or(Duration::from_secs(1)))
            .map_or_else(|p| p.into_inner().0, |(g, _)| g);
    }
}

/// Runs one Bot API method.
fn dispatch(
    shared: &Shared,
    stream: &TcpStream,
    method: &str,
    request: &wire::Request,
    params: Map<String, Value>,
) -> Reply {
    let p = Params(&request.params);
    match method.to_ascii_lowercase().as_str() {
        "getme" => ok(updates::bot_user_full()),
        "getupdates" => updates::get_updates(shared, stream, &p),
        "setwebhook" => updates::set_webhook(shared, &p),
        "deletewebhook" => updates::delete_webhook(shared, &p),
        "getwebhookinfo" => updates::webhook_info(shared),
        "sendmessage" => send::send_message(shared, &p, params),
        "editmessagetext" => send::edit_text(shared, &p, params),
        "editmessagereplymarkup" => send::edit_markup(shared, &p, params),
        "senddocument" => send::send_file(shared, &p, params, request, "sendDocument"),
        "sendphoto" => send::send_file(shared, &p, params, request, "sendPhoto"),
        "sendchataction" => send::chat_action(shared, &p, params),
        "answercallbackquery" => send::answer_callback(shared, &p, params),
        "deletemessage" => send::delete_message(shared, &p, params),
        "getfile" => send::get_file(shared, &p),
        "setmycommands" | "deletemycommands" | "close" | "logout" => ok(json!(true)),
        _ => error(404, "Not Found"),
    }
}

/// Typed reads of a call's parameters: JSON values or their string forms.
struct Params<'a>(&'a Map<String, Value>);

impl Params<'_> {
    fn int(&self, key: &str) -> Option<i64> {
        match self.0.get(key)? {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    fn string(&self, key: &str) -> Option<String> {
        match self.0.get(key)? {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    }

    fn boolean(&self, key: &str) -> bool {
        match self.0.get(key) {
            Some(Value::Bool(b)) => *b,
            Some(Value::String(s)) => s == "true" || s == "1",
            _ => false,
        }
    }

    /// An object or array parameter, sent as JSON or as a JSON-serialized string.
    fn json(&self, key: &str) -> Option<Value> {
        match self.0.get(key)? {
            Value::String(s) => serde_json::from_str(s).ok(),
            v @ (Value::Object(_) | Value::Array(_)) => Some(v.clone()),
            _ => None,
        }
    }
}
