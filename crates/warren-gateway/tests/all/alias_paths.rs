//! The `{alias}` segment is parsed once at the edge (issue 14 §3): a segment that is not an
//! alias answers 400 with the JSON error shape, field `alias`, before the handler runs (a bad
//! body or query is not even looked at, and nothing is written).

use axum::http::StatusCode;
use serde_json::json;

use crate::common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_segment_that_is_not_an_alias_answers_400_before_anything_runs() {
    let s = common::scripted(r#"{"turns": []}"#, "test", "", "");
    let state = common::state_for(&s.root, &s.store, &s.process, &s.services);
    let app = || {
        warren_gateway::router(state.clone()).layer(axum::extract::connect_info::MockConnectInfo(
            std::net::SocketAddr::from(([127, 0, 0, 1], 40000)),
        ))
    };
    let config_before = std::fs::read_to_string(s.root.config_file()).unwrap();
    // `..%2Fmain` decodes to `../main`; `Main` and `default` are refused by the alias rules.
    for (bad, why) in [
        ("Main", "contains 'M'"),
        ("default", "reserved"),
        ("..%2Fmain", "contains '.'"),
        ("a%20b", "contains ' '"),
    ] {
        for (method, path, body) in [
            ("POST", format!("/api/agents/{bad}/chat"), Some("not json")),
            ("GET", format!("/api/agents/{bad}/sessions"), None),
            (
                "GET",
                format!("/api/agents/{bad}/sessions/k?limit=nonsense"),
                None,
            ),
            ("GET", format!("/api/agents/{bad}/memory"), None),
            ("GET", format!("/api/agents/{bad}/delete-plan"), None),
            ("DELETE", format!("/api/agents/{bad}"), None),
            (
                "POST",
                format!("/api/agents/{bad}/rename"),
                Some(r#"{"to": "x"}"#),
            ),
        ] {
            let (status, answer) = common::call(app(), method, &path, Some(&s.token), body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{method} {path}: {answer}");
            assert_eq!(
                answer["error"],
                json!("invalid_request"),
                "{path}: {answer}"
            );
            assert_eq!(answer["field"], json!("alias"), "{path}: {answer}");
            let message = answer["message"].as_str().unwrap_or_default();
            assert!(message.contains(why), "{path}: {message}");
        }
    }
    // Nothing ran: no session was opened for anyone, the config is untouched.
    let (status, sessions) = common::call(
        app(),
        "GET",
        "/api/agents/main/sessions",
        Some(&s.token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{sessions}");
    assert_eq!(sessions["count"], json!(0), "{sessions}");
    assert_eq!(
        std::fs::read_to_string(s.root.config_file()).unwrap(),
        config_before
    );
}
