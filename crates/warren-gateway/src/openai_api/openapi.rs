//! The OpenAPI path items of the OpenAI-compatible routes, added to `GET /api/openapi.json`
//! so the API fuzzing (`.ci/api-fuzz`) covers them.

use serde_json::{Map, Value, json};

use super::retry::RETRY_COUNT_HEADER;
use super::{MAX_USER, OPENAI_ROUTES};

/// The OpenAPI path items of [`OPENAI_ROUTES`] (added to `GET /api/openapi.json`).
pub fn openapi_paths(paths: &mut Map<String, Value>) {
    let error = json!({"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object",
        "required": ["message", "type", "code"],
        "properties": {
            "message": {"type": "string"},
            "type": {"type": "string"},
            "param": {"type": ["string", "null"]},
            "code": {"type": ["string", "null"]},
        },
    }}});
    let err = |description: &str| json!({"description": description, "content": {"application/json": {"schema": error}}});
    let model = json!({"type": "object", "required": ["id", "object", "created", "owned_by"], "properties": {
        "id": {"type": "string"}, "object": {"const": "model"},
        "created": {"type": "integer"}, "owned_by": {"type": "string"},
    }});
    let common = |mut r: Value| {
        r["401"] = err("missing, invalid or revoked bearer token");
        r["404"] = err("unknown model, or [gateway.openai] enabled = false");
        r["408"] = err("no response within the time limit");
        r["413"] = json!({"description": "body larger than 1 MiB"});
        r
    };
    let models = common(
        json!({"200": {"description": "OK", "content": {"application/json": {"schema": {
            "type": "object", "required": ["object", "data"],
            "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": model}},
        }}}}}),
    );
    let one_model = common(
        json!({"200": {"description": "OK", "content": {"application/json": {"schema": model}}}}),
    );
    let mut completion = common(
        json!({"200": {"description": "OK (X-Warren-Session names the session)", "content": {
            "application/json": {"schema": {"type": "object", "required": ["id", "object", "created", "model", "choices", "usage"], "properties": {
                "id": {"type": "string"}, "object": {"const": "chat.completion"}, "created": {"type": "integer"},
                "model": {"type": "string"}, "choices": {"type": "array"}, "usage": {"type": "object"},
            }}},
            "text/event-stream": {"schema": {"type": "string"}},
        }}}),
    );
    completion["400"] =
        err("malformed request, client tools, or the last message is not a user message");
    completion["409"] = err(
        "the resent history differs from the session's, the session belongs to another agent, or the agent lacks a provider",
    );
    completion["429"] = err("the session's queue is full, or a cost limit was reached");
    completion["502"] = err("the agent's provider failed");
    completion["503"] =
        err("sessions or the agent are unavailable, or the turn was cancelled by a reload");
    let mut response = completion.clone();
    response["200"] = json!({"description": "OK (X-Warren-Session names the session)", "content": {
        "application/json": {"schema": {"type": "object", "required": ["id", "object", "created_at", "status", "model", "output", "usage"], "properties": {
            "id": {"type": "string"}, "object": {"const": "response"}, "created_at": {"type": "integer"},
            "status": {"type": "string"}, "model": {"type": "string"}, "output": {"type": "array"}, "usage": {"type": "object"},
        }}},
    }});
    let message = json!({"type": "object", "required": ["role"], "properties": {
        "role": {"enum": ["system", "developer", "user", "assistant"]},
        "content": {"type": ["string", "null"]},
    }});
    let request = json!({
        "type": "object",
        "required": ["model", "messages"],
        "properties": {
            "model": {"type": "string", "minLength": 1},
            "messages": {"type": "array", "minItems": 1, "items": message},
            "stream": {"type": ["boolean", "null"]},
            "stream_options": {"type": ["object", "null"], "properties": {"include_usage": {"type": ["boolean", "null"]}}},
            "user": {"type": ["string", "null"], "maxLength": MAX_USER},
        },
    });
    let security = json!([{"bearer": []}]);
    let turn_headers = json!([
        {"name": "X-Warren-Session", "in": "header", "required": false,
         "description": "the Warren session of the turn (else one per token and `user`)",
         "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,128}$"}},
        {"name": RETRY_COUNT_HEADER, "in": "header", "required": false,
         "description": "set by OpenAI's SDKs on a retry (1, 2, ...): the request joins the attempt it repeats instead of running the turn again",
         "schema": {"type": "string", "pattern": "^[0-9]{1,3}$"}},
    ]);
    let summary = |path: &str| {
        OPENAI_ROUTES
            .iter()
            .find(|r| r.path == path)
            .map_or("", |r| r.summary)
    };
    paths.insert(
        "/v1/models".into(),
        json!({"get": {"summary": summary("/v1/models"), "operationId": "get_v1_models", "security": security, "responses": models}}),
    );
    paths.insert(
        "/v1/models/{model}".into(),
        json!({"get": {"summary": summary("/v1/models/{model}"), "operationId": "get_v1_models_model", "security": security,
            "parameters": [{"name": "model", "in": "path", "required": true, "schema": {"type": "string", "minLength": 1}, "example": "main"}],
            "responses": one_model}}),
    );
    paths.insert(
        "/v1/chat/completions".into(),
        json!({"post": {"summary": summary("/v1/chat/completions"), "operationId": "post_v1_chat_completions", "security": security,
            "parameters": turn_headers.clone(),
            "requestBody": {"required": true, "content": {"application/json": {"schema": request,
                "example": {"model": "main", "messages": [{"role": "user", "content": "hello"}]}}}},
            "responses": completion}}),
    );
    let response_request = json!({
        "type": "object",
        "required": ["model", "input"],
        "properties": {
            "model": {"type": "string", "minLength": 1},
            "input": {"oneOf": [{"type": "string", "minLength": 1}, {"type": "array", "minItems": 1, "items": message}]},
            "stream": {"type": ["boolean", "null"]},
            "user": {"type": ["string", "null"], "maxLength": MAX_USER},
        },
    });
    paths.insert(
        "/v1/responses".into(),
        json!({"post": {"summary": summary("/v1/responses"), "operationId": "post_v1_responses", "security": security,
            "parameters": turn_headers,
            "requestBody": {"required": true, "content": {"application/json": {"schema": response_request,
                "example": {"model": "main", "input": "hello"}}}},
            "responses": response}}),
    );
}
