//! The fake Telegram Bot API driven as a bot drives the real one (issue 38 §Tests): `ureq`
//! over HTTP, JSON / form / query / multipart bodies; long poll, offsets, 409s, webhooks,
//! every fault, callback queries and file download.

#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use warren_testkit::telegram::{FakeTelegram, Fault};

/// A bot's HTTP client against `tg`.
pub(crate) struct Bot {
    pub agent: ureq::Agent,
    pub base: String,
}

impl Bot {
    pub(crate) fn new(tg: &FakeTelegram) -> Bot {
        Bot::with_timeout(tg, Duration::from_secs(30))
    }

    pub(crate) fn with_timeout(tg: &FakeTelegram, timeout: Duration) -> Bot {
        Bot {
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(timeout))
                .build()
                .into(),
            base: format!("{}/bot{}", tg.api_base(), tg.token()),
        }
    }

    pub(crate) fn answer(
        r: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<(u16, Value), String> {
        let r = r.map_err(|e| e.to_string())?;
        let status = r.status().as_u16();
        let text = r.into_body().read_to_string().map_err(|e| e.to_string())?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }

    /// POST with a JSON body; `Err` when no HTTP answer came.
    pub(crate) fn try_call(&self, method: &str, params: Value) -> Result<(u16, Value), String> {
        Bot::answer(
            self.agent
                .post(&format!("{}/{method}", self.base))
                .header("Content-Type", "application/json")
                .send(params.to_string()),
        )
    }

    pub(crate) fn call(&self, method: &str, params: Value) -> (u16, Value) {
        self.try_call(method, params).unwrap()
    }

    pub(crate) fn ok(&self, method: &str, params: Value) -> Value {
        let (status, body) = self.call(method, params);
        assert_eq!(
            (status, &body["ok"]),
            (200, &json!(true)),
            "{method}: {body}"
        );
        body["result"].clone()
    }

    pub(crate) fn get(&self, method: &str, query: &str) -> (u16, Value) {
        Bot::answer(
            self.agent
                .get(&format!("{}/{method}?{query}", self.base))
                .call(),
        )
        .unwrap()
    }

    pub(crate) fn form(&self, method: &str, form: &[(&str, &str)]) -> (u16, Value) {
        Bot::answer(
            self.agent
                .post(&format!("{}/{method}", self.base))
                .send_form(form.iter().copied()),
        )
        .unwrap()
    }
}

pub(crate) fn error(description: &str, code: u16) -> Value {
    json!({"ok": false, "error_code": code, "description": description})
}

pub(crate) fn ids(updates: &Value) -> Vec<i64> {
    updates
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["update_id"].as_i64().unwrap())
        .collect()
}

const CONFLICT: &str = "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running";

#[test]
fn get_me_answers_the_bot_and_another_token_gets_401() {
    let tg = FakeTelegram::start().unwrap();
    let me = Bot::new(&tg).ok("getMe", json!({}));
    assert_eq!(me["id"], json!(tg.bot_user_id()));
    assert_eq!(me["username"], json!(tg.bot_username()));
    assert_eq!(me["is_bot"], json!(true));
    let wrong = Bot::answer(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .new_agent()
            .get(&format!("{}/bot999:WRONG/getMe", tg.api_base()))
            .call(),
    )
    .unwrap();
    assert_eq!(wrong, (401, error("Unauthorized", 401)));
    let (status, body) = Bot::new(&tg).call("noSuchMethod", json!({}));
    assert_eq!((status, body), (404, error("Not Found", 404)));
}

#[test]
fn a_long_poll_holds_until_an_update_arrives_and_answers_empty_at_its_timeout() {
    let tg = Arc::new(FakeTelegram::start().unwrap());
    let bot = Bot::new(&tg);
    let started = Instant::now();
    assert_eq!(bot.ok("getUpdates", json!({"timeout": 1})), json!([]));
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "{:?}",
        started.elapsed()
    );

    let pusher = Arc::clone(&tg);
    let push = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        pusher.push_text(42, 42, "hello")
    });
    let started = Instant::now();
    let updates = bot.ok("getUpdates", json!({"timeout": 20}));
    let id = push.join().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(ids(&updates), vec![id]);
    let m = &updates[0]["message"];
    assert_eq!(m["text"], json!("hello"));
    assert_eq!(
        m["chat"],
        json!({"id": 42, "type": "private", "first_name": "User42", "username": "user42"})
    );
    assert_eq!(m["from"]["id"], json!(42));
    assert!(m["message_id"].as_i64().unwrap() > 0);
}

