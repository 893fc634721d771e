//! `GET /api/openapi.json`: an OpenAPI 3.1 document generated from the route table
//! ([`crate::routes::ROUTES`]), so every route the router serves is listed with its access rule.

use serde_json::{Map, Value, json};

use crate::route::{Access, Route};

/// The document of `routes` (the gateway serves that of [`crate::routes::ROUTES`]) and of the
/// routes outside that table (OpenAI-compatible, cron, SOP, metrics).
pub fn document(routes: &[Route]) -> Value {
    let mut paths: Map<String, Value> = Map::new();
    for route in routes {
        let mut op = json!({
            "summary": route.summary,
            "operationId": operation_id(route.method, route.path),
            "responses": responses(route.access),
        });
        op["responses"]["200"]["content"]["application/json"]["schema"] =
            success_schema(route.method, route.path);
        if route.method == "POST" && route.path == "/api/agents" {
            op["responses"]["201"] = op["responses"]["200"].clone();
            op["responses"]["201"]["description"] = "Created".into();
            if let Some(r) = op["responses"].as_object_mut() {
                r.remove("200");
            }
        }
        if route.path == "/api/agents/{alias}/chat" {
            op["responses"]["200"]["content"]["text/event-stream"] =
                json!({"schema": {"type": "string"}});
            op["responses"]["202"] = turn_accepted();
        }
        if route.path == "/api/events" {
            op["responses"]["200"]["content"] =
                json!({"text/event-stream": {"schema": {"type": "string"}}});
        }
        match route.access {
            Access::Public => op["security"] = json!([]),
            Access::Token => op["security"] = json!([{"bearer": []}]),
            Access::Admin => {
                op["security"] = json!([{"adminKey": []}, {"bearer": []}]);
                op["description"] = "Loopback only unless gateway.allow_remote_admin.".into();
            }
        }
        if let Some(example) = route.request {
            let example: Value = serde_json::from_str(example).unwrap_or(Value::Null);
            op["requestBody"] = json!({
                "required": route.path != "/api/agents/{alias}/memory/{key}/undo",
                "content": {"application/json": {"schema": body_schema(route.method, route.path), "example": example}},
            });
        }
        let mut parameters: Vec<Value> = route
            .path
            .split('/')
            .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
            .map(|name| {
                let (schema, example) = match name {
                    "alias" => (alias_schema(), "main"),
                    "key" => (json!({"type": "string", "minLength": 1}), "http-main"),
                    _ => (json!({"type": "string", "minLength": 1}), "000000000000"),
                };
                json!({"name": name, "in": "path", "required": true, "schema": schema, "example": example})
            })
            .collect();
        parameters.extend(query_parameters(route.path));
        if !parameters.is_empty() {
            op["parameters"] = Value::Array(parameters);
        }
        let entry = paths
            .entry(route.path.to_string())
            .or_insert_with(|| json!({}));
        entry[route.method.to_ascii_lowercase()] = op;
    }
    crate::openai_api::openapi_paths(&mut paths);
    crate::cron_api::openapi_paths(&mut paths);
    crate::sop_api::openapi_paths(&mut paths);
    crate::metrics_api::openapi_paths(&mut paths);
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Warren gateway", "version": env!("CARGO_PKG_VERSION")},
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "wrn_ + 64 hex, from POST /pair"},
                "adminKey": {"type": "apiKey", "in": "header", "name": "X-Warren-Admin", "description": "the local admin key in data/gateway.json"},
            },
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["error", "message"],
                    "properties": {
                        "error": {"type": "string"},
                        "message": {"type": "string"},
                        "field": {"type": "string"},
                        "retry_after_secs": {"type": "integer"},
                        "problems": {"type": "array"},
                    },
                },
            },
        },
        "paths": paths,
    })
}

fn operation_id(method: &str, path: &str) -> String {
    let mut id = method.to_ascii_lowercase();
    for seg in path.split('/').filter(|s| !s.is_empty()) {
        id.push('_');
        id.push_str(&seg.replace(['{', '}'], "").replace(['.', '-'], "_"));
    }
    id
}

