//! `[metrics]` and `[telemetry]` (issue 25; STATE-13, STATE-14, STATE-17): the Prometheus
//! scrape endpoint and the OpenTelemetry trace export with the daemon's memory self-watch.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::error::Problem;
use crate::schema::Config;

/// `[metrics]`: Prometheus metrics of the daemon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Count and serve metrics (`GET /metrics` on the gateway, bearer token). Off: the
    /// counters are not touched and `/metrics` answers 404.
    pub enabled: bool,
    /// Address of the separate token-less listener for scrapers (`port` turns it on).
    pub bind: String,
    /// Port of the separate listener serving only `GET /metrics` without a token; unset = no
    /// such listener.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            bind: "127.0.0.1".to_string(),
            port: None,
        }
    }
}

/// `[telemetry]`: OpenTelemetry traces (OTLP/HTTP protobuf) and the memory self-watch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Where spans go: an OTLP/HTTP collector (`http://127.0.0.1:4318`; `/v1/traces` is
    /// appended unless the URL already ends with it). Unset = no trace export.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp_endpoint: Option<String>,
    /// Put prompt, completion and tool argument/result text into the spans (redacted of
    /// secrets). Off by default: spans carry names, models, counts and timings only.
    pub capture_content: bool,
    /// `service.name` of the exported resource.
    pub service_name: String,
    /// How often finished spans are sent, in milliseconds (100..=60000).
    pub export_interval_ms: u64,
    /// How often the daemon records its resident memory, in seconds (1..=3600).
    pub rss_interval_secs: u64,
    /// Resident memory (MiB) past which the daemon warns once in its log and `/api/health`
    /// reports `degraded`; unset = no ceiling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_ceiling_mb: Option<u64>,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            capture_content: false,
            service_name: "warren".to_string(),
            export_interval_ms: 2000,
            rss_interval_secs: 60,
            rss_ceiling_mb: None,
        }
    }
}

impl TelemetryConfig {
    /// The URL spans are POSTed to (`<endpoint>/v1/traces`), when export is on.
    pub fn traces_url(&self) -> Option<String> {
        let endpoint = self.otlp_endpoint.as_deref()?.trim_end_matches('/');
        Some(if endpoint.ends_with("/v1/traces") {
            endpoint.to_string()
        } else {
            format!("{endpoint}/v1/traces")
        })
    }
}

/// The rules of both sections.
pub(crate) fn validate(config: &Config) -> Vec<Problem> {
    let mut out = Vec::new();
    let (metrics, telemetry) = (&config.metrics, &config.telemetry);
    if metrics.bind.parse::<IpAddr>().is_err() {
        out.push(
            Problem::at(
                "metrics.bind",
                format!("'{}' is not an IP address", metrics.bind),
            )
            .with_hint(Some("use 127.0.0.1 for local scrapers only".into())),
        );
    }
    if metrics.port == Some(0) {
        out.push(Problem::at(
            "metrics.port",
            "port 0 is not allowed; pick a fixed port or remove the key",
        ));
    }
    if metrics.port.is_some() && metrics.port == Some(config.gateway.port) {
        out.push(Problem::at(
            "metrics.port",
            "is the gateway's port; the metrics listener needs a port of its own",
        ));
    }
    if let Some(endpoint) = &telemetry.otlp_endpoint {
        let scheme_ok = endpoint.starts_with("http://") || endpoint.starts_with("https://");
        let host = endpoint.split("://").nth(1).unwrap_or_default();
        if !scheme_ok || host.is_empty() || host.starts_with('/') {
            out.push(
                Problem::at(
                    "telemetry.otlp_endpoint",
                    format!("'{endpoint}' is not an http:// or https:// URL"),
                )
                .with_hint(Some(
                    "an OTLP/HTTP collector, e.g. http://127.0.0.1:4318".into(),
                )),
            );
        }
    }
    if telemetry.service_name.trim().is_empty() {
        out.push(Problem::at("telemetry.service_name", "must not be empty"));
    }
    for (key, value, (min, max)) in [
        (
            "telemetry.export_interval_ms",
            telemetry.export_interval_ms,
            (100, 60_000),
        ),
        (
            "telemetry.rss_interval_secs",
            telemetry.rss_interval_secs,
            (1, 3600),
        ),
    ] {
        if !(min..=max).contains(&value) {
            out.push(Problem::at(key, format!("must be between {min} and {max}")));
        }
    }
    if telemetry.rss_ceiling_mb == Some(0) {
        out.push(Problem::at(
            "telemetry.rss_ceiling_mb",
            "must be at least 1 (MiB); remove the key for no ceiling",
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_url_appends_the_otlp_path_once() {
        let mut t = TelemetryConfig::default();
        assert_eq!(t.traces_url(), None);
        t.otlp_endpoint = Some("http://127.0.0.1:4318/".into());
        assert_eq!(
            t.traces_url().as_deref(),
            Some("http://127.0.0.1:4318/v1/traces")
        );
        t.otlp_endpoint = Some("https://otel.example/v1/traces".into());
        assert_eq!(
            t.traces_url().as_deref(),
            Some("https://otel.example/v1/traces")
        );
    }

    #[test]
    fn bad_values_name_their_key() {
        let mut config = Config::default();
        config.metrics.bind = "localhost".into();
        config.metrics.port = Some(config.gateway.port);
        config.telemetry.otlp_endpoint = Some("127.0.0.1:4318".into());
        config.telemetry.rss_ceiling_mb = Some(0);
        config.telemetry.export_interval_ms = 5;
        let keys: Vec<Option<String>> = validate(&config).into_iter().map(|p| p.key).collect();
        assert_eq!(
            keys,
            [
                "metrics.bind",
                "metrics.port",
                "telemetry.otlp_endpoint",
                "telemetry.export_interval_ms",
                "telemetry.rss_ceiling_mb"
            ]
            .map(|k| Some(k.to_string()))
        );
    }
}
