//! The fake Telegram Bot API's chat side (issue 38 §Tests): group and topic messages, callback
//! queries and their answers, media in (getFile and the file URL) and out (multipart
//! sendDocument, sendPhoto by file id), chat actions, form bodies and `wait_sent`.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use serde_json::{Value, json};
use warren_testkit::telegram::FakeTelegram;

use crate::telegram::{Bot, error};

/// GET on a file URL: (status, bytes).
fn download(tg: &FakeTelegram, token: &str, file_path: &str) -> (u16, Vec<u8>) {
    let r = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .new_agent()
        .get(&format!("{}/file/bot{token}/{file_path}", tg.api_base()))
        .call()
        .unwrap();
    let status = r.status().as_u16();
    (status, r.into_body().read_to_vec().unwrap())
}

fn message(tg: &FakeTelegram, update: i64) -> Value {
    tg.update(update).unwrap()["message"].clone()
}

#[test]
fn group_and_topic_messages_have_telegrams_shape() {
    let tg = FakeTelegram::start().unwrap();
    let bot = Bot::new(&tg);
    let text = format!("@{} what now?", tg.bot_username());
    let g = message(&tg, tg.push_group_text(-100, 11, &text, false));
    assert_eq!(g["chat"]["type"], json!("group"));
    assert_eq!(
        g["entities"],
        json!([{"type": "mention", "offset": 0, "length": 16}])
    );
    assert!(g.get("reply_to_message").is_none());
    // A reply to the bot points at the bot's last message in that chat.
    let sent = bot.ok("sendMessage", json!({"chat_id": -100, "text": "answer"}));
    let r = message(&tg, tg.push_group_text(-100, 12, "thanks", true));
    assert_eq!(r["reply_to_message"]["message_id"], sent["message_id"]);
    assert_eq!(r["reply_to_message"]["from"]["id"], json!(tg.bot_user_id()));
    let t = message(&tg, tg.push_topic_text(-200, 5, 13, "in a topic"));
    assert_eq!(
        (
            &t["chat"]["type"],
            &t["chat"]["is_forum"],
            &t["message_thread_id"],
            &t["is_topic_message"]
        ),
        (&json!("supergroup"), &json!(true), &json!(5), &json!(true))
    );
    let reply = bot.ok(
        "sendMessage",
        json!({"chat_id": -200, "text": "ok", "message_thread_id": 5}),
    );
    assert_eq!(reply["message_thread_id"], json!(5));
    assert_eq!(tg.sent()[1].message_thread_id, Some(5));
}

#[test]
fn a_button_press_is_a_callback_query_answered_once() {
    let tg = FakeTelegram::start().unwrap();
    let bot = Bot::new(&tg);
    tg.know_chat(8);
    let keyboard = json!({"inline_keyboard": [[{"text": "Approve", "callback_data": "ap:1"},
                                               {"text": "Deny", "callback_data": "dn:1"}]]});
    let m = bot.ok(
        "sendMessage",
        json!({"chat_id": 8, "text": "Run it?", "reply_markup": keyboard}),
    );
    let mid = m["message_id"].as_i64().unwrap();
    let id = tg.push_callback(8, 8, mid, "ap:1");
    let updates = bot.ok("getUpdates", json!({}));
    let q = &updates[0]["callback_query"];
    assert_eq!(updates[0]["update_id"], json!(id));
    assert_eq!((&q["data"], &q["from"]["id"]), (&json!("ap:1"), &json!(8)));
    assert_eq!(q["message"]["message_id"], json!(mid));
    assert_eq!(q["message"]["reply_markup"], keyboard);
    let qid = q["id"].as_str().unwrap().to_string();
    assert_eq!(
        bot.ok(
            "answerCallbackQuery",
            json!({"callback_query_id": qid, "text": "Approved"})
        ),
        json!(true)
    );
    assert_eq!(
        bot.call("answerCallbackQuery", json!({"callback_query_id": qid})),
        (
            400,
            error(
                "Bad Request: query is too old and response timeout expired or query ID is invalid",
                400
            )
        )
    );
    let answered = tg
        .sent()
        .into_iter()
        .find(|s| s.method == "answerCallbackQuery")
        .unwrap();
    assert_eq!(
        (
            answered.chat_id,
            answered.message_id,
            answered.text.as_deref()
        ),
        (8, Some(mid), Some("Approved"))
    );
}

