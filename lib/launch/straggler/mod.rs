//! Stragglers named while the run goes on, for `--straggler_threshold`: every rank's main thread is
//! [`sample`]d with py-spy over each half of a `--straggler_window` (all ranks of a node over the
//! same seconds), and every half window the [`score`] says, over the last whole window, which rank
//! waits in the collectives far less than the others (the one they all wait for). NCCL ranks, whose
//! host stacks look alike, are judged by their collectives' durations on the device instead, from a
//! Flight Recorder dump per half window ([`nccl`], [`arrival`]). On many nodes each node's windows go
//! to node 0, which judges the world. Nothing is ever stopped.

pub mod arrival;
pub mod nccl;
pub mod sample;
pub mod score;

use std::time::Duration;

pub use sample::Sampler;
pub use score::{merge, Basis, Event, Finding, Judge, Place, RankWindow};

/// `--straggler_threshold` and `--straggler_window`, when the detection is on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// Percentage points below the median rank's wait share (0 to 100, above 0).
    pub threshold: f64,
    pub window: Duration,
}

/// The shortest window: fewer seconds hold too few samples to judge a rank by.
pub const MIN_WINDOW: Duration = Duration::from_secs(5);

/// Parses a threshold in percentage points: `20`, `20%`, `12.5` (0 to 100).
pub fn parse_threshold(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let t = t.strip_suffix('%').unwrap_or(t).trim();
    match t.parse::<f64>() {
        Ok(v) if (0.0..=100.0).contains(&v) => Ok(v),
        Ok(_) => Err(format!("`{text}` is not between 0 and 100")),
        Err(_) => Err(format!("`{text}` is not a percentage, e.g. 20")),
    }
}

/// Parses a window of whole or fractional seconds, at least [`MIN_WINDOW`].
pub fn parse_window(text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a number of seconds, e.g. 60"))?;
    if !secs.is_finite() || secs < MIN_WINDOW.as_secs_f64() || secs > 86_400.0 {
        return Err(format!(
            "`{text}`: the window is {} to 86400 seconds",
            MIN_WINDOW.as_secs()
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_and_windows() {
        assert_eq!(parse_threshold("20"), Ok(20.0));
        assert_eq!(parse_threshold(" 12.5% "), Ok(12.5));
        assert_eq!(parse_threshold("0"), Ok(0.0));
        assert!(parse_threshold("101").is_err());
        assert!(parse_threshold("-1").is_err());
        assert!(parse_threshold("x").is_err());
        assert_eq!(parse_window("60"), Ok(Duration::from_secs(60)));
        assert!(parse_window("1").is_err());
        assert!(parse_window("inf").is_err());
    }
}