#[test]
fn an_offset_confirms_and_drops_every_earlier_update_and_a_negative_one_keeps_the_last() {
    let tg = FakeTelegram::start().unwrap();
    let bot = Bot::new(&tg);
    let a = tg.push_text(1, 1, "a");
    let b = tg.push_text(1, 1, "b");
    let c = tg.push_text(2, 2, "/start");
    assert_eq!((b, c), (a + 1, a + 2));
    // Unconfirmed updates come back again.
    assert_eq!(ids(&bot.ok("getUpdates", json!({}))), vec![a, b, c]);
    assert_eq!(ids(&bot.ok("getUpdates", json!({"limit": 2}))), vec![a, b]);
    assert_eq!((tg.pending_updates(), tg.confirmed_offset()), (3, 0));
    let rest = bot.ok("getUpdates", json!({"offset": b}));
    assert_eq!(ids(&rest), vec![b, c]);
    assert_eq!(
        rest[1]["message"]["entities"],
        json!([{"type": "bot_command", "offset": 0, "length": 6}])
    );
    assert_eq!((tg.pending_updates(), tg.confirmed_offset()), (2, b));
    assert_eq!(bot.ok("getUpdates", json!({"offset": c + 1})), json!([]));
    assert_eq!((tg.pending_updates(), tg.confirmed_offset()), (0, c + 1));
    // Query-string parameters work too (strings).
    let d = tg.push_text(1, 1, "d");
    let e = tg.push_text(1, 1, "e");
    let (status, body) = bot.get("getUpdates", "offset=-1&timeout=0");
    assert_eq!(status, 200);
    assert_eq!(ids(&body["result"]), vec![e]);
    assert!(d < e);
    assert_eq!((tg.pending_updates(), tg.confirmed_offset()), (1, e));
    assert_eq!(
        tg.requests().first().map(|r| r.0.clone()),
        Some("getUpdates".to_string())
    );
}

#[test]
fn a_second_concurrent_poller_gets_409_and_the_first_keeps_its_poll() {
    let tg = Arc::new(FakeTelegram::start().unwrap());
    let first = {
        let tg = Arc::clone(&tg);
        thread::spawn(move || Bot::new(&tg).call("getUpdates", json!({"timeout": 10})))
    };
    wait_until(|| tg.polling());
    let (status, body) = Bot::new(&tg).call("getUpdates", json!({"timeout": 0}));
    assert_eq!((status, body), (409, error(CONFLICT, 409)));
    let id = tg.push_text(7, 7, "still here");
    let (status, body) = first.join().unwrap();
    assert_eq!((status, ids(&body["result"])), (200, vec![id]));
    // Once the first poll is answered, polling works again.
    assert_eq!(ids(&Bot::new(&tg).ok("getUpdates", json!({}))), vec![id]);
}

#[test]
fn a_held_poll_whose_client_closed_its_socket_is_let_go() {
    let tg = FakeTelegram::start().unwrap();
    let addr = tg.api_base().trim_start_matches("http://").to_string();
    let mut raw = TcpStream::connect(&addr).unwrap();
    write!(
        raw,
        "GET /bot{}/getUpdates?timeout=30 HTTP/1.1\r\nHost: x\r\n\r\n",
        tg.token()
    )
    .unwrap();
    wait_until(|| tg.polling());
    // Held: a second poller is refused.
    assert_eq!(Bot::new(&tg).call("getUpdates", json!({})).0, 409);
    drop(raw);
    // Let go at once, not after its 30 s.
    wait_until(|| !tg.polling());
    assert_eq!(Bot::new(&tg).ok("getUpdates", json!({})), json!([]));
}

