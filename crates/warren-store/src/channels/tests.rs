//! The channel store's state machines (issue 38): a redelivered update is stored once, a row
//! is claimed for one turn once, a turn has at most one reply, a crash during a turn leaves the
//! row interrupted with a notice, and the outbox resumes after the last recorded chunk.

use super::*;

fn store() -> (tempfile::TempDir, ChannelStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = ChannelStore::open(&dir.path().join("channels").join("channels.db")).unwrap();
    (dir, store)
}

fn text(update: u32, sender: &str, text: &str) -> Inbound {
    Inbound {
        platform_id: update.to_string(),
        kind: "text".into(),
        chat_id: sender.into(),
        sender_id: sender.into(),
        text: text.into(),
        ..Inbound::default()
    }
}

fn reply(inbox_id: i64, text: &str) -> Outbound {
    Outbound {
        inbox_id: Some(inbox_id),
        purpose: "reply".into(),
        chat_id: "7".into(),
        text: text.into(),
        ..Outbound::default()
    }
}

#[test]
fn a_redelivered_update_is_stored_once_and_claimed_once_issue38() {
    let (_dir, s) = store();
    assert_eq!(
        s.receive(
            "telegram.home",
            &[text(1, "7", "hi"), text(2, "7", "again")]
        )
        .unwrap(),
        2
    );
    assert_eq!(
        s.receive(
            "telegram.home",
            &[text(2, "7", "again"), text(3, "7", "three")]
        )
        .unwrap(),
        1
    );
    assert_eq!(
        s.receive("telegram.other", &[text(1, "7", "hi")]).unwrap(),
        1,
        "ids are per channel"
    );
    let rows = s.received("telegram.home").unwrap();
    assert_eq!(
        rows.iter().map(|r| r.text.as_str()).collect::<Vec<_>>(),
        ["hi", "again", "three"]
    );
    assert!(s.start_turn(rows[0].id, "tg_home_7_7").unwrap());
    assert!(
        !s.start_turn(rows[0].id, "tg_home_7_7").unwrap(),
        "claimed twice"
    );
    s.finish_turn(
        "telegram.home",
        rows[0].id,
        None,
        Some(&reply(rows[0].id, "one")),
    )
    .unwrap();
    s.finish_turn(
        "telegram.home",
        rows[0].id,
        None,
        Some(&reply(rows[0].id, "two")),
    )
    .unwrap();
    let due = s.due("telegram.home", i64::MAX).unwrap();
    assert_eq!(
        due.iter().map(|r| r.text.as_str()).collect::<Vec<_>>(),
        ["one"],
        "one reply per turn"
    );
}

#[test]
fn a_turn_the_process_died_in_is_interrupted_not_rerun_issue38() {
    let (_dir, s) = store();
    s.receive("telegram.home", &[text(1, "7", "hi")]).unwrap();
    let row = s.received("telegram.home").unwrap().remove(0);
    assert!(s.start_turn(row.id, "k").unwrap());
    let interrupted = s
        .interrupt_started("telegram.home", |r| Outbound {
            inbox_id: Some(r.id),
            purpose: "notice".into(),
            chat_id: r.chat_id.clone(),
            text: "interrupted".into(),
            ..Outbound::default()
        })
        .unwrap();
    assert_eq!(interrupted.len(), 1);
    assert!(s.received("telegram.home").unwrap().is_empty());
    assert!(
        !s.start_turn(row.id, "k").unwrap(),
        "an interrupted row ran again"
    );
    assert_eq!(s.inbox_row(row.id).unwrap().unwrap().state, "interrupted");
    assert_eq!(
        s.due("telegram.home", i64::MAX).unwrap()[0].text,
        "interrupted"
    );
}

#[test]
fn the_outbox_records_chunks_retries_and_failures_issue38() {
    let (_dir, s) = store();
    let id = s.enqueue("telegram.home", &reply(1, "long")).unwrap();
    s.sending(id).unwrap();
    s.chunk_sent(id, "100").unwrap();
    s.retry_at(id, "429: retry after 3", i64::MAX - 1).unwrap();
    assert!(
        s.due("telegram.home", 0).unwrap().is_empty(),
        "not due before retry_after"
    );
    let row = s.due("telegram.home", i64::MAX).unwrap().remove(0);
    assert_eq!(
        (row.chunks_sent, row.attempts, row.message_ids.clone()),
        (1, 1, vec!["100".to_string()])
    );
    assert_eq!(row.error.as_deref(), Some("429: retry after 3"));
    s.sending(id).unwrap();
    s.chunk_sent(id, "101").unwrap();
    s.sent(id).unwrap();
    assert!(s.due("telegram.home", i64::MAX).unwrap().is_empty());
    let row = s.outbox("telegram.home", 5).unwrap().remove(0);
    assert_eq!(
        (row.state.as_str(), row.message_ids),
        ("sent", vec!["100".to_string(), "101".to_string()])
    );
    let bad = s.enqueue("telegram.home", &reply(2, "x")).unwrap();
    s.failed(bad, "400: chat not found").unwrap();
    assert_eq!(
        s.counts("telegram.home").unwrap().outbox.get("failed"),
        Some(&1)
    );
}

#[test]
fn senders_are_prompted_once_and_sessions_get_new_generations_issue38() {
    let (_dir, s) = store();
    assert!(s.note_pending("telegram.home", "9", "Mallory").unwrap());
    assert!(!s.note_pending("telegram.home", "9", "Mallory").unwrap());
    s.set_sender("telegram.home", "9", "blocked").unwrap();
    assert_eq!(
        s.sender("telegram.home", "9").unwrap().unwrap().status,
        "blocked"
    );
    assert_eq!(s.senders("telegram.home").unwrap().len(), 1);
    assert_eq!(s.generation("telegram.home", "7").unwrap(), 0);
    assert_eq!(s.next_generation("telegram.home", "7").unwrap(), 1);
    assert_eq!(s.next_generation("telegram.home", "7").unwrap(), 2);
    assert_eq!(s.generation("telegram.home", "7").unwrap(), 2);
}