/// An agent alias: 1 to 32 of `[a-z0-9_-]`.
fn alias_schema() -> Value {
    json!({"type": "string", "pattern": "^[a-z0-9_-]{1,32}$"})
}

fn string() -> Value {
    json!({"type": "string"})
}

/// The JSON schema of a route's request body (what its handler accepts).
fn body_schema(method: &str, path: &str) -> Value {
    let object = |required: &[&str], properties: Value| json!({"type": "object", "required": required, "properties": properties, "additionalProperties": false});
    match (method, path) {
        ("POST", "/pair") => object(
            &["code", "device"],
            json!({"code": string(), "device": {"type": "string", "minLength": 1, "maxLength": 64}}),
        ),
        ("POST", "/api/agents") => object(
            &["alias"],
            json!({"alias": alias_schema(), "provider": string(), "model": string(), "risk_profile": string()}),
        ),
        ("POST", "/api/agents/{alias}/chat") => object(
            &["message"],
            json!({"message": {"type": "string", "minLength": 1}, "session": string()}),
        ),
        ("POST", "/api/approvals/{id}") => {
            object(&["approve"], json!({"approve": {"type": "boolean"}}))
        }
        ("POST", "/api/agents/{alias}/memory/{key}/undo") => object(
            &[],
            json!({"to": {"type": "integer", "minimum": 0, "description": "the version to restore; absent = the one before the current"}}),
        ),
        ("PATCH", "/api/config") => json!({
            "type": "object",
            "minProperties": 1,
            "description": "dotted key paths to values; null removes the key",
        }),
        _ => json!({"type": "object"}),
    }
}

fn query(name: &str, schema: Value) -> Value {
    json!({"name": name, "in": "query", "required": false, "schema": schema})
}

fn bounded(min: u64, max: u64) -> Value {
    json!({"type": "integer", "minimum": min, "maximum": max})
}

/// The query parameters a route reads.
fn query_parameters(path: &str) -> Vec<Value> {
    const BIG: u64 = u64::MAX >> 1;
    match path {
        "/api/agents/{alias}/sessions/{key}" => {
            vec![
                query("after", bounded(0, BIG)),
                query("limit", bounded(1, 1000)),
            ]
        }
        "/api/agents/{alias}/memory" => vec![query("q", string()), query("limit", bounded(1, 100))],
        "/api/costs" => vec![query("agent", string()), query("limit", bounded(1, 1000))],
        "/api/logs" => vec![
            query("agent", string()),
            query("kind", string()),
            query("before", bounded(0, BIG)),
            query("limit", bounded(1, 1000)),
        ],
        "/api/events" => vec![query("agent", string()), query("kind", string())],
        "/api/turns/{id}" => vec![query("wait", bounded(0, crate::turns_api::MAX_WAIT_SECS))],
        _ => Vec::new(),
    }
}