#[test]
fn allowed_updates_is_sticky_and_drops_other_kinds() {
    let tg = FakeTelegram::start().unwrap();
    let bot = Bot::new(&tg);
    bot.ok("getUpdates", json!({"allowed_updates": ["callback_query"]}));
    tg.push_text(5, 5, "not wanted");
    let cb = tg.push_callback(5, 5, 1, "yes");
    assert_eq!(ids(&bot.ok("getUpdates", json!({}))), vec![cb]);
    // A form body carries the list as a JSON string.
    let (status, _) = bot.form(
        "getUpdates",
        &[
            ("allowed_updates", "[\"message\"]"),
            ("offset", &(cb + 1).to_string()),
        ],
    );
    assert_eq!(status, 200);
    let m = tg.push_text(5, 5, "wanted");
    assert_eq!(ids(&bot.ok("getUpdates", json!({}))), vec![m]);
}

/// A webhook receiver on a free port: answers each POST with the next status of `statuses`
/// (then 200) and records (secret header, body).
/// What a webhook receiver got: (secret header, update).
type Received = Arc<Mutex<Vec<(Option<String>, Value)>>>;

fn receiver(statuses: Vec<u16>) -> (String, Received) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = Arc::clone(&got);
    thread::spawn(move || {
        let mut statuses = statuses.into_iter();
        for stream in listener.incoming() {
            let mut stream = stream.unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            let (head, body) = loop {
                let n = stream.read(&mut chunk).unwrap();
                buf.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&buf).into_owned();
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let len: usize = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse().unwrap())
                        })
                        .unwrap();
                    if body.len() >= len {
                        break (head.to_string(), body.to_string());
                    }
                }
            };
            let secret = head.lines().find_map(|l| {
                l.strip_prefix("X-Telegram-Bot-Api-Secret-Token: ")
                    .map(str::to_string)
            });
            g.lock()
                .unwrap()
                .push((secret, serde_json::from_str(&body).unwrap()));
            let status = statuses.next().unwrap_or(200);
            write!(
                stream,
                "HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
        }
    });
    (url, got)
}

#[test]
fn a_webhook_gets_each_update_with_the_secret_until_it_answers_2xx_and_blocks_get_updates() {
    let tg = FakeTelegram::start().unwrap();
    let bot = Bot::new(&tg);
    let (url, got) = receiver(vec![500, 502]);
    tg.set_webhook_target(Some(url));
    let (status, body) = bot.call(
        "setWebhook",
        json!({"url": "https://bot.example.org/tg/home", "secret_token": "s3cr3t-_X"}),
    );
    assert_eq!(
        (status, body),
        (
            200,
            json!({"ok": true, "result": true, "description": "Webhook was set"})
        )
    );
    assert_eq!(
        bot.call("getUpdates", json!({})),
        (
            409,
            error(
                "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first",
                409
            )
        )
    );
    let a = tg.push_text(9, 9, "one");
    let b = tg.push_text(9, 9, "two");
    wait_until(|| tg.pending_updates() == 0);
    let got = got.lock().unwrap().clone();
    let delivered: Vec<(Option<String>, i64)> = got
        .iter()
        .map(|(s, u)| (s.clone(), u["update_id"].as_i64().unwrap()))
        .collect();
    let secret = Some("s3cr3t-_X".to_string());
    // Two failures for the first update, then each once, in order.
    assert_eq!(
        delivered,
        vec![
            (secret.clone(), a),
            (secret.clone(), a),
            (secret.clone(), a),
            (secret, b)
        ]
    );
    assert_eq!(tg.confirmed_offset(), b + 1);
    let info = bot.ok("getWebhookInfo", json!({}));
    assert_eq!(info["url"], json!("https://bot.example.org/tg/home"));
    assert_eq!(info["pending_update_count"], json!(0));
    assert_eq!(
        info["last_error_message"],
        json!("Wrong response from the webhook: 502")
    );
    let bad = bot.call(
        "setWebhook",
        json!({"url": "https://x", "secret_token": "no spaces"}),
    );
    assert_eq!(
        bad,
        (
            400,
            error(
                "Bad Request: secret token contains unallowed characters",
                400
            )
        )
    );
    assert_eq!(bot.ok("deleteWebhook", json!({})), json!(true));
    assert_eq!(bot.ok("getUpdates", json!({})), json!([]));
}

