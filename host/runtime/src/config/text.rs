//! How config values are read: sizes, rates and durations written as text, and the
//! context ([`Ctx`]) every section's parser reports its mistakes through, as `file:line`.

use std::path::{Path, PathBuf};
use std::time::Duration;
use toml::Spanned;

/// A mistake in a config file, with where it is.
#[derive(Debug, thiserror::Error)]
#[error("{file}:{line}: {reason}")]
pub struct ConfigError {
    /// The file.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

/// The most characters of a config error's reason: values echoed in it are cut short.
pub(super) const MAX_REASON: usize = 240;

/// The longest deadline a config may give: a domain that spins holds its thread at most this
/// long, whatever the config says.
pub const MAX_DEADLINE: Duration = Duration::from_secs(3600);

/// Parses a size: `"123"`, `"4KiB"`, `"64MiB"`, `"1GiB"`.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = digits.parse().ok()?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(scale)
}

/// Parses a rate like `240B/s` or `1KiB/s` (a size per second; `0` alone is zero).
pub fn parse_rate(s: &str) -> Option<u64> {
    let s = s.trim();
    if s == "0" {
        return Some(0);
    }
    parse_size(s.strip_suffix("/s")?)
}

/// Parses a duration like `250ms`, `2s`, `1.5s`, `100us` or `1m`.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| c.is_ascii_alphabetic())?;
    let (n, unit) = s.split_at(split);
    let n: f64 = n.trim().parse().ok()?;
    if !n.is_finite() || n < 0.0 {
        return None;
    }
    let secs = match unit {
        "us" => n / 1e6,
        "ms" => n / 1e3,
        "s" => n,
        "m" => n * 60.0,
        _ => return None,
    };
    Duration::try_from_secs_f64(secs).ok()
}

pub(super) struct Ctx<'a> {
    pub(super) file: &'a str,
    pub(super) text: &'a str,
    pub(super) dir: &'a Path,
}

impl Ctx<'_> {
    pub(super) fn line(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    /// The error at `offset`; a reason that echoes a long value is cut short.
    pub(super) fn err_at(&self, offset: usize, reason: impl Into<String>) -> ConfigError {
        let reason = reason.into();
        ConfigError {
            file: self.file.to_string(),
            line: self.line(offset),
            reason: match reason.char_indices().nth(MAX_REASON) {
                Some((at, _)) => format!("{}…", &reason[..at]),
                None => reason,
            },
        }
    }

    pub(super) fn err<T>(&self, s: &Spanned<T>, reason: impl Into<String>) -> ConfigError {
        self.err_at(s.span().start, reason)
    }

    /// A deadline: a duration above zero and at most [`MAX_DEADLINE`].
    pub(super) fn duration(&self, s: &Spanned<String>) -> Result<Duration, ConfigError> {
        let d = parse_duration(s.get_ref()).ok_or_else(|| {
            self.err(
                s,
                format!("`{}` is not a duration (like `250ms`, `2s`)", s.get_ref()),
            )
        })?;
        if d.is_zero() || d > MAX_DEADLINE {
            return Err(self.err(
                s,
                format!(
                    "`{}`: a deadline is above zero and at most {}s",
                    s.get_ref(),
                    MAX_DEADLINE.as_secs()
                ),
            ));
        }
        Ok(d)
    }

    pub(super) fn path(&self, s: &Spanned<String>) -> PathBuf {
        self.dir.join(s.get_ref())
    }

    pub(super) fn existing(&self, s: &Spanned<String>, what: &str) -> Result<PathBuf, ConfigError> {
        let p = self.path(s);
        if p.is_file() {
            Ok(p)
        } else {
            Err(self.err(s, format!("{what} `{}` not found", p.display())))
        }
    }

    /// A size in bytes: an integer, or a string like `"64MiB"` (`KiB`, `MiB`, `GiB`).
    pub(super) fn size(&self, v: &Spanned<toml::Value>, what: &str) -> Result<u64, ConfigError> {
        let parsed = match v.get_ref() {
            toml::Value::Integer(n) => u64::try_from(*n).ok(),
            toml::Value::String(t) => parse_size(t),
            _ => None,
        };
        parsed.filter(|&n| n > 0).ok_or_else(|| {
            self.err(
                v,
                format!("{what} is a positive size: bytes, or a string like \"64MiB\""),
            )
        })
    }

    /// A linear memory's cap: a size of at most 4 GiB, all a 32-bit memory can address.
    pub(super) fn memory(&self, v: &Spanned<toml::Value>) -> Result<u64, ConfigError> {
        const MAX: u64 = 4 << 30;
        let n = self.size(v, "memory")?;
        if n > MAX {
            return Err(self.err(
                v,
                format!(
                    "memory is at most 4GiB (all a 32-bit linear memory can address), not {n} bytes"
                ),
            ));
        }
        Ok(n)
    }

    pub(super) fn count(
        &self,
        s: &Spanned<i64>,
        what: &str,
        max: i64,
    ) -> Result<usize, ConfigError> {
        let n = *s.get_ref();
        if (1..=max).contains(&n) {
            Ok(n as usize)
        } else {
            Err(self.err(s, format!("{what} must be between 1 and {max}, not {n}")))
        }
    }
}
