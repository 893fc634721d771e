//! The Bot API client as the media intake's file source and the approval watcher's messenger
//! (issue 38 §4, §5): [`crate::media`] and [`crate::approvals`] stay below the adapter.

use serde_json::json;

use super::api::Api;
use crate::approvals::Messenger;
use crate::media::FileSource;

impl FileSource for Api {
    fn locate(&self, file_id: &str) -> Result<(String, Option<u64>), String> {
        let info = self
            .call("getFile", &json!({"file_id": file_id}))
            .map_err(|e| e.to_string())?;
        let path = info["file_path"]
            .as_str()
            .ok_or("getFile answered without a file_path")?
            .to_string();
        Ok((path, info["file_size"].as_u64()))
    }

    fn fetch(&self, path: &str, limit: u64) -> Result<Option<Vec<u8>>, String> {
        self.download(path, limit).map_err(|e| e.to_string())
    }
}

impl Messenger for Api {
    fn send(&self, chat: &str, text: &str, markup: &str) -> Result<i64, String> {
        let id = self
            .send_message(chat, None, text, false, Some(markup))
            .map_err(|e| e.to_string())?;
        id.parse::<i64>()
            .map_err(|_| format!("sendMessage answered message id '{id}'"))
    }

    fn edit(&self, chat: &str, message: i64, text: &str) -> Result<(), String> {
        let body = json!({"chat_id": chat, "message_id": message, "text": text,
                          "reply_markup": {"inline_keyboard": []}});
        self.call("editMessageText", &body)
            .map(drop)
            .map_err(|e| e.to_string())
    }
}