#[test]
fn set_webhook_ends_a_held_poll_with_409() {
    let tg = Arc::new(FakeTelegram::start().unwrap());
    let poll = {
        let tg = Arc::clone(&tg);
        thread::spawn(move || Bot::new(&tg).call("getUpdates", json!({"timeout": 10})))
    };
    wait_until(|| tg.polling());
    Bot::new(&tg).ok("setWebhook", json!({"url": "https://bot.example.org/hook"}));
    assert_eq!(
        poll.join().unwrap(),
        (
            409,
            error("Conflict: terminated by setWebhook request", 409)
        )
    );
}

#[test]
fn send_message_returns_a_fresh_message_and_is_recorded() {
    let tg = FakeTelegram::start().unwrap();
    let bot = Bot::new(&tg);
    assert_eq!(
        bot.call("sendMessage", json!({"chat_id": 77, "text": "hi"})),
        (400, error("Bad Request: chat not found", 400))
    );
    let update = tg.push_text(77, 77, "hello");
    let user_message = tg.update(update).unwrap()["message"]["message_id"]
        .as_i64()
        .unwrap();
    let keyboard = json!({"inline_keyboard": [[{"text": "Allow", "callback_data": "allow:1"}]]});
    let first = bot.ok(
        "sendMessage",
        json!({"chat_id": 77, "text": "*hi*", "parse_mode": "MarkdownV2", "reply_markup": keyboard,
               "reply_parameters": {"message_id": user_message}}),
    );
    let second = bot.ok("sendMessage", json!({"chat_id": "77", "text": "again"}));
    let (m1, m2) = (
        first["message_id"].as_i64().unwrap(),
        second["message_id"].as_i64().unwrap(),
    );
    assert!(m1 > user_message && m2 > m1);
    assert_eq!(first["from"]["id"], json!(tg.bot_user_id()));
    assert_eq!(first["reply_to_message"]["message_id"], json!(user_message));
    assert_eq!(first["reply_markup"], keyboard);
    let sent = tg.sent();
    assert_eq!(sent.len(), 2);
    assert_eq!(
        (
            sent[0].method.as_str(),
            sent[0].chat_id,
            sent[0].message_id,
            sent[0].text.as_deref()
        ),
        ("sendMessage", 77, Some(m1), Some("*hi*"))
    );
    assert_eq!(sent[0].parse_mode.as_deref(), Some("MarkdownV2"));
    assert_eq!(sent[0].reply_markup, Some(keyboard));
    assert_eq!(sent[0].reply_to_message_id, Some(user_message));
    assert_eq!(sent[1].body, json!({"chat_id": "77", "text": "again"}));
    // The checks Telegram makes.
    assert_eq!(
        bot.call("sendMessage", json!({"chat_id": 77, "text": "  "})),
        (400, error("Bad Request: message text is empty", 400))
    );
    assert_eq!(
        bot.call(
            "sendMessage",
            json!({"chat_id": 77, "text": "x", "reply_to_message_id": 999})
        ),
        (
            400,
            error("Bad Request: message to be replied not found", 400)
        )
    );
    assert_eq!(
        bot.call(
            "sendMessage",
            json!({"chat_id": 77, "text": "x", "parse_mode": "rst"})
        ),
        (400, error("Bad Request: unsupported parse_mode", 400))
    );
    let long_data = json!({"inline_keyboard": [[{"text": "A", "callback_data": "x".repeat(65)}]]});
    assert_eq!(
        bot.call(
            "sendMessage",
            json!({"chat_id": 77, "text": "x", "reply_markup": long_data})
        ),
        (400, error("Bad Request: BUTTON_DATA_INVALID", 400))
    );
    assert_eq!(tg.sent().len(), 2, "rejected calls are not recorded");
}

