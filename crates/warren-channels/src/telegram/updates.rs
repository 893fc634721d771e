//! Telegram updates as inbox rows: a message (text, caption, or a note that media arrived), a
//! command (`/new`, `/stop`, `/status`, `/start`), or a button press (`callback_query`). The
//! payload keeps what the worker decides on later: the chat type, whether the bot was
//! addressed (mentioned, or replied to) in a group, a button's data and its query id.

use serde_json::{Value, json};
use warren_store::channels::Inbound;

/// Who the bot is (from `getMe`), to tell when a group message addresses it.
#[derive(Debug, Clone, Default)]
pub struct Bot {
    pub id: i64,
    pub username: String,
}

/// The commands a channel answers itself.
pub const COMMANDS: [&str; 4] = ["/new", "/stop", "/status", "/start"];

/// The update's id (for the next `getUpdates` offset).
pub fn update_id(update: &Value) -> Option<i64> {
    update["update_id"].as_i64()
}

fn id_text(v: &Value) -> Option<String> {
    v.as_i64().map(|n| n.to_string())
}

fn name_of(user: &Value) -> String {
    let first = user["first_name"].as_str().unwrap_or_default();
    let last = user["last_name"].as_str().unwrap_or_default();
    let mut name = format!("{first} {last}").trim().to_string();
    if let Some(handle) = user["username"].as_str() {
        if name.is_empty() {
            name = format!("@{handle}");
        } else {
            name = format!("{name} (@{handle})");
        }
    }
    name
}

/// The inbox row of `update`, or `None` for an update the channel does not handle (an edited
/// message, a message without a sender). Unhandled updates are still confirmed.
pub fn inbound(update: &Value, bot: &Bot) -> Option<Inbound> {
    let platform_id = id_text(&update["update_id"])?;
    if let Some(query) = update.get("callback_query") {
        let from = &query["from"];
        let message = &query["message"];
        return Some(Inbound {
            platform_id,
            kind: "callback".into(),
            chat_id: id_text(&message["chat"]["id"])
                .unwrap_or_else(|| id_text(&from["id"]).unwrap_or_default()),
            thread_id: id_text(&message["message_thread_id"]),
            message_id: id_text(&message["message_id"]),
            sender_id: id_text(&from["id"])?,
            sender_name: name_of(from),
            text: query["data"].as_str().unwrap_or_default().to_string(),
            payload: Some(json!({"callback_query_id": query["id"]}).to_string()),
        });
    }
    let message = update.get("message")?;
    let from = &message["from"];
    let chat_type = message["chat"]["type"].as_str().unwrap_or("private");
    let group = chat_type != "private";
    let raw = message["text"]
        .as_str()
        .or_else(|| message["caption"].as_str())
        .unwrap_or_default();
    let media = ["photo", "document", "voice", "audio", "video", "sticker"]
        .into_iter()
        .find(|k| message.get(*k).is_some());
    let mention = format!("@{}", bot.username);
    let mentioned =
        !bot.username.is_empty() && raw.to_lowercase().contains(&mention.to_lowercase());
    let replied_to_bot = message["reply_to_message"]["from"]["id"].as_i64() == Some(bot.id);
    let addressed = !group || mentioned || replied_to_bot;
    let mut text = if mentioned {
        remove_ci(raw, &mention).trim().to_string()
    } else {
        raw.to_string()
    };
    let command = COMMANDS.into_iter().find(|c| {
        let first = text.split_whitespace().next().unwrap_or_default();
        let bare = first.split('@').next().unwrap_or_default();
        bare == *c
    });
    if let Some(kind) = media
        && text.is_empty()
    {
        text = format!("[{kind}]"); // issue 38 §5: the file itself is in the payload (crate::media)
    }
    if text.is_empty() {
        return None;
    }
    Some(Inbound {
        platform_id,
        kind: if command.is_some() { "command" } else { "text" }.into(),
        chat_id: id_text(&message["chat"]["id"])?,
        thread_id: message["is_topic_message"]
            .as_bool()
            .unwrap_or(false)
            .then(|| id_text(&message["message_thread_id"]))
            .flatten(),
        message_id: id_text(&message["message_id"]),
        sender_id: id_text(&from["id"])?,
        sender_name: name_of(from),
        text: command.map_or(text, str::to_string),
        payload: Some(json!({"chat_type": chat_type, "addressed": addressed, "media": crate::media::describe(message)}).to_string()),
    })
}

/// `text` without any case-insensitive occurrence of `needle` (ASCII user names).
fn remove_ci(text: &str, needle: &str) -> String {
    let lower = text.to_lowercase();
    let needle = needle.to_lowercase();
    if lower.len() != text.len() {
        return text.replace(&needle, "");
    }
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while let Some(at) = lower[i..].find(&needle) {
        out.push_str(&text[i..i + at]);
        i += at + needle.len();
    }
    out.push_str(&text[i..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bot() -> Bot {
        Bot {
            id: 42,
            username: "home_bot".into(),
        }
    }

    #[test]
    fn messages_commands_groups_and_buttons_become_rows_issue38() {
        let private = json!({"update_id": 5, "message": {"message_id": 9, "chat": {"id": 7, "type": "private"},
            "from": {"id": 7, "first_name": "Ann", "username": "ann"}, "text": "hello"}});
        let row = inbound(&private, &bot()).unwrap();
        assert_eq!(
            (
                row.platform_id.as_str(),
                row.kind.as_str(),
                row.text.as_str()
            ),
            ("5", "text", "hello")
        );
        assert_eq!(row.sender_name, "Ann (@ann)");
        assert!(row.payload.unwrap().contains("\"addressed\":true"));

        let group = json!({"update_id": 6, "message": {"message_id": 10, "chat": {"id": -100, "type": "supergroup"},
            "from": {"id": 8, "first_name": "Bo"}, "text": "lunch?"}});
        assert!(
            inbound(&group, &bot())
                .unwrap()
                .payload
                .unwrap()
                .contains("\"addressed\":false")
        );
        let mention = json!({"update_id": 7, "message": {"message_id": 11, "chat": {"id": -100, "type": "supergroup"},
            "from": {"id": 8, "first_name": "Bo"}, "text": "@Home_Bot what time is it", "is_topic_message": true,
            "message_thread_id": 3}});
        let row = inbound(&mention, &bot()).unwrap();
        assert_eq!(
            (row.text.as_str(), row.thread_id.as_deref()),
            ("what time is it", Some("3"))
        );
        assert!(row.payload.unwrap().contains("\"addressed\":true"));

        let cmd = json!({"update_id": 8, "message": {"message_id": 12, "chat": {"id": 7, "type": "private"},
            "from": {"id": 7, "first_name": "Ann"}, "text": "/new@home_bot"}});
        let row = inbound(&cmd, &bot()).unwrap();
        assert_eq!((row.kind.as_str(), row.text.as_str()), ("command", "/new"));

        let press = json!({"update_id": 9, "callback_query": {"id": "q1", "data": "allow:9",
            "from": {"id": 7, "first_name": "Ann"}, "message": {"message_id": 13, "chat": {"id": 7}}}});
        let row = inbound(&press, &bot()).unwrap();
        assert_eq!(
            (row.kind.as_str(), row.text.as_str(), row.sender_id.as_str()),
            ("callback", "allow:9", "7")
        );
        assert!(row.payload.unwrap().contains("q1"));

        let edited = json!({"update_id": 10, "edited_message": {"text": "x"}});
        assert!(inbound(&edited, &bot()).is_none());
    }
}