/// The JSON schema of a route's success body: the top-level keys its handler always writes,
/// with their types (`null` where the value may be absent; nested values are typed, not
/// spelled out).
fn success_schema(method: &str, path: &str) -> Value {
    let obj = |fields: &[(&str, &str)]| {
        let properties: Map<String, Value> = fields
            .iter()
            .map(|(k, t)| {
                let schema = match *t {
                    "any" => json!({}),
                    t => match t.strip_suffix('?') {
                        Some(t) => json!({"type": [t, "null"]}),
                        None => json!({"type": t}),
                    },
                };
                ((*k).to_string(), schema)
            })
            .collect();
        let required: Vec<&str> = fields.iter().map(|(k, _)| *k).collect();
        json!({"type": "object", "required": required, "properties": properties})
    };
    let report = [
        ("op", "string"),
        ("alias", "string"),
        ("references", "array"),
        ("counts", "object"),
        ("warnings", "array"),
        ("converged", "boolean"),
    ];
    match (method, path) {
        ("GET", "/health") => obj(&[("status", "string")]),
        ("POST", "/pair") => obj(&[("token", "string"), ("device", "object")]),
        ("GET", "/api/health") => obj(&[
            ("status", "string"),
            ("pid", "integer"),
            ("uptime_secs", "integer"),
            ("components", "object"),
        ]),
        ("GET", "/api/status") => obj(&[
            ("version", "string"),
            ("pid", "integer"),
            ("uptime_secs", "integer"),
            ("config_generation", "integer"),
            ("daemon_generation", "integer"),
            ("gateway", "object"),
            ("agents", "array?"),
        ]),
        ("GET", "/api/devices") => obj(&[("count", "integer"), ("devices", "array")]),
        ("GET", "/api/channels" | "/admin/channels") => obj(&[("channels", "array")]),
        ("GET", "/api/channels/{name}") => obj(&[
            ("name", "string"),
            ("agent", "string"),
            ("health", "object"),
        ]),
        ("GET", "/api/channels/{name}/senders") => {
            obj(&[("channel", "string"), ("senders", "array")])
        }
        (
            "POST",
            "/api/channels/{name}/senders/{id}/allow" | "/api/channels/{name}/senders/{id}/block",
        ) => obj(&[
            ("channel", "string"),
            ("sender_id", "string"),
            ("status", "string"),
        ]),
        ("DELETE", "/api/devices/{id}") => obj(&[("revoked", "string")]),
        ("GET", "/api/config") => obj(&[("generation", "integer"), ("config", "object")]),
        ("PATCH", "/api/config") => obj(&[
            ("generation", "integer"),
            ("changed", "array"),
            ("warnings", "array"),
        ]),
        ("GET", "/api/openapi.json") => obj(&[("openapi", "string"), ("paths", "object")]),
        ("POST", "/api/agents/{alias}/rename")
        | ("DELETE", "/api/agents/{alias}")
        | ("POST", "/api/agents/restore") => obj(&report),
        ("GET", "/api/agents/{alias}/delete-plan") => obj(&[
            ("alias", "string"),
            ("allowed", "boolean"),
            ("blockers", "array"),
            ("scrubs", "array"),
            ("stores", "object"),
            ("reasons", "array"),
        ]),
        ("POST", "/admin/reload") => obj(&[("reloaded", "boolean"), ("generation", "integer")]),
        ("POST", "/admin/paircode") => obj(&[("code", "string"), ("expires_in_secs", "integer")]),
        ("GET", "/api/agents") => obj(&[("count", "integer"), ("agents", "array")]),
        ("GET", "/api/agents/restore") => obj(&[("count", "integer"), ("archives", "array")]),
        ("POST", "/api/agents") => obj(&[
            ("alias", "string"),
            ("config_generation", "integer"),
            ("warnings", "array"),
        ]),
        ("POST", "/api/agents/{alias}/chat") => obj(&[
            ("session", "string"),
            ("reply", "string"),
            ("provider_calls", "integer"),
            ("tool_calls", "integer"),
            ("input_tokens", "integer"),
            ("output_tokens", "integer"),
            ("hit_iteration_cap", "boolean"),
            ("notices", "array"),
            ("receipts", "array"),
        ]),
        ("GET", "/api/agents/{alias}/sessions") => {
            obj(&[("count", "integer"), ("sessions", "array")])
        }
        ("GET", "/api/agents/{alias}/sessions/{key}") => obj(&[
            ("session", "any"),
            ("messages", "array"),
            ("next_after", "integer?"),
        ]),
        ("GET", "/api/agents/{alias}/memory") => {
            obj(&[("agent", "string"), ("count", "integer"), ("hits", "array")])
        }
        ("GET", "/api/agents/{alias}/memory/{key}")
        | ("POST", "/api/agents/{alias}/memory/{key}/undo") => {
            obj(&[("agent", "string"), ("entry", "object")])
        }
        ("DELETE", "/api/agents/{alias}/memory/{key}") => obj(&[
            ("agent", "string"),
            ("key", "string"),
            ("forgotten", "boolean"),
        ]),
        ("GET", "/api/agents/{alias}/memory/{key}/history") => obj(&[
            ("agent", "string"),
            ("key", "string"),
            ("count", "integer"),
            ("versions", "array"),
        ]),
        ("GET", "/api/costs") => obj(&[
            ("total_usd", "number"),
            ("requests", "integer"),
            ("per_agent", "object"),
            ("records", "array"),
        ]),
        ("GET", "/api/turns/{id}") => {
            let mut schema = obj(&[
                ("turn", "string"),
                ("agent", "string"),
                ("session", "string"),
                ("status", "string"),
            ]);
            schema["properties"]["status"]["enum"] =
                json!(["running", "waiting_approval", "done", "failed"]);
            schema["properties"]["approval"] = approval_schema();
            schema["properties"]["result"] = json!({
                "type": "object",
                "description": "status done: the body a 200 chat answer has",
            });
            schema["properties"]["error"] = json!({
                "type": "object",
                "description": "status failed: {error, message, status} as the chat would have answered",
            });
            schema
        }
        ("GET", "/api/approvals") => obj(&[("count", "integer"), ("pending", "array")]),
        ("POST", "/api/approvals/{id}") => obj(&[("id", "string"), ("decision", "string")]),
        ("GET", "/api/logs") => obj(&[
            ("persistence", "string"),
            ("total", "integer"),
            ("events", "array"),
            ("next_before", "integer?"),
        ]),
        // `POST /admin/agents/lifecycle` answers a report, a plan or a list of reports.
        _ => json!({}),
    }
}

