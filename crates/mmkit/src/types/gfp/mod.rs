//! GFP request flags, ALLOC internal flags, and the conversion between them.
//!
//! # What this module owns
//!
//! - [`Gfp`]: the flags a caller passes with a request ("get free pages"
//!   flags), with the bit values of the Linux 6.18 kernel whose traces mmkit
//!   replays, its composite masks (`GFP_KERNEL` and friends), and the same
//!   symbolic text format the kernel's tracepoints print, in both directions.
//! - [`AllocFlags`]: the allocator's internal per-attempt flags (`ALLOC_*` in
//!   Linux): which watermark to check, which reserves may be used, whether
//!   kswapd may be woken, whether fallbacks may fragment pageblocks.
//! - The pure conversions: [`gfp_zone`], [`gfp_migratetype`],
//!   [`gfp_to_alloc_flags`] (slow path), [`fast_path_alloc_flags`].
//! - The small enums those conversions produce: [`ZoneType`], [`MigrateType`],
//!   [`Watermark`].
//!
//! # What it must not touch
//!
//! Zones, free lists, watermark numbers and page descriptors live elsewhere.
//! Everything here is a pure function of its arguments: no state, no locks,
//! no allocation, no `unsafe`.
//!
//! # Conventions
//!
//! - Conversions are written as plain conditionals, one per rule, never by
//!   relying on a GFP bit and an ALLOC bit sharing a value (Linux's `mm/page_alloc: drop flag-conversion "optimisation"`: the
//!   kernel dropped that trick because it coupled two unrelated tables).
//! - Linux answers some invalid inputs with `BUG()` or a warning. Here every
//!   input gets an answer: [`gfp_zone`] returns a typed error, and
//!   [`gfp_migratetype`] documents what it does with the invalid combination.
//! - Unknown GFP bits are kept, not dropped: a trace may carry bits of a
//!   kernel configuration we do not model, and they must survive a round trip.
//!
//! # Layout
//!
//! This file: [`Gfp`], its names and text form. `convert.rs`: zone and
//! migrate types, [`AllocFlags`] and the conversions (re-exported here).
//! `tests.rs`: the tests, including an exhaustive check of
//! [`gfp_to_alloc_flags`] against an independently written rule table.

use core::fmt;
use core::str::FromStr;

/// Implements the flag-set helpers shared by [`Gfp`] and [`AllocFlags`].
macro_rules! flag_set_methods {
    ($t:ident) => {
        impl $t {
            /// The empty set.
            pub const EMPTY: $t = $t(0);

            /// Wraps raw bits. Unknown bits are kept as they are.
            #[inline]
            #[must_use]
            pub const fn from_bits(bits: u32) -> $t {
                $t(bits)
            }

            /// The raw bits.
            #[inline]
            #[must_use]
            pub const fn bits(self) -> u32 {
                self.0
            }

            /// Whether no bit is set.
            #[inline]
            #[must_use]
            pub const fn is_empty(self) -> bool {
                self.0 == 0
            }

            /// Whether every bit of `other` is set in `self` (true for an
            /// empty `other`).
            #[inline]
            #[must_use]
            pub const fn contains(self, other: $t) -> bool {
                self.0 & other.0 == other.0
            }

            /// Whether `self` and `other` share at least one bit.
            #[inline]
            #[must_use]
            pub const fn intersects(self, other: $t) -> bool {
                self.0 & other.0 != 0
            }

            /// Bits set in either.
            #[inline]
            #[must_use]
            pub const fn union(self, other: $t) -> $t {
                $t(self.0 | other.0)
            }

            /// Bits set in both.
            #[inline]
            #[must_use]
            pub const fn intersection(self, other: $t) -> $t {
                $t(self.0 & other.0)
            }

            /// Bits of `self` that are not in `other`.
            #[inline]
            #[must_use]
            pub const fn difference(self, other: $t) -> $t {
                $t(self.0 & !other.0)
            }
        }

        impl ::core::ops::BitOr for $t {
            type Output = $t;
            #[inline]
            fn bitor(self, rhs: $t) -> $t {
                self.union(rhs)
            }
        }

        impl ::core::ops::BitOrAssign for $t {
            #[inline]
            fn bitor_assign(&mut self, rhs: $t) {
                *self = self.union(rhs);
            }
        }

        impl ::core::ops::BitAnd for $t {
            type Output = $t;
            #[inline]
            fn bitand(self, rhs: $t) -> $t {
                self.intersection(rhs)
            }
        }

        impl ::core::ops::Not for $t {
            type Output = $t;
            #[inline]
            fn not(self) -> $t {
                $t(!self.0)
            }
        }
    };
}

