//! Memory sizes on the command line: parsing `SIZE` arguments (`4G`, `512M`,
//! `1T`, `65536`, `2GiB`) into bytes and printing byte counts for people.
//!
//! Owns nothing but these two pure functions; every option that takes a
//! size goes through [`parse_size`], whose grammar is the device's own
//! (`mmkit_zram::parse_size`, which `zram serve`'s device options and the
//! control socket's attributes use), so the accepted syntax and the error
//! messages are the same everywhere.

pub use mmkit_zram::SizeError;

/// Parses a size in bytes of at least one byte, by the one grammar every
/// size of mmkit takes (`mmkit_zram::parse_size`: a number and an optional
/// binary unit right after it, `4G`, `512M`, `1_048_576`, `2GiB`).
///
/// # Errors
/// [`SizeError`] saying what is wrong, [`SizeError::Zero`] for zero; never
/// panics.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    match mmkit_zram::parse_size(text)? {
        0 => Err(SizeError::Zero),
        bytes => Ok(bytes),
    }
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
