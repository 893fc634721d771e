//! UTC timestamps as stored text: RFC 3339 with microseconds and `Z`, fixed width, so text order
//! is time order (the reference implementation mixed local offsets with `Z`).

use time::format_description::well_known::Rfc3339;
use time::macros::format_description;
use time::{OffsetDateTime, UtcOffset};

const STORED: &[time::format_description::BorrowedFormatItem<'static>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z");

/// The current time in UTC.
pub fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

/// Formats `t` (any offset) as stored UTC text.
pub fn format(t: OffsetDateTime) -> String {
    t.to_offset(UtcOffset::UTC)
        .format(STORED)
        .unwrap_or_else(|_| "1970-01-01T00:00:00.000000Z".to_string())
}

/// Parses any RFC 3339 text into UTC.
pub fn parse(text: &str) -> Option<OffsetDateTime> {
    OffsetDateTime::parse(text, &Rfc3339)
        .ok()
        .map(|t| t.to_offset(UtcOffset::UTC))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_text_is_utc_and_round_trips() {
        let t = parse("2026-03-01T10:00:00.5+02:00");
        assert_eq!(
            t.map(format).as_deref(),
            Some("2026-03-01T08:00:00.500000Z")
        );
        assert_eq!(parse("2026-03-01T08:00:00.500000Z"), t);
        assert_eq!(parse("yesterday"), None);
    }
}
