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
    fn the_devices_grammar_with_zero_refused() {
        // The grammar is `mmkit_zram::parse_size`'s, tested there.
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("0"), Err(SizeError::Zero));
        assert_eq!(parse_size("0G"), Err(SizeError::Zero));
        assert!(matches!(parse_size("4 G"), Err(SizeError::BadUnit(_))));
        assert!(parse_size("banana").unwrap_err().to_string().contains("`banana` is not a size"));
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
