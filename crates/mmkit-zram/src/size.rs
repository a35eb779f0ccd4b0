//! Sizes in text: the one grammar every size of mmkit takes, on the
//! command line (`mmkit info --memory`, `mmkit zram serve --size`), in the
//! plugin's `key=value` parameters and in the attributes (`disksize 2G`,
//! `mem_limit 64M`): a decimal number, `_` between digits allowed, and an
//! optional binary unit right after it (`K`, `M`, `G`, `T`, `P`, `E`, each
//! optionally `iB` or `B`; case-insensitive; powers of 1024 as the
//! kernel's `memparse`). Blanks around the whole are ignored; a blank
//! between the number and its unit (`10 G`) is refused.
//!
//! Owns the grammar and its messages only; what a size may be (zero, at
//! least a page) is each caller's.

use core::fmt;

/// Why a size was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SizeError {
    /// Nothing (or only blanks) was given.
    Empty,
    /// The text does not start with a decimal number.
    NotANumber(String),
    /// The suffix after the number is not a known unit.
    BadUnit(String),
    /// The size is zero where zero means nothing (a caller's rule).
    Zero,
    /// The size does not fit in 64 bits.
    Overflow(String),
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SYNTAX: &str = "expected a number of bytes with an optional unit K, M, G, T or P right after it \
             (powers of 1024; `KiB`/`KB` spellings accepted), e.g. 4G or 512M";
        match self {
            SizeError::Empty => write!(f, "empty size; {SYNTAX}"),
            SizeError::NotANumber(s) => write!(f, "`{s}` is not a size; {SYNTAX}"),
            SizeError::BadUnit(u) => write!(f, "unknown unit `{u}`; {SYNTAX}"),
            SizeError::Zero => write!(f, "size must be greater than zero"),
            SizeError::Overflow(s) => write!(f, "`{s}` is too large (more than 2^64 bytes)"),
        }
    }
}

impl std::error::Error for SizeError {}

/// Parses a size in bytes by the module's grammar; zero is a size here.
///
/// ```
/// use mmkit_zram::parse_size;
/// assert_eq!(parse_size("64K"), Ok(64 << 10));
/// assert_eq!(parse_size(" 2GiB "), Ok(2 << 30));
/// assert_eq!(parse_size("0"), Ok(0));
/// assert!(parse_size("10 G").is_err());
/// ```
///
/// # Errors
/// [`SizeError`] saying what is wrong; never panics.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let s = text.trim();
    if s.is_empty() {
        return Err(SizeError::Empty);
    }
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '_')).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    if !digits.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(SizeError::NotANumber(s.to_string()));
    }
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        "p" | "pb" | "pib" => 50,
        "e" | "eb" | "eib" => 60,
        _ => return Err(SizeError::BadUnit(unit.to_string())),
    };
    let mut value: u64 = 0;
    for c in digits.chars().filter(|&c| c != '_') {
        let digit = u64::from(c as u8 - b'0');
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(digit))
            .ok_or_else(|| SizeError::Overflow(s.to_string()))?;
    }
    value.checked_mul(1u64 << shift).ok_or_else(|| SizeError::Overflow(s.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_suffixed_sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1_048_576"), Ok(1 << 20));
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("3gb"), Ok(3 << 30));
        assert_eq!(parse_size(" 8M "), Ok(8 << 20));
        assert_eq!(parse_size("100B"), Ok(100));
        assert_eq!(parse_size("15E"), Ok(15 << 60));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
    }

    #[test]
    fn rejects_garbage_without_panicking() {
        assert_eq!(parse_size(""), Err(SizeError::Empty));
        assert!(matches!(parse_size("banana"), Err(SizeError::NotANumber(_))));
        assert!(matches!(parse_size("-4G"), Err(SizeError::NotANumber(_))));
        assert!(matches!(parse_size("_4G"), Err(SizeError::NotANumber(_))));
        assert!(matches!(parse_size("4X"), Err(SizeError::BadUnit(_))));
        assert!(matches!(parse_size("4 G"), Err(SizeError::BadUnit(_))), "a blank before the unit");
        assert!(matches!(parse_size("1.5G"), Err(SizeError::BadUnit(_))));
        assert!(matches!(parse_size("16E"), Err(SizeError::Overflow(_))));
        assert!(matches!(parse_size("99999999999999999999999999999"), Err(SizeError::Overflow(_))));
        let msg = parse_size("banana").unwrap_err().to_string();
        assert!(msg.contains("`banana` is not a size") && msg.contains("4G"), "{msg}");
    }
}