#[test]
fn a_text_over_4096_utf16_units_is_too_long_and_emoji_count_two() {
    let tg = FakeTelegram::start().unwrap();
    let bot = Bot::new(&tg);
    tg.know_chat(5);
    let too_long = error("Bad Request: message is too long", 400);
    bot.ok(
        "sendMessage",
        json!({"chat_id": 5, "text": "x".repeat(4096)}),
    );
    assert_eq!(
        bot.call(
            "sendMessage",
            json!({"chat_id": 5, "text": "x".repeat(4097)})
        ),
        (400, too_long.clone())
    );
    // 2,048 emoji are 4,096 UTF-16 units; one more is over.
    bot.ok(
        "sendMessage",
        json!({"chat_id": 5, "text": "😀".repeat(2048)}),
    );
    assert_eq!(
        bot.call(
            "sendMessage",
            json!({"chat_id": 5, "text": "😀".repeat(2049)})
        ),
        (400, too_long)
    );
    // Markup is not text: the length is counted after entity parsing.
    let html = format!("<b>{}</b>", "x".repeat(4096));
    bot.ok(
        "sendMessage",
        json!({"chat_id": 5, "text": html, "parse_mode": "HTML"}),
    );
    let md = format!("*{}*\\.", "x".repeat(4095));
    bot.ok(
        "sendMessage",
        json!({"chat_id": 5, "text": md, "parse_mode": "MarkdownV2"}),
    );
}

#[test]
fn edits_follow_telegram_unknown_message_unchanged_text_and_dropped_keyboard() {
    let tg = FakeTelegram::start().unwrap();
    let bot = Bot::new(&tg);
    tg.know_chat(3);
    assert_eq!(
        bot.call(
            "editMessageText",
            json!({"chat_id": 3, "message_id": 55, "text": "x"})
        ),
        (400, error("Bad Request: message to edit not found", 400))
    );
    let keyboard = json!({"inline_keyboard": [[{"text": "Stop", "callback_data": "stop"}]]});
    let m = bot.ok(
        "sendMessage",
        json!({"chat_id": 3, "text": "draft", "reply_markup": keyboard}),
    );
    let id = m["message_id"].as_i64().unwrap();
    let not_modified = error(
        "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message",
        400,
    );
    assert_eq!(
        bot.call(
            "editMessageText",
            json!({"chat_id": 3, "message_id": id, "text": "draft", "reply_markup": keyboard})
        ),
        (400, not_modified.clone())
    );
    let edited = bot.ok(
        "editMessageText",
        json!({"chat_id": 3, "message_id": id, "text": "final"}),
    );
    assert_eq!(edited["text"], json!("final"));
    assert!(
        edited.get("reply_markup").is_none(),
        "an edit without reply_markup drops the keyboard"
    );
    assert_eq!(
        bot.call(
            "editMessageReplyMarkup",
            json!({"chat_id": 3, "message_id": id})
        ),
        (400, not_modified)
    );
    bot.ok(
        "editMessageReplyMarkup",
        json!({"chat_id": 3, "message_id": id, "reply_markup": keyboard}),
    );
    let sent: Vec<(String, Option<i64>)> = tg
        .sent()
        .iter()
        .map(|s| (s.method.clone(), s.message_id))
        .collect();
    assert_eq!(
        sent,
        vec![
            ("sendMessage".to_string(), Some(id)),
            ("editMessageText".to_string(), Some(id)),
            ("editMessageReplyMarkup".to_string(), Some(id)),
        ]
    );
    // Only the bot's own messages can be edited.
    let user = tg.update(tg.push_text(3, 3, "mine")).unwrap()["message"]["message_id"].clone();
    assert_eq!(
        bot.call(
            "editMessageText",
            json!({"chat_id": 3, "message_id": user, "text": "x"})
        ),
        (400, error("Bad Request: message can't be edited", 400))
    );
}

