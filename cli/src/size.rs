//! Memory sizes on the command line: parsing `SIZE` arguments (`4G`, `512M`,
//! `1T`, `65536`, `2GiB`) into bytes and printing byte counts for people.
//!
//! Owns nothing but these two pure functions; every caller that takes a size
//! from the user goes through [`parse_size`] so the accepted syntax and the
//! error messages are the same everywhere.

use std::fmt;

/// Why a `SIZE` argument was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SizeError {
    /// Nothing (or only blanks) was given.
    Empty,
    /// The text does not start with a decimal number.
    NotANumber(String),
    /// The suffix after the number is not a known unit.
    BadUnit(String),
    /// The size is zero.
    Zero,
    /// The size does not fit in 64 bits.
    Overflow(String),
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SYNTAX: &str = "expected a number of bytes with an optional unit K, M, G, T or P \
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

/// Parses a size in bytes: a decimal integer and an optional binary unit.
///
/// Units are case-insensitive: `K`, `M`, `G`, `T`, `P` (and `E`), each
/// optionally followed by `iB` or `B`, all meaning powers of 1024; a bare `B`
/// or no unit means bytes. Underscores between digits are allowed
/// (`1_048_576`). Zero and sizes of 2^64 bytes or more are errors.
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
    if value == 0 {
        return Err(SizeError::Zero);
    }
    value.checked_mul(1u64 << shift).ok_or_else(|| SizeError::Overflow(s.to_string()))
}

/// `bytes` in the largest binary unit that divides it exactly, e.g.
/// `4 GiB`, `1536 MiB`, `4095 B`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut value = bytes;
    let mut unit = 0;
    while value != 0 && value.trailing_zeros() >= 10 && unit + 1 < UNITS.len() {
        value /= 1024;
        unit += 1;
    }
    format!("{value} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_suffixed_sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("1_048_576"), Ok(1 << 20));
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("3gb"), Ok(3 << 30));
        assert_eq!(parse_size(" 8M "), Ok(8 << 20));
        assert_eq!(parse_size("100B"), Ok(100));
        assert_eq!(parse_size("1P"), Ok(1 << 50));
        assert_eq!(parse_size("15E"), Ok(15 << 60));
    }

    #[test]
    fn rejects_garbage() {
        assert_eq!(parse_size(""), Err(SizeError::Empty));
        assert_eq!(parse_size("   "), Err(SizeError::Empty));
        assert!(matches!(parse_size("banana"), Err(SizeError::NotANumber(_))));
        assert!(matches!(parse_size("G"), Err(SizeError::NotANumber(_))));
        assert!(matches!(parse_size("-4G"), Err(SizeError::NotANumber(_))));
        assert!(matches!(parse_size("_4G"), Err(SizeError::NotANumber(_))));
        assert!(matches!(parse_size("4X"), Err(SizeError::BadUnit(_))));
        assert!(matches!(parse_size("4 G"), Err(SizeError::BadUnit(_))));
        assert!(matches!(parse_size("1.5G"), Err(SizeError::BadUnit(_))));
        assert!(matches!(parse_size("4GG"), Err(SizeError::BadUnit(_))));
        assert_eq!(parse_size("0"), Err(SizeError::Zero));
        assert_eq!(parse_size("0G"), Err(SizeError::Zero));
    }

    #[test]
    fn overflow_is_an_error_not_a_panic() {
        assert!(matches!(parse_size("99999999999999T"), Err(SizeError::Overflow(_))));
        assert!(matches!(parse_size("16E"), Err(SizeError::Overflow(_))));
        assert!(matches!(parse_size("18446744073709551616"), Err(SizeError::Overflow(_))));
        assert!(matches!(parse_size("99999999999999999999999999999"), Err(SizeError::Overflow(_))));
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
    }

    #[test]
    fn errors_read_well() {
        let msg = parse_size("banana").unwrap_err().to_string();
        assert!(msg.contains("`banana` is not a size"), "{msg}");
        assert!(msg.contains("4G"), "{msg}");
    }

    #[test]
    fn formats_exact_units() {
        assert_eq!(format_size(4 << 30), "4 GiB");
        assert_eq!(format_size(1536 << 20), "1536 MiB");
        assert_eq!(format_size(4095), "4095 B");
        assert_eq!(format_size(0), "0 B");
        assert_eq!(format_size(1 << 40), "1 TiB");
    }
}
