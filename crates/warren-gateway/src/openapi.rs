//! `GET /api/openapi.json`: an OpenAPI 3.1 document generated from the route table
//! ([`crate::routes::ROUTES`]), so every route the router serves is listed with its access rule.

use serde_json::{Map, Value, json};

use crate::routes::{Access, ROUTES};

/// The document.
pub fn document() -> Value {
    let mut paths: Map<String, Value> = Map::new();
    for route in ROUTES {
        let mut op = json!({
            "summary": route.summary,
            "responses": responses(route.access),
        });
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
                "required": true,
                "content": {"application/json": {"schema": {"type": "object"}, "example": example}},
            });
        }
        if route.path.contains("{id}") {
            op["parameters"] = json!([{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}]);
        }
        if route.path.contains("{alias}") {
            op["parameters"] = json!([{"name": "alias", "in": "path", "required": true, "schema": {"type": "string"}}]);
        }
        let entry = paths
            .entry(route.path.to_string())
            .or_insert_with(|| json!({}));
        entry[route.method.to_ascii_lowercase()] = op;
    }
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
            r["409"] = with_description(&error, "config.toml changed on disk, or ambiguous id");
            r["413"] = json!({"description": "body larger than 64 KiB"});
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
