//! Query-string decoding for the handlers: `a=b&c=d` into a map (percent-decoded, `+` =
//! space), numbers read from it within bounds, every refusal a 400 naming the field.

use std::collections::BTreeMap;

use crate::error::ApiError;

/// Query parameters as strings; numbers are parsed by [`number`] so errors name the field.
pub(crate) fn query_map(
    route: &str,
    raw: Option<String>,
) -> Result<BTreeMap<String, String>, ApiError> {
    let raw = raw.unwrap_or_default();
    let pairs: Vec<(String, String)> = serde_urlencoded_pairs(&raw)
        .map_err(|_| ApiError::bad_field(route, "(query)", "malformed query string"))?;
    Ok(pairs.into_iter().collect())
}

/// `a=b&c=d` with percent-decoding (`+` = space).
fn serde_urlencoded_pairs(raw: &str) -> Result<Vec<(String, String)>, ()> {
    raw.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((decode(k)?, decode(v)?))
        })
        .collect()
}

fn decode(s: &str) -> Result<String, ()> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).ok_or(())?;
                let hex = std::str::from_utf8(hex).map_err(|_| ())?;
                out.push(u8::from_str_radix(hex, 16).map_err(|_| ())?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| ())
}

/// A numeric query parameter within `1..=max` (default when absent).
pub(crate) fn number(
    route: &str,
    query: &BTreeMap<String, String>,
    field: &str,
    default: u64,
    min: u64,
    max: u64,
) -> Result<u64, ApiError> {
    match query.get(field) {
        None => Ok(default),
        Some(v) => v
            .parse::<u64>()
            .ok()
            .filter(|n| (min..=max).contains(n))
            .ok_or_else(|| {
                ApiError::bad_field(route, field, format!("an integer from {min} to {max}"))
            }),
    }
}
