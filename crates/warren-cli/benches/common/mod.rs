//! What the footprint benches share: the targets of `bench/footprint-targets` (one file, read
//! by bench/footprint, bench/idle-rss and these benches; issue 26).

pub type E = Box<dyn std::error::Error>;

const TARGETS: &str = include_str!("../../../../bench/footprint-targets");

/// A `NAME=VALUE` of `bench/footprint-targets`.
pub fn target(name: &str) -> Result<f64, E> {
    TARGETS
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
        .ok_or_else(|| format!("bench/footprint-targets has no {name}"))?
        .trim()
        .parse()
        .map_err(|e| format!("bench/footprint-targets {name}: {e}").into())
}
