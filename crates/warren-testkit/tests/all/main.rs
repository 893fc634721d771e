//! The test kit's own tests, one binary: the fake Telegram Bot API (issue 38).

mod telegram;
mod telegram_chat;