mod convert;
#[cfg(test)]
mod tests;

pub use convert::{
    fast_path_alloc_flags, gfp_compaction_allowed, gfp_migratetype, gfp_pfmemalloc_allowed, gfp_to_alloc_flags,
    gfp_to_base_alloc_flags, gfp_zone, gfpflags_allow_blocking, AllocFlags, GfpZoneError, MigrateType, Watermark,
    ZoneType, MAX_NR_ZONES, MIGRATE_TYPES,
};

/// GFP request flags: how a caller wants memory allocated.
///
/// A `u32` newtype with Linux 6.18's bit values (x86-64, no KASAN hardware
/// tags, no lockdep, `CONFIG_SLAB_OBJ_EXT` on), the kernel the traces in
/// `shared/traces` come from. Bit `0x200` is unused on that kernel (it was
/// `__GFP_ATOMIC` before 6.3). Unknown bits are carried along untouched.
///
/// [`fmt::Display`] prints the kernel's tracepoint text
/// (`GFP_HIGHUSER_MOVABLE|__GFP_ZERO|__GFP_COMP`) and [`Gfp::parse`] reads it
/// back, or a hex number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gfp(u32);

flag_set_methods!(Gfp);

impl Gfp {
    /// Zone modifier: the request must be satisfied from `ZONE_DMA`.
    pub const DMA: Gfp = Gfp(0x1);
    /// Zone modifier: highmem allowed; on 64-bit it only matters with
    /// [`Gfp::MOVABLE`], where it selects `ZONE_MOVABLE`.
    pub const HIGHMEM: Gfp = Gfp(0x2);
    /// Zone modifier: the request must be satisfied from `ZONE_DMA32` or below.
    pub const DMA32: Gfp = Gfp(0x4);
    /// The page can be migrated or reclaimed: groups it as `MIGRATE_MOVABLE`.
    pub const MOVABLE: Gfp = Gfp(0x8);
    /// The page belongs to a reclaimable (shrinkable) cache: groups it as
    /// `MIGRATE_RECLAIMABLE`.
    pub const RECLAIMABLE: Gfp = Gfp(0x10);
    /// High priority: may use part of the min reserve.
    pub const HIGH: Gfp = Gfp(0x20);
    /// Reclaim may start physical I/O.
    pub const IO: Gfp = Gfp(0x40);
    /// Reclaim may call into filesystems.
    pub const FS: Gfp = Gfp(0x80);
    /// Return zeroed memory.
    pub const ZERO: Gfp = Gfp(0x100);
    /// The caller may sleep in direct reclaim or compaction.
    pub const DIRECT_RECLAIM: Gfp = Gfp(0x400);
    /// Wake kswapd when the low watermark is reached.
    pub const KSWAPD_RECLAIM: Gfp = Gfp(0x800);
    /// The page will be dirtied (page-cache write; spreads dirty pages).
    pub const WRITE: Gfp = Gfp(0x1000);
    /// Do not report an allocation failure.
    pub const NOWARN: Gfp = Gfp(0x2000);
    /// Retry while progress is made, but fail rather than OOM-kill.
    pub const RETRY_MAYFAIL: Gfp = Gfp(0x4000);
    /// Retry instead of failing, as long as
    /// [`Hooks::retry_nofail`](crate::Hooks::retry_nofail) allows. Linux
    /// retries forever, waiting on reclaim; the default hooks have nothing
    /// to wait for and fail after one extra pass with partial access to the
    /// reserves, so do not unwrap such an allocation without hooks that
    /// reclaim (docs/page-allocator.md).
    pub const NOFAIL: Gfp = Gfp(0x8000);
    /// Fail after one light round of reclaim.
    pub const NORETRY: Gfp = Gfp(0x10000);
    /// May use all reserves, ignoring watermarks (unless [`Gfp::NOMEMALLOC`]).
    pub const MEMALLOC: Gfp = Gfp(0x20000);
    /// Build a compound page (head + tails).
    pub const COMP: Gfp = Gfp(0x40000);
    /// Never use emergency reserves; wins over [`Gfp::MEMALLOC`].
    pub const NOMEMALLOC: Gfp = Gfp(0x80000);
    /// Enforce the cpuset's memory nodes strictly.
    pub const HARDWALL: Gfp = Gfp(0x100000);
    /// Allocate only on the requested node, no fallback.
    pub const THISNODE: Gfp = Gfp(0x200000);
    /// Charge the page to the memory cgroup.
    pub const ACCOUNT: Gfp = Gfp(0x400000);
    /// Zero memory tags together with the data (arm64 MTE).
    pub const ZEROTAGS: Gfp = Gfp(0x800000);
    /// Do not allocate slab object extensions (recursion guard).
    pub const NO_OBJ_EXT: Gfp = Gfp(0x1000000);