#[test]
fn photos_documents_and_voice_notes_download_through_get_file() {
    let tg = FakeTelegram::start().unwrap();
    let bot = Bot::new(&tg);
    let png: Vec<u8> = (0..=255u8).cycle().take(4000).collect();
    let p = message(&tg, tg.push_photo(4, 4, png.clone(), Some("look")));
    assert_eq!(p["caption"], json!("look"));
    let sizes = p["photo"].as_array().unwrap();
    assert_eq!(sizes.len(), 2);
    let largest = &sizes[1];
    assert_eq!(largest["file_size"], json!(4000));
    let file = bot.ok("getFile", json!({"file_id": largest["file_id"]}));
    assert_eq!(file["file_size"], json!(4000));
    assert_eq!(file["file_unique_id"], largest["file_unique_id"]);
    let path = file["file_path"].as_str().unwrap();
    assert_eq!(download(&tg, tg.token(), path), (200, png.clone()));
    // The thumbnail is a different file (a quarter of the bytes).
    let thumb = bot.ok("getFile", json!({"file_id": sizes[0]["file_id"]}));
    assert_eq!(
        download(&tg, tg.token(), thumb["file_path"].as_str().unwrap()).1,
        png[..1000].to_vec()
    );
    // A wrong token or an unknown path is 404.
    assert_eq!(download(&tg, "1:NOPE", path).0, 404);
    assert_eq!(download(&tg, tg.token(), "photos/none.jpg").0, 404);

    let d = message(
        &tg,
        tg.push_document(4, 4, "report.pdf", "application/pdf", b"%PDF-1.7".to_vec()),
    );
    assert_eq!(
        (&d["document"]["file_name"], &d["document"]["mime_type"]),
        (&json!("report.pdf"), &json!("application/pdf"))
    );
    let f = bot.ok("getFile", json!({"file_id": d["document"]["file_id"]}));
    assert_eq!(
        download(&tg, tg.token(), f["file_path"].as_str().unwrap()).1,
        b"%PDF-1.7".to_vec()
    );

    let v = message(&tg, tg.push_voice(4, 4, b"OggS".to_vec(), 3));
    assert_eq!(
        (&v["voice"]["duration"], &v["voice"]["mime_type"]),
        (&json!(3), &json!("audio/ogg"))
    );
    let f = bot.ok("getFile", json!({"file_id": v["voice"]["file_id"]}));
    assert_eq!(
        download(&tg, tg.token(), f["file_path"].as_str().unwrap()).1,
        b"OggS".to_vec()
    );

    assert_eq!(
        bot.call("getFile", json!({"file_id": "nope"})),
        (400, error("Bad Request: invalid file_id", 400))
    );
}

#[test]
fn send_document_takes_a_multipart_upload_and_send_photo_a_file_id() {
    let tg = FakeTelegram::start().unwrap();
    let bot = Bot::new(&tg);
    tg.know_chat(6);
    let bytes: Vec<u8> = b"col1,col2\r\n1,2\r\n--not-a-boundary\r\n".to_vec();
    let boundary = "----warrenBoundary7MA4YWxkTrZu0gW";
    let mut body = Vec::new();
    for (name, value) in [("chat_id", "6"), ("caption", "the table")] {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            )
            .as_bytes(),
        );
    }
    body.extend_from_slice(
        format!("--{boundary}\r\nContent-Disposition: form-data; name=\"document\"; filename=\"data.csv\"\r\nContent-Type: text/csv\r\n\r\n")
            .as_bytes(),
    );
    body.extend_from_slice(&bytes);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let r = Bot::answer(
        bot.agent
            .post(&format!("{}/sendDocument", bot.base))
            .header(
                "Content-Type",
                &format!("multipart/form-data; boundary={boundary}"),
            )
            .send(&body[..]),
    )
    .unwrap();
    assert_eq!(r.0, 200, "{}", r.1);
    let doc = &r.1["result"]["document"];
    assert_eq!(
        (&doc["file_name"], &doc["file_size"]),
        (&json!("data.csv"), &json!(bytes.len()))
    );
    let sent = tg.sent();
    assert_eq!(sent[0].method, "sendDocument");
    assert_eq!(sent[0].text.as_deref(), Some("the table"));
    assert_eq!(sent[0].file, Some(("data.csv".to_string(), bytes.clone())));
    assert_eq!(sent[0].body["document"], json!("<data.csv>"));
    // The uploaded file is a file like any other.
    let f = bot.ok("getFile", json!({"file_id": doc["file_id"]}));
    assert_eq!(
        download(&tg, tg.token(), f["file_path"].as_str().unwrap()).1,
        bytes
    );
    // sendPhoto with a known file id; an unknown one or none is refused.
    let photo = bot.ok("sendPhoto", json!({"chat_id": 6, "photo": doc["file_id"]}));
    assert!(photo["photo"].is_array());
    assert_eq!(
        bot.call(
            "sendPhoto",
            json!({"chat_id": 6, "photo": "https://example.org/x.png"})
        ),
        (
            400,
            error("Bad Request: wrong file identifier/HTTP URL specified", 400)
        )
    );
    assert_eq!(
        bot.call("sendDocument", json!({"chat_id": 6})),
        (
            400,
            error("Bad Request: there is no document in the request", 400)
        )
    );
    assert_eq!(
        bot.call(
            "sendDocument",
            json!({"chat_id": 6, "document": doc["file_id"], "caption": "c".repeat(1025)})
        ),
        (400, error("Bad Request: message caption is too long", 400))
    );
}

