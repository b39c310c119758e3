//! Seconds as users write them (`30`, `0.5`, `inf`) in flags and environment variables, parsed once
//! for every tool. `f64` seconds cannot go straight into [`Duration::from_secs_f64`]: it panics on
//! NaN, negatives and values beyond `Duration::MAX`, and a huge finite duration still overflows
//! `Instant + Duration` later. Each parser here yields a value that is safe for deadline arithmetic.

use std::time::Duration;

/// The longest finite time accepted: a century. Anything longer is a typo or means "never" (`inf`),
/// and a century still fits `Instant` arithmetic.
pub const MAX_SECONDS: u64 = 100 * 365 * 24 * 3600;

/// How long to wait before acting: a bounded time, or never (`inf`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    Never,
    After(Duration),
}

impl Wait {
    /// The wait as a [`Duration`] for deadline arithmetic: `Never` becomes [`MAX_SECONDS`], which no
    /// run outlives and which an `Instant` can still be moved by without overflow.
    pub fn as_duration(self) -> Duration {
        match self {
            Wait::Never => Duration::from_secs(MAX_SECONDS),
            Wait::After(d) => d,
        }
    }
}

/// Why a text is not an acceptable number of seconds.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DurationError {
    #[error("`{0}` is not a number of seconds (e.g. 30 or 0.5)")]
    NotANumber(String),
    #[error("`{0}` is not a number of seconds")]
    NaN(String),
    #[error("`{0}` is negative; a time must be 0 or more seconds")]
    Negative(String),
    #[error("`{0}` must be more than 0 seconds")]
    Zero(String),
    #[error("`{0}` must be a finite number of seconds")]
    Infinite(String),
    #[error("`{0}` is too long: at most {MAX_SECONDS} seconds, or `inf` to wait forever")]
    TooLongOrInf(String),
    #[error("`{0}` is too long: at most {MAX_SECONDS} seconds")]
    TooLong(String),
}

/// The text as seconds: `None` for `inf` (any spelling Rust's `f64` parser takes), else a finite,
/// non-negative number no larger than [`MAX_SECONDS`].
fn seconds(text: &str, never_allowed: bool) -> Result<Option<Duration>, DurationError> {
    let raw = text.trim();
    let owned = || raw.to_string();
    let s: f64 = raw
        .parse()
        .map_err(|_| DurationError::NotANumber(owned()))?;
    if s.is_nan() {
        return Err(DurationError::NaN(owned()));
    }
    if s < 0.0 {
        return Err(DurationError::Negative(owned()));
    }
    if s.is_infinite() {
        return if never_allowed {
            Ok(None)
        } else {
            Err(DurationError::Infinite(owned()))
        };
    }
    if s > MAX_SECONDS as f64 {
        return Err(if never_allowed {
            DurationError::TooLongOrInf(owned())
        } else {
            DurationError::TooLong(owned())
        });
    }
    Ok(Some(Duration::from_secs_f64(s)))
}

/// A wait that may be forever: `inf` is [`Wait::Never`]; 0 is allowed (act at once).
/// `--grace_period`, `ACCEL_LAUNCH_GRACE`.
pub fn parse_wait(text: &str) -> Result<Wait, DurationError> {
    Ok(match seconds(text, true)? {
        None => Wait::Never,
        Some(d) => Wait::After(d),
    })
}

/// A finite period, 0 allowed: `--monitor_interval` (`inf` would mean never looking at the ranks).
pub fn parse_interval(text: &str) -> Result<Duration, DurationError> {
    seconds(text, false).map(|d| d.unwrap_or_default())
}

/// A finite bound on a wait, more than 0: accel-test's `--timeout`, whose point is that every wait
/// ends.
pub fn parse_timeout(text: &str) -> Result<Duration, DurationError> {
    let d = seconds(text, false)?.unwrap_or_default();
    if d.is_zero() {
        return Err(DurationError::Zero(text.trim().to_string()));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits() {
        assert_eq!(parse_wait("30"), Ok(Wait::After(Duration::from_secs(30))));
        assert_eq!(
            parse_wait(" 0.5 "),
            Ok(Wait::After(Duration::from_millis(500)))
        );
        assert_eq!(parse_wait("0"), Ok(Wait::After(Duration::ZERO)));
        for never in ["inf", "Inf", "infinity", "+inf"] {
            assert_eq!(parse_wait(never), Ok(Wait::Never), "{never}");
        }
        assert!(matches!(
            parse_wait("1e100"),
            Err(DurationError::TooLongOrInf(_))
        ));
        assert!(matches!(parse_wait("-1"), Err(DurationError::Negative(_))));
        assert!(matches!(
            parse_wait("-inf"),
            Err(DurationError::Negative(_))
        ));
        assert!(matches!(parse_wait("nan"), Err(DurationError::NaN(_))));
        assert!(matches!(
            parse_wait("abc"),
            Err(DurationError::NotANumber(_))
        ));
        assert!(matches!(parse_wait(""), Err(DurationError::NotANumber(_))));
        assert_eq!(Wait::Never.as_duration(), Duration::from_secs(MAX_SECONDS));
        // The longest accepted wait still moves an Instant without overflow.
        let _ = std::time::Instant::now() + parse_wait("inf").unwrap().as_duration();
        let max = MAX_SECONDS.to_string();
        let _ = std::time::Instant::now() + parse_wait(&max).unwrap().as_duration();
    }

    #[test]
    fn intervals_and_timeouts() {
        assert_eq!(parse_interval("0.1"), Ok(Duration::from_millis(100)));
        assert_eq!(parse_interval("0"), Ok(Duration::ZERO));
        assert!(matches!(
            parse_interval("inf"),
            Err(DurationError::Infinite(_))
        ));
        assert!(matches!(parse_interval("nan"), Err(DurationError::NaN(_))));
        assert!(matches!(
            parse_interval("1e100"),
            Err(DurationError::TooLong(_))
        ));
        assert_eq!(parse_timeout("60"), Ok(Duration::from_secs(60)));
        assert!(matches!(parse_timeout("0"), Err(DurationError::Zero(_))));
        assert!(matches!(
            parse_timeout("1e30"),
            Err(DurationError::TooLong(_))
        ));
        assert!(matches!(
            parse_timeout("inf"),
            Err(DurationError::Infinite(_))
        ));
        assert!(matches!(
            parse_timeout("-5"),
            Err(DurationError::Negative(_))
        ));
    }
}