    /// Both reclaim bits: direct reclaim and waking kswapd.
    pub const RECLAIM: Gfp = Gfp(0x400 | 0x800);
    /// The zone modifier bits that [`gfp_zone`] reads.
    pub const ZONEMASK: Gfp = Gfp(0x1 | 0x2 | 0x4 | 0x8);
    /// The mobility bits that [`gfp_migratetype`] reads.
    pub const MOVABLE_MASK: Gfp = Gfp(0x8 | 0x10);
    /// Every bit named above; other bits are "unknown".
    pub const KNOWN: Gfp = Gfp(0x1ff_fdff);

    /// Ordinary kernel allocation: may sleep, reclaim, do I/O and FS calls.
    pub const KERNEL: Gfp = Gfp(Gfp::RECLAIM.0 | Gfp::IO.0 | Gfp::FS.0);
    /// [`Gfp::KERNEL`] charged to the memory cgroup.
    pub const KERNEL_ACCOUNT: Gfp = Gfp(Gfp::KERNEL.0 | Gfp::ACCOUNT.0);
    /// Cannot sleep, high priority: may dip into reserves.
    pub const ATOMIC: Gfp = Gfp(Gfp::HIGH.0 | Gfp::KSWAPD_RECLAIM.0);
    /// Cannot sleep, no reserves, no failure warning (6.18 includes NOWARN).
    pub const NOWAIT: Gfp = Gfp(Gfp::KSWAPD_RECLAIM.0 | Gfp::NOWARN.0);
    /// May reclaim but must not start I/O.
    pub const NOIO: Gfp = Gfp::RECLAIM;
    /// May reclaim and do I/O but must not call into filesystems.
    pub const NOFS: Gfp = Gfp(Gfp::RECLAIM.0 | Gfp::IO.0);
    /// User-space allocation, bound by the cpuset.
    pub const USER: Gfp = Gfp(Gfp::KERNEL.0 | Gfp::HARDWALL.0);
    /// [`Gfp::USER`] that may use highmem.
    pub const HIGHUSER: Gfp = Gfp(Gfp::USER.0 | Gfp::HIGHMEM.0);
    /// User pages that can be migrated (anonymous memory, page cache).
    pub const HIGHUSER_MOVABLE: Gfp = Gfp(Gfp::HIGHUSER.0 | Gfp::MOVABLE.0);
    /// Transparent huge page that must not reclaim or warn.
    pub const TRANSHUGE_LIGHT: Gfp =
        Gfp((Gfp::HIGHUSER_MOVABLE.0 | Gfp::COMP.0 | Gfp::NOMEMALLOC.0 | Gfp::NOWARN.0) & !Gfp::RECLAIM.0);
    /// [`Gfp::TRANSHUGE_LIGHT`] that may direct-reclaim.
    pub const TRANSHUGE: Gfp = Gfp(Gfp::TRANSHUGE_LIGHT.0 | Gfp::DIRECT_RECLAIM.0);