#[test]
fn form_bodies_and_chat_actions_are_recorded_in_order() {
    let tg = FakeTelegram::start().unwrap();
    let bot = Bot::new(&tg);
    tg.know_chat(2);
    let (status, _) = bot.form("sendChatAction", &[("chat_id", "2"), ("action", "typing")]);
    assert_eq!(status, 200);
    assert_eq!(
        bot.form("sendChatAction", &[("chat_id", "2"), ("action", "dancing")]),
        (
            400,
            error("Bad Request: wrong parameter action in request", 400)
        )
    );
    let markup = r#"{"inline_keyboard":[[{"text":"A & B","callback_data":"a=b&c"}]]}"#;
    let (status, body) = bot.form(
        "sendMessage",
        &[
            ("chat_id", "2"),
            ("text", "x + y = z?"),
            ("reply_markup", markup),
        ],
    );
    assert_eq!(status, 200, "{body}");
    let (status, _) = bot.get("sendMessage", "chat_id=2&text=via%20query");
    assert_eq!(status, 200);
    let sent = tg.sent();
    let methods: Vec<&str> = sent.iter().map(|s| s.method.as_str()).collect();
    assert_eq!(
        methods,
        vec!["sendChatAction", "sendMessage", "sendMessage"]
    );
    assert_eq!(sent[0].message_id, None);
    assert_eq!(sent[1].text.as_deref(), Some("x + y = z?"));
    assert_eq!(
        sent[1].reply_markup,
        Some(serde_json::from_str(markup).unwrap())
    );
    assert_eq!(sent[2].text.as_deref(), Some("via query"));
}

#[test]
fn wait_sent_counts_messages_not_actions() {
    let tg = Arc::new(FakeTelegram::start().unwrap());
    tg.know_chat(1);
    let sender = {
        let tg = Arc::clone(&tg);
        thread::spawn(move || {
            let bot = Bot::new(&tg);
            bot.ok("sendChatAction", json!({"chat_id": 1, "action": "typing"}));
            thread::sleep(Duration::from_millis(200));
            bot.ok("sendMessage", json!({"chat_id": 1, "text": "one"}));
            bot.ok("sendMessage", json!({"chat_id": 1, "text": "two"}));
        })
    };
    let got = tg.wait_sent(2, Duration::from_secs(10));
    sender.join().unwrap();
    let texts: Vec<Option<&str>> = got.iter().map(|s| s.text.as_deref()).collect();
    assert_eq!(texts, vec![Some("one"), Some("two")]);
}

#[test]
#[should_panic(expected = "3 messages not sent within")]
fn wait_sent_panics_with_what_was_sent_on_timeout() {
    let tg = FakeTelegram::start().unwrap();
    tg.know_chat(1);
    Bot::new(&tg).ok("sendMessage", json!({"chat_id": 1, "text": "only one"}));
    tg.wait_sent(3, Duration::from_millis(200));
}

#[test]
fn refused_calls_are_listed_and_a_chat_that_never_wrote_is_not_found() {
    let tg = FakeTelegram::start().unwrap();
    let bot = Bot::new(&tg);
    assert_eq!(
        bot.call("sendMessage", json!({"chat_id": 31, "text": "hi"}))
            .0,
        400
    );
    let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        tg.wait_sent(1, Duration::from_millis(100))
    }));
    let panic = waited.unwrap_err();
    let text = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(text.contains("FakeTelegram::know_chat"), "{text}");
    tg.push_text(31, 31, "hello bot");
    bot.ok("sendMessage", json!({"chat_id": 31, "text": "hi"}));
    assert_eq!(
        tg.refused(),
        vec![(
            "sendMessage".to_string(),
            400,
            "Bad Request: chat not found".to_string()
        )]
    );
}