#[test]
fn every_fault_answers_its_call_once_and_the_next_call_is_normal() {
    let tg = FakeTelegram::start().unwrap();
    let bot = Bot::with_timeout(&tg, Duration::from_millis(700));
    tg.know_chat(1);
    let send = || bot.try_call("sendMessage", json!({"chat_id": 1, "text": "x"}));
    // (fault, the answer: status and body, or `Err` for none)
    type Answer = Result<(u16, Value), ()>;
    let cases: Vec<(Fault, Answer)> = vec![
        (Fault::Conflict409, Ok((409, error(CONFLICT, 409)))),
        (
            Fault::RetryAfter(3),
            Ok((
                429,
                json!({"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 3",
                            "parameters": {"retry_after": 3}}),
            )),
        ),
        (
            Fault::TooLong,
            Ok((400, error("Bad Request: message is too long", 400))),
        ),
        (
            Fault::BadMarkup,
            Ok((
                400,
                error(
                    "Bad Request: can't parse entities: Can't find end of Bold entity at byte offset 0",
                    400,
                ),
            )),
        ),
        (
            Fault::ServerError(502),
            Ok((502, error("Bad Gateway", 502))),
        ),
        (Fault::DropConnection, Err(())),
        (Fault::Hang(Duration::from_millis(1500)), Err(())),
        (Fault::HangForever, Err(())),
    ];
    for (fault, expected) in cases {
        tg.fail_next("sendMessage", fault.clone());
        let before = tg.sent().len();
        let started = Instant::now();
        let got = send().map_err(|_| ());
        assert_eq!(got, expected, "{fault:?}");
        if matches!(fault, Fault::Hang(_) | Fault::HangForever) {
            assert!(
                started.elapsed() >= Duration::from_millis(650),
                "{fault:?} answered early"
            );
        }
        assert_eq!(
            tg.sent().len(),
            before,
            "{fault:?}: a faulted call sends nothing"
        );
        assert_eq!(send().map(|r| r.0), Ok(200), "after {fault:?}");
        assert_eq!(tg.sent().len(), before + 1);
    }
    // LoseResponse: the message is sent, the client hears nothing.
    tg.fail_next("sendMessage", Fault::LoseResponse);
    let before = tg.sent().len();
    assert!(send().is_err());
    assert_eq!(tg.sent().len(), before + 1);
    // Faults queue per method, and only for that method.
    tg.fail_next("sendMessage", Fault::ServerError(500));
    tg.fail_next("sendMessage", Fault::RetryAfter(1));
    assert_eq!(bot.call("getMe", json!({})).0, 200);
    assert_eq!(send().map(|r| r.0), Ok(500));
    assert_eq!(send().map(|r| r.0), Ok(429));
    assert_eq!(send().map(|r| r.0), Ok(200));
}

#[test]
fn a_faulted_get_updates_confirms_nothing() {
    let tg = FakeTelegram::start().unwrap();
    let bot = Bot::with_timeout(&tg, Duration::from_millis(500));
    let a = tg.push_text(1, 1, "a");
    let b = tg.push_text(1, 1, "b");
    for fault in [
        Fault::Conflict409,
        Fault::ServerError(502),
        Fault::DropConnection,
        Fault::HangForever,
    ] {
        tg.fail_next("getUpdates", fault.clone());
        let _ = bot.try_call("getUpdates", json!({"offset": b}));
        assert_eq!(
            (tg.pending_updates(), tg.confirmed_offset()),
            (2, 0),
            "{fault:?}"
        );
    }
    // A hung poll is not a held one: the next poller is not refused.
    assert_eq!(ids(&bot.ok("getUpdates", json!({"offset": a}))), vec![a, b]);
}

#[test]
fn dropping_the_server_lets_held_requests_go() {
    let tg = FakeTelegram::start().unwrap();
    let bot = Bot::new(&tg);
    tg.fail_next("sendMessage", Fault::HangForever);
    tg.know_chat(1);
    let hung =
        thread::spawn(move || bot.try_call("sendMessage", json!({"chat_id": 1, "text": "x"})));
    let poller = Bot::new(&tg);
    let poll = thread::spawn(move || poller.try_call("getUpdates", json!({"timeout": 30})));
    wait_until(|| tg.requests().len() == 2 && tg.polling());
    let started = Instant::now();
    drop(tg);
    assert!(hung.join().unwrap().is_err());
    assert_eq!(poll.join().unwrap().map(|r| r.0), Ok(200));
    assert!(started.elapsed() < Duration::from_secs(5));
}

pub(crate) fn wait_until(mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "condition not met within 10 s");
        thread::sleep(Duration::from_millis(10));
    }
}