    /// Parses the kernel's text form, or a number.
    ///
    /// Accepts what `perf script` prints for `gfp_flags` and what
    /// [`fmt::Display`] writes: names joined by `|` (composites such as
    /// `GFP_KERNEL`, single bits such as `__GFP_ZERO`; `__GFP_DMA` and
    /// `__GFP_DMA32` are accepted besides the printed `GFP_DMA`, `GFP_DMA32`),
    /// hexadecimal terms with a `0x` prefix (`0x400cc0`, or the leftover
    /// `|0x4000000` the kernel prints for bits it has no name for), and the
    /// word `none` alone for the empty set. Spaces around terms are ignored.
    ///
    /// # Errors
    ///
    /// A [`GfpParseError`] saying what was wrong and where (byte offset in
    /// `s`). Never panics, whatever the input.
    pub fn parse(s: &str) -> Result<Gfp, GfpParseError> {
        let whole = s.trim();
        if whole.is_empty() {
            return Err(GfpParseError::new(GfpParseErrorKind::Empty, 0, s.len()));
        }
        if whole == "none" {
            return Ok(Gfp::EMPTY);
        }
        let mut acc = Gfp::EMPTY;
        let mut start = 0;
        for piece in s.split('|') {
            let lead = piece.len() - piece.trim_start().len();
            let term = piece.trim();
            let offset = start + lead;
            start += piece.len() + 1;
            if term.is_empty() {
                return Err(GfpParseError::new(GfpParseErrorKind::EmptyTerm, offset, 0));
            }
            acc |= parse_term(term).map_err(|kind| GfpParseError::new(kind, offset, term.len()))?;
        }
        Ok(acc)
    }
}

/// Parses one `|`-separated term: a hex number or a known name.
fn parse_term(term: &str) -> Result<Gfp, GfpParseErrorKind> {
    if let Some(digits) = term.strip_prefix("0x").or_else(|| term.strip_prefix("0X")) {
        // `from_str_radix` would accept a leading sign; only bare digits are valid.
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(GfpParseErrorKind::BadNumber);
        }
        return u32::from_str_radix(digits, 16).map(Gfp).map_err(|_| GfpParseErrorKind::NumberTooLarge);
    }
    if let Some(&(_, value)) = GFP_NAMES.iter().find(|(name, _)| *name == term) {
        return Ok(Gfp(value));
    }
    match term {
        "__GFP_DMA" => Ok(Gfp::DMA),
        "__GFP_DMA32" => Ok(Gfp::DMA32),
        _ => Err(GfpParseErrorKind::UnknownName),
    }
}

/// Names in the order the kernel's `show_gfp_flags` tries them: composites
/// with the most bits first, then single bits by value. Printing takes each
/// entry whose bits are all still unprinted, so order decides the text.
const GFP_NAMES: &[(&str, u32)] = &[
    ("GFP_TRANSHUGE", Gfp::TRANSHUGE.0),
    ("GFP_TRANSHUGE_LIGHT", Gfp::TRANSHUGE_LIGHT.0),
    ("GFP_HIGHUSER_MOVABLE", Gfp::HIGHUSER_MOVABLE.0),
    ("GFP_HIGHUSER", Gfp::HIGHUSER.0),
    ("GFP_USER", Gfp::USER.0),
    ("GFP_KERNEL_ACCOUNT", Gfp::KERNEL_ACCOUNT.0),
    ("GFP_KERNEL", Gfp::KERNEL.0),
    ("GFP_NOFS", Gfp::NOFS.0),
    ("GFP_ATOMIC", Gfp::ATOMIC.0),
    ("GFP_NOIO", Gfp::NOIO.0),
    ("GFP_NOWAIT", Gfp::NOWAIT.0),
    ("GFP_DMA", Gfp::DMA.0),
    ("GFP_DMA32", Gfp::DMA32.0),
    ("__GFP_RECLAIM", Gfp::RECLAIM.0),
    ("__GFP_HIGHMEM", Gfp::HIGHMEM.0),
    ("__GFP_MOVABLE", Gfp::MOVABLE.0),
    ("__GFP_RECLAIMABLE", Gfp::RECLAIMABLE.0),
    ("__GFP_HIGH", Gfp::HIGH.0),
    ("__GFP_IO", Gfp::IO.0),
    ("__GFP_FS", Gfp::FS.0),
    ("__GFP_ZERO", Gfp::ZERO.0),
    ("__GFP_DIRECT_RECLAIM", Gfp::DIRECT_RECLAIM.0),
    ("__GFP_KSWAPD_RECLAIM", Gfp::KSWAPD_RECLAIM.0),
    ("__GFP_WRITE", Gfp::WRITE.0),
    ("__GFP_NOWARN", Gfp::NOWARN.0),
    ("__GFP_RETRY_MAYFAIL", Gfp::RETRY_MAYFAIL.0),
    ("__GFP_NOFAIL", Gfp::NOFAIL.0),
    ("__GFP_NORETRY", Gfp::NORETRY.0),
    ("__GFP_MEMALLOC", Gfp::MEMALLOC.0),
    ("__GFP_COMP", Gfp::COMP.0),
    ("__GFP_NOMEMALLOC", Gfp::NOMEMALLOC.0),
    ("__GFP_HARDWALL", Gfp::HARDWALL.0),
    ("__GFP_THISNODE", Gfp::THISNODE.0),
    ("__GFP_ACCOUNT", Gfp::ACCOUNT.0),
    ("__GFP_ZEROTAGS", Gfp::ZEROTAGS.0),
    ("__GFP_NO_OBJ_EXT", Gfp::NO_OBJ_EXT.0),
];

