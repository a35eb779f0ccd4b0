//! Why a quicklist call failed.

use mmkit::{AllocError, FreeError, PageFlags, Pfn};

/// Why a quicklist call failed. Apart from `WrongState` (reported as a bad
/// page) nothing was changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuicklistError {
    /// Quicklists need a map with real memory behind it.
    NoRealMemory,
    /// The map has no owner tag left for another set of quicklists
    /// ([`Blocks::new_owner_key`](mmkit::Blocks::new_owner_key)).
    NoOwnerTag,
    /// [`Quicklists::new`](super::Quicklists::new) of more lists per CPU
    /// than [`MAX_NR_QUICK`](super::MAX_NR_QUICK).
    TooManyLists {
        /// Lists asked for.
        nr_quick: usize,
        /// The most accepted.
        max: usize,
    },
    /// `nr >= nr_quick`.
    NoSuchList {
        /// The list asked for.
        nr: usize,
        /// Lists per CPU.
        nr_quick: usize,
    },
    /// `cpu >= nr_cpus`.
    NoSuchCpu(usize),
    /// Another [`QuicklistCpu`](super::QuicklistCpu) holds that CPU's lists.
    AlreadyPinned(usize),
    /// The list was empty and the page allocator could not supply a page.
    Alloc(AllocError),
    /// The page cannot be given back: out of range, free, a tail, not
    /// order 0, already cached ([`FreeError::DoubleFree`]), or still
    /// referenced elsewhere ([`FreeError::RefcountMismatch`]).
    Free(FreeError),
    /// The page still carries embedder flags (LRU, mapped, …).
    FlagsSet {
        /// The page.
        pfn: Pfn,
        /// The flags left set.
        flags: PageFlags,
    },
    /// The page is held out by a pinned [`QuicklistCpu`](super::QuicklistCpu)
    /// (only that handle takes it back, until it hands the page over) or
    /// cached on a pinned CPU's list.
    PinnedCpu(Pfn),
    /// [`QuicklistCpu::hand_over`](super::QuicklistCpu::hand_over) of a
    /// page that handle does not hold out.
    NotHeld(Pfn),
    /// The page was not in the list's state (checked in every build). It was reported
    /// as a bad page and returned to the page allocator instead of cached.
    WrongState {
        /// The page.
        pfn: Pfn,
        /// First byte that differs from the list's state.
        offset: usize,
    },
}

impl core::fmt::Display for QuicklistError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NoRealMemory => f.write_str("quicklists need a memory map with real backing"),
            Self::TooManyLists { nr_quick, max } => write!(f, "{nr_quick} quicklists per cpu; at most {max}"),
            Self::NoOwnerTag => f.write_str("the memory map has no owner tag left for these quicklists"),
            Self::NoSuchList { nr, nr_quick } => write!(f, "no quicklist {nr} (there are {nr_quick} per cpu)"),
            Self::NoSuchCpu(cpu) => write!(f, "no cpu {cpu}"),
            Self::AlreadyPinned(cpu) => write!(f, "the quicklists of cpu {cpu} are pinned by another handle"),
            Self::Alloc(e) => write!(f, "quicklist refill failed: {e}"),
            Self::Free(e) => write!(f, "{e}"),
            Self::FlagsSet { pfn, flags } => write!(f, "pfn {pfn} still has flags {flags:?}"),
            Self::PinnedCpu(pfn) => write!(f, "pfn {pfn} belongs to a pinned cpu's quicklists; free it there"),
            Self::NotHeld(pfn) => write!(f, "pfn {pfn} is not held out by this quicklist handle"),
            Self::WrongState { pfn, offset } => {
                write!(f, "pfn {pfn} is not in the quicklist's state (byte {offset} differs)")
            }
        }
    }
}

impl std::error::Error for QuicklistError {}