fn responses(access: Access) -> Value {
    let error = json!({"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}});
    let mut r = json!({
        "200": {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}},
    });
    match access {
        Access::Public => {
            r["400"] = with_description(&error, "malformed request (names the field)");
            r["403"] = with_description(&error, "wrong or expired code");
            r["413"] = json!({"description": "body larger than 64 KiB"});
            r["429"] = with_description(&error, "client locked out after repeated failures");
        }
        Access::Token | Access::Admin => {
            r["400"] = with_description(
                &error,
                "malformed request or invalid config (names the key)",
            );
            r["401"] = with_description(&error, "missing or invalid credential");
            r["404"] = with_description(&error, "not found");
            r["403"] = with_description(
                &error,
                "not allowed (e.g. the paired-token set in PATCH /api/config)",
            );
            r["408"] = with_description(
                &error,
                "the session stayed busy, or the request took too long",
            );
            r["409"] = with_description(
                &error,
                "config.toml changed on disk, ambiguous id, agent exists / lacks a provider, or the session belongs to another agent",
            );
            r["413"] = json!({"description": "body larger than 64 KiB"});
            r["429"] = with_description(
                &error,
                "the session's queue is full, or a cost limit was reached",
            );
            r["502"] = with_description(&error, "the agent's provider failed");
            r["503"] = with_description(
                &error,
                "sessions, memory or the agent's sandbox are unavailable; or the turn was cancelled by a reload",
            );
        }
    }
    if access == Access::Admin {
        r["403"] = with_description(&error, "not from loopback");
    }
    r
}

fn with_description(base: &Value, description: &str) -> Value {
    let mut v = base.clone();
    v["description"] = description.into();
    v
}

/// A call waiting for approval in a JSON chat's 202 answer and in `GET /api/turns/{id}`.
fn approval_schema() -> Value {
    json!({
        "type": "object",
        "required": ["id", "tool", "summary", "arguments", "reason", "call", "timeout_secs", "decide"],
        "properties": {
            "id": {"type": "string", "description": "decide it with POST /api/approvals/{id}"},
            "tool": string(),
            "summary": {"type": "string", "description": "the tool and its arguments, shortened"},
            "arguments": {"type": "object"},
            "reason": string(),
            "call": {"type": "string", "description": "the tool call's id"},
            "timeout_secs": {"type": "integer", "description": "no decision within it = denied"},
            "decide": string(),
        },
    })
}

/// The JSON chat's 202: the turn waits for an approval (issue 16 §2).
fn turn_accepted() -> Value {
    json!({
        "description": "A tool call of the turn waits for an operator's approval: decide it with POST /api/approvals/{id}, then read the turn's outcome with GET /api/turns/{turn} (?wait=SECS long-polls)",
        "content": {"application/json": {"schema": {
            "type": "object",
            "required": ["turn", "status", "approval", "poll"],
            "properties": {
                "turn": string(),
                "status": {"const": "waiting_approval"},
                "approval": approval_schema(),
                "poll": string(),
            },
        }}},
    })
}