/// Writes `bits` as `name|name|0xrest` from `names`, taking each entry whose
/// bits are all still left (and that has at least one bit), then any
/// remainder in hex; `empty` when there are no bits at all.
fn write_symbolic(f: &mut fmt::Formatter<'_>, bits: u32, names: &[(&str, u32)], empty: &str) -> fmt::Result {
    if bits == 0 {
        return f.write_str(empty);
    }
    let mut left = bits;
    let mut first = true;
    for &(name, mask) in names {
        if left == 0 {
            break;
        }
        if mask != 0 && left & mask == mask {
            if !first {
                f.write_str("|")?;
            }
            f.write_str(name)?;
            first = false;
            left &= !mask;
        }
    }
    if left != 0 {
        if !first {
            f.write_str("|")?;
        }
        write!(f, "{left:#x}")?;
    }
    Ok(())
}

impl fmt::Display for Gfp {
    /// The kernel's tracepoint text: composites first, then single bits,
    /// then unnamed bits in hex; `none` for no bits. [`Gfp::parse`] reads it
    /// back to the same value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_symbolic(f, self.0, GFP_NAMES, "none")
    }
}

impl fmt::Debug for Gfp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gfp({self})")
    }
}

impl FromStr for Gfp {
    type Err = GfpParseError;
    fn from_str(s: &str) -> Result<Gfp, GfpParseError> {
        Gfp::parse(s)
    }
}

/// What was wrong with a string given to [`Gfp::parse`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GfpParseErrorKind {
    /// The input was empty or only spaces.
    Empty,
    /// A `|` with nothing (or only spaces) on one side.
    EmptyTerm,
    /// A name that is not a GFP flag or composite of this kernel.
    UnknownName,
    /// `0x` followed by nothing or by something other than hex digits.
    BadNumber,
    /// A hex number that does not fit in 32 bits.
    NumberTooLarge,
}

/// Error from [`Gfp::parse`]: the kind of problem and the byte span of the
/// offending term in the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GfpParseError {
    kind: GfpParseErrorKind,
    offset: usize,
    len: usize,
}

impl GfpParseError {
    const fn new(kind: GfpParseErrorKind, offset: usize, len: usize) -> Self {
        GfpParseError { kind, offset, len }
    }

    /// What was wrong.
    #[must_use]
    pub const fn kind(&self) -> GfpParseErrorKind {
        self.kind
    }

    /// Byte offset of the offending term in the input.
    #[must_use]
    pub const fn offset(&self) -> usize {
        self.offset
    }

    /// Byte length of the offending term (0 for an empty term; the whole
    /// input for [`GfpParseErrorKind::Empty`]).
    #[must_use]
    pub const fn term_len(&self) -> usize {
        self.len
    }
}

impl fmt::Display for GfpParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            GfpParseErrorKind::Empty => return f.write_str("empty GFP flag string"),
            GfpParseErrorKind::EmptyTerm => "empty term between '|' separators",
            GfpParseErrorKind::UnknownName => "unknown GFP flag name",
            GfpParseErrorKind::BadNumber => "malformed hex number",
            GfpParseErrorKind::NumberTooLarge => "hex number does not fit in 32 bits",
        };
        write!(f, "{what} at byte {} (length {})", self.offset, self.len)
    }
}

#[cfg(feature = "std")]
impl std::error::Error for GfpParseError {}
