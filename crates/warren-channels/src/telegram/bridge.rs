//! The Bot API client as the media intake's file source and the approval watcher's messenger
//! (issue 38 §4, §5): [`crate::media`] and [`crate::approvals`] stay below the adapter.

use serde_json::json;

use super::api::Api;
use crate::approvals::Messenger;
use crate::media::FileSource;
use crate::platform::PlatformError;

impl FileSource for Api {
    fn locate(&self, file_id: &str) -> Result<(String, Option<u64>), PlatformError> {
        let info = self
            .call("getFile", &json!({"file_id": file_id}))
            .map_err(|e| PlatformError::new("getFile", e))?;
        let path = info["file_path"]
            .as_str()
            .ok_or_else(|| PlatformError::new("getFile", "answered without a file_path"))?
            .to_string();
        Ok((path, info["file_size"].as_u64()))
    }

    fn fetch(&self, path: &str, limit: u64) -> Result<Option<Vec<u8>>, PlatformError> {
        self.download(path, limit)
            .map_err(|e| PlatformError::new("file download", e))
    }
}

impl Messenger for Api {
    fn send(&self, chat: &str, text: &str, markup: &str) -> Result<i64, PlatformError> {
        let id = self
            .send_message(chat, None, text, false, Some(markup))
            .map_err(|e| PlatformError::new("sendMessage", e))?;
        id.parse::<i64>()
            .map_err(|_| PlatformError::new("sendMessage", format!("answered message id '{id}'")))
    }

    fn edit(&self, chat: &str, message: i64, text: &str) -> Result<(), PlatformError> {
        let body = json!({"chat_id": chat, "message_id": message, "text": text,
                          "reply_markup": {"inline_keyboard": []}});
        self.call("editMessageText", &body)
            .map(drop)
            .map_err(|e| PlatformError::new("editMessageText", e))
    }
}
