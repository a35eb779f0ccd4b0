//! Tests for the GFP module. Each test says what it proves; expected values
//! are written as literals taken from the trace kernel (Linux 6.18), not
//! computed from the constants under test.

extern crate std;

use std::string::{String, ToString};
use std::vec::Vec;

use proptest::prelude::*;

use super::*;

// ---------------------------------------------------------------------------
// Bit values and composites
// ---------------------------------------------------------------------------

/// Every single-bit constant has the trace kernel's value (traces/README.md).
#[test]
fn bit_values_match_trace_kernel() {
    let table: [(Gfp, u32); 24] = [
        (Gfp::DMA, 0x1),
        (Gfp::HIGHMEM, 0x2),
        (Gfp::DMA32, 0x4),
        (Gfp::MOVABLE, 0x8),
        (Gfp::RECLAIMABLE, 0x10),
        (Gfp::HIGH, 0x20),
        (Gfp::IO, 0x40),
        (Gfp::FS, 0x80),
        (Gfp::ZERO, 0x100),
        (Gfp::DIRECT_RECLAIM, 0x400),
        (Gfp::KSWAPD_RECLAIM, 0x800),
        (Gfp::WRITE, 0x1000),
        (Gfp::NOWARN, 0x2000),
        (Gfp::RETRY_MAYFAIL, 0x4000),
        (Gfp::NOFAIL, 0x8000),
        (Gfp::NORETRY, 0x10000),
        (Gfp::MEMALLOC, 0x20000),
        (Gfp::COMP, 0x40000),
        (Gfp::NOMEMALLOC, 0x80000),
        (Gfp::HARDWALL, 0x100000),
        (Gfp::THISNODE, 0x200000),
        (Gfp::ACCOUNT, 0x400000),
        (Gfp::ZEROTAGS, 0x800000),
        (Gfp::NO_OBJ_EXT, 0x1000000),
    ];
    let mut all = 0;
    for (flag, value) in table {
        assert_eq!(flag.bits(), value, "{flag:?}");
        assert_eq!(all & value, 0, "bit {value:#x} listed twice");
        all |= value;
    }
    assert_eq!(Gfp::KNOWN.bits(), all);
    assert_eq!(Gfp::RECLAIM.bits(), 0xc00);
}

/// Composite masks as the trace kernel defines them (6.18: NOWAIT has NOWARN).
#[test]
fn composite_values() {
    let table: [(Gfp, u32); 11] = [
        (Gfp::KERNEL, 0xcc0),
        (Gfp::KERNEL_ACCOUNT, 0x400cc0),
        (Gfp::NOFS, 0xc40),
        (Gfp::NOIO, 0xc00),
        (Gfp::NOWAIT, 0x2800),
        (Gfp::ATOMIC, 0x820),
        (Gfp::USER, 0x100cc0),
        (Gfp::HIGHUSER, 0x100cc2),
        (Gfp::HIGHUSER_MOVABLE, 0x100cca),
        (Gfp::TRANSHUGE_LIGHT, 0x1c20ca),
        (Gfp::TRANSHUGE, 0x1c24ca),
    ];
    for (flag, value) in table {
        assert_eq!(flag.bits(), value, "{flag}");
    }
}

/// The set helpers behave as sets, and unknown bits survive.
#[test]
fn set_helpers() {
    let g = Gfp::KERNEL | Gfp::ZERO;
    assert!(g.contains(Gfp::KERNEL) && g.contains(Gfp::EMPTY));
    assert!(!g.contains(Gfp::KERNEL_ACCOUNT));
    assert!(g.intersects(Gfp::ACCOUNT | Gfp::ZERO));
    assert!(!g.intersects(Gfp::ACCOUNT));
    assert_eq!(g.difference(Gfp::ZERO), Gfp::KERNEL);
    assert_eq!(g & Gfp::RECLAIM, Gfp::RECLAIM);
    assert_eq!((!Gfp::EMPTY).bits(), u32::MAX);
    let mut h = Gfp::default();
    assert!(h.is_empty());
    h |= Gfp::from_bits(0x8000_0000);
    assert_eq!(h.bits(), 0x8000_0000);
    assert!(!Gfp::KNOWN.intersects(h));
}

// ---------------------------------------------------------------------------
// gfp_to_alloc_flags: exhaustive against a rule table
// ---------------------------------------------------------------------------

/// The request as the reference sees it: one bool per relevant GFP bit.
struct Req {
    high: bool,
    kswapd: bool,
    direct: bool,
    nomemalloc: bool,
    memalloc: bool,
    movable: bool,
    reclaimable: bool,
    order: u32,
}

/// The GFP bits the exhaustive tests enumerate, as literals, in the order of
/// the bits of the enumeration counter.
const RELEVANT: [u32; 7] = [0x20, 0x800, 0x400, 0x80000, 0x20000, 0x8, 0x10];

fn req_of(combo: u32, order: u32) -> Req {
    let bit = |i: usize| combo & (1 << i) != 0;
    Req {
        high: bit(0),
        kswapd: bit(1),
        direct: bit(2),
        nomemalloc: bit(3),
        memalloc: bit(4),
        movable: bit(5),
        reclaimable: bit(6),
        order,
    }
}

fn gfp_of(combo: u32) -> u32 {
    (0..RELEVANT.len()).filter(|&i| combo & (1 << i) != 0).fold(0, |acc, i| acc | RELEVANT[i])
}

/// Reference model, written per output bit instead of as a sequence of
/// updates: for each ALLOC bit (raw literal value), the condition under which
/// Linux ends up with it set. `with_reserves` selects the flag set after the
/// `__GFP_MEMALLOC` override (`gfp_to_alloc_flags`) or before it
/// (`gfp_to_base_alloc_flags`).
fn reference(r: &Req, with_reserves: bool) -> u32 {
    let reserve = with_reserves && r.memalloc && !r.nomemalloc;
    let atomic_context = !r.direct;
    let rules: [(u32, bool); 11] = [
        // Watermark field: always MIN (0) in the slow path, so bits 0..1 stay clear.
        (0x1, false),
        (0x2, false),
        (0x4, reserve),
        (0x8, false),
        (0x10, !reserve && atomic_context && !r.nomemalloc),
        (0x20, !reserve && r.high),
        // CPUSET is given up only by a high-priority caller that cannot block.
        (0x40, !reserve && (r.direct || !r.high)),
        (0x80, r.movable && !r.reclaimable),
        (0x100, false),
        (0x200, !reserve && atomic_context && !r.nomemalloc && r.high && r.order >= 1),
        (0x800, r.kswapd),
    ];
    rules.iter().filter(|(_, on)| *on).fold(0, |acc, (bit, _)| acc | bit)
}

/// Every combination of the seven relevant bits at orders 0..=10, with and
/// without unrelated bits mixed in, matches the reference for both the base
/// and the reserve-adjusted conversion.
#[test]
fn gfp_to_alloc_flags_exhaustive() {
    // Bits that must not influence the result.
    let noise = [0, 0x40 | 0x80 | 0x100 | 0x40000 | 0x100000 | 0x2000 | 0x1000000];
    for combo in 0..(1u32 << RELEVANT.len()) {
        for order in 0..=10 {
            for extra in noise {
                let gfp = Gfp::from_bits(gfp_of(combo) | extra);
                let r = req_of(combo, order);
                assert_eq!(
                    gfp_to_alloc_flags(gfp, order),
                    AllocFlags::from_bits(reference(&r, true)),
                    "gfp_to_alloc_flags({gfp}, {order})"
                );
                assert_eq!(
                    gfp_to_base_alloc_flags(gfp, order),
                    AllocFlags::from_bits(reference(&r, false)),
                    "gfp_to_base_alloc_flags({gfp}, {order})"
                );
            }
        }
    }
}

/// Hand-checked cases from the brief and from reading Linux.
#[test]
fn gfp_to_alloc_flags_spot_checks() {
    use AllocFlags as A;
    assert_eq!(gfp_to_alloc_flags(Gfp::KERNEL, 0), A::WMARK_MIN | A::CPUSET | A::KSWAPD);
    let atomic = A::WMARK_MIN | A::MIN_RESERVE | A::KSWAPD | A::NON_BLOCK;
    assert_eq!(gfp_to_alloc_flags(Gfp::ATOMIC, 0), atomic);
    assert_eq!(gfp_to_alloc_flags(Gfp::ATOMIC, 3), atomic | A::HIGHATOMIC);
    // GFP_NOWAIT: non-blocking but no __GFP_HIGH: no reserve, no highatomic, keeps cpuset.
    let nowait = A::WMARK_MIN | A::CPUSET | A::KSWAPD | A::NON_BLOCK;
    assert_eq!(gfp_to_alloc_flags(Gfp::NOWAIT, 0), nowait);
    assert_eq!(gfp_to_alloc_flags(Gfp::NOWAIT, 3), nowait);
    assert_eq!(gfp_to_alloc_flags(Gfp::NOWAIT | Gfp::NOMEMALLOC, 0), A::CPUSET | A::KSWAPD);
    assert_eq!(gfp_to_alloc_flags(Gfp::HIGHUSER_MOVABLE, 0), A::CPUSET | A::KSWAPD | A::CMA);
    // __GFP_MEMALLOC replaces everything but KSWAPD (and CMA if movable).
    let memalloc = Gfp::KERNEL | Gfp::MEMALLOC;
    assert_eq!(gfp_to_alloc_flags(memalloc, 0), A::NO_WATERMARKS | A::KSWAPD);
    assert_eq!(gfp_to_base_alloc_flags(memalloc, 0), A::CPUSET | A::KSWAPD);
    let movable_memalloc = Gfp::HIGHUSER_MOVABLE | Gfp::MEMALLOC;
    assert_eq!(gfp_to_alloc_flags(movable_memalloc, 2), A::NO_WATERMARKS | A::KSWAPD | A::CMA);
    assert_eq!(gfp_to_alloc_flags(memalloc | Gfp::NOMEMALLOC, 0), A::CPUSET | A::KSWAPD);
    // THP light: cannot block, NOMEMALLOC, no kswapd.
    assert_eq!(gfp_to_alloc_flags(Gfp::TRANSHUGE_LIGHT, 9), A::CPUSET | A::CMA);
    assert!(gfp_to_alloc_flags(Gfp::ATOMIC, 0).intersects(A::RESERVES));
    assert!(!gfp_to_alloc_flags(Gfp::KERNEL, 5).intersects(A::RESERVES));
}

/// The fast path over every combination of the bits it reads.
#[test]
fn fast_path_flags() {
    for combo in 0..16u32 {
        let kswapd = combo & 1 != 0;
        let movable = combo & 2 != 0;
        let reclaimable = combo & 4 != 0;
        let nofrag = combo & 8 != 0;
        let mut gfp = Gfp::IO | Gfp::FS | Gfp::DIRECT_RECLAIM | Gfp::HIGH;
        let mut want = 0x1;
        if kswapd {
            gfp |= Gfp::from_bits(0x800);
            want |= 0x800;
        }
        if movable {
            gfp |= Gfp::from_bits(0x8);
        }
        if reclaimable {
            gfp |= Gfp::from_bits(0x10);
        }
        if movable && !reclaimable {
            want |= 0x80;
        }
        if nofrag {
            want |= 0x100;
        }
        let got = fast_path_alloc_flags(gfp, nofrag);
        assert_eq!(got.bits(), want, "{gfp} nofragment={nofrag}");
        assert_eq!(got.watermark(), Watermark::Low);
    }
}

#[test]
fn small_helpers() {
    assert!(gfpflags_allow_blocking(Gfp::KERNEL));
    assert!(!gfpflags_allow_blocking(Gfp::ATOMIC));
    assert!(!gfpflags_allow_blocking(Gfp::NOWAIT));
    assert!(gfp_compaction_allowed(Gfp::NOFS));
    assert!(!gfp_compaction_allowed(Gfp::NOIO));
    assert!(gfp_pfmemalloc_allowed(Gfp::MEMALLOC));
    assert!(!gfp_pfmemalloc_allowed(Gfp::MEMALLOC | Gfp::NOMEMALLOC));
}

// ---------------------------------------------------------------------------
// ALLOC flags
// ---------------------------------------------------------------------------

#[test]
fn alloc_flag_values_and_watermark_field() {
    use AllocFlags as A;
    let table: [(A, u32); 15] = [
        (A::WMARK_MIN, 0),
        (A::WMARK_LOW, 1),
        (A::WMARK_HIGH, 2),
        (A::WMARK_MASK, 3),
        (A::NO_WATERMARKS, 0x4),
        (A::OOM, 0x8),
        (A::NON_BLOCK, 0x10),
        (A::MIN_RESERVE, 0x20),
        (A::CPUSET, 0x40),
        (A::CMA, 0x80),
        (A::NOFRAGMENT, 0x100),
        (A::HIGHATOMIC, 0x200),
        (A::TRYLOCK, 0x400),
        (A::KSWAPD, 0x800),
        (A::RESERVES, 0x238),
    ];
    for (flag, value) in table {
        assert_eq!(flag.bits(), value, "{flag:?}");
    }
    let f = A::CPUSET | A::KSWAPD;
    assert_eq!(f.watermark(), Watermark::Min);
    let low = f.with_watermark(Watermark::Low);
    assert_eq!(low.bits(), 0x841);
    assert_eq!(low.with_watermark(Watermark::High).bits(), 0x842);
    assert_eq!(low.with_watermark(Watermark::Min), f);
    assert_eq!(A::from_bits(3).watermark(), Watermark::High);
    assert_eq!(Watermark::High.index(), 2);
}

#[test]
fn alloc_flags_print_symbolically() {
    use AllocFlags as A;
    let atomic = gfp_to_alloc_flags(Gfp::ATOMIC, 1);
    assert_eq!(atomic.to_string(), "WMARK_MIN|NON_BLOCK|MIN_RESERVE|HIGHATOMIC|KSWAPD");
    assert_eq!(std::format!("{:?}", A::WMARK_LOW), "AllocFlags(WMARK_LOW)");
    assert_eq!(A::from_bits(0x1_0003).to_string(), "WMARK_3|0x10000");
}

// ---------------------------------------------------------------------------
// Zones and migrate types
// ---------------------------------------------------------------------------

/// All 16 combinations of the zone bits (DMA, HIGHMEM, DMA32, MOVABLE =
/// bits 0..3 of the index), as Linux's `GFP_ZONE_TABLE` / `GFP_ZONE_BAD` give
/// them on x86-64 (no highmem zone). `None` marks a bad combination.
#[test]
fn gfp_zone_all_combinations() {
    use ZoneType::*;
    let expected: [Option<ZoneType>; 16] = [
        Some(Normal),  // 0
        Some(Dma),     // DMA
        Some(Normal),  // HIGHMEM
        None,          // DMA|HIGHMEM
        Some(Dma32),   // DMA32
        None,          // DMA|DMA32
        None,          // HIGHMEM|DMA32
        None,          // DMA|HIGHMEM|DMA32
        Some(Normal),  // MOVABLE
        Some(Dma),     // MOVABLE|DMA
        Some(Movable), // MOVABLE|HIGHMEM
        None,          // MOVABLE|DMA|HIGHMEM
        Some(Dma32),   // MOVABLE|DMA32
        None,          // MOVABLE|DMA|DMA32
        None,          // MOVABLE|HIGHMEM|DMA32
        None,          // all four
    ];
    for (bits, want) in expected.iter().enumerate() {
        for other in [0, Gfp::KERNEL.bits() | Gfp::RECLAIMABLE.bits() | 0x8000_0000] {
            let gfp = Gfp::from_bits(bits as u32 | other);
            match (gfp_zone(gfp), want) {
                (Ok(z), Some(w)) => assert_eq!(z, *w, "{gfp}"),
                (Err(e), None) => {
                    assert_eq!(e.zone_bits().bits(), bits as u32);
                    assert!(!e.to_string().is_empty());
                }
                (got, _) => panic!("gfp_zone({gfp}) = {got:?}, want {want:?}"),
            }
        }
    }
    assert_eq!(gfp_zone(Gfp::HIGHUSER_MOVABLE), Ok(Movable));
    assert_eq!(gfp_zone(Gfp::KERNEL), Ok(Normal));
}

#[test]
fn gfp_migratetype_all_combinations() {
    use MigrateType::*;
    // Index bit 0 = MOVABLE, bit 1 = RECLAIMABLE; both is invalid → Unmovable (documented).
    let expected = [Unmovable, Movable, Reclaimable, Unmovable];
    for (i, want) in expected.into_iter().enumerate() {
        let mut gfp = Gfp::NOFS | Gfp::HIGHMEM;
        if i & 1 != 0 {
            gfp |= Gfp::from_bits(0x8);
        }
        if i & 2 != 0 {
            gfp |= Gfp::from_bits(0x10);
        }
        assert_eq!(gfp_migratetype(gfp), want, "{gfp}");
    }
    // The trace's migratetype column for its commonest values.
    assert_eq!(gfp_migratetype(Gfp::from_bits(0x500cc2)), Unmovable);
    assert_eq!(gfp_migratetype(Gfp::from_bits(0x152c4a)), Movable);
    assert_eq!(gfp_migratetype(Gfp::from_bits(0x52c50)), Reclaimable);
}

#[test]
fn zone_type_table() {
    let names = ["DMA", "DMA32", "Normal", "Movable"];
    assert_eq!(MAX_NR_ZONES, 4);
    for (i, z) in ZoneType::ALL.into_iter().enumerate() {
        assert_eq!(z.index(), i);
        assert_eq!(ZoneType::from_index(i), Some(z));
        assert_eq!(z.name(), names[i]);
    }
    assert_eq!(ZoneType::from_index(4), None);
    assert_eq!(ZoneType::from_index(usize::MAX), None);
}

#[test]
fn migrate_type_table() {
    use MigrateType::*;
    let names = ["Unmovable", "Movable", "Reclaimable", "HighAtomic", "CMA", "Isolate"];
    assert_eq!(MIGRATE_TYPES, 6);
    assert_eq!(MigrateType::PCPTYPES, 3);
    for (i, m) in MigrateType::ALL.into_iter().enumerate() {
        assert_eq!(m.index(), i);
        assert_eq!(MigrateType::from_index(i), Some(m));
        assert_eq!(m.name(), names[i]);
        assert_eq!(m.is_pcp_type(), i < 3);
        // Fallbacks are only between pcp types, never to self.
        assert!(m.fallbacks().iter().all(|f| f.is_pcp_type() && *f != m));
    }
    assert_eq!(MigrateType::from_index(6), None);
    assert_eq!(Unmovable.fallbacks(), &[Reclaimable, Movable]);
    assert_eq!(Reclaimable.fallbacks(), &[Unmovable, Movable]);
    assert_eq!(Movable.fallbacks(), &[Reclaimable, Unmovable]);
    assert!(HighAtomic.fallbacks().is_empty());
    assert!(Cma.fallbacks().is_empty());
    assert!(Isolate.fallbacks().is_empty());
}

// ---------------------------------------------------------------------------
// Text form
// ---------------------------------------------------------------------------

/// Every distinct gfp value in the gittar trace header, with the text the
/// kernel printed for it. Display must produce exactly that text.
const TRACE_HEADER: [(u32, &str); 22] = [
    (0x500cc2, "GFP_HIGHUSER|__GFP_ACCOUNT"),
    (0x152c4a, "GFP_NOFS|__GFP_HIGHMEM|__GFP_MOVABLE|__GFP_NOWARN|__GFP_NORETRY|__GFP_COMP|__GFP_HARDWALL"),
    (0x140dca, "GFP_HIGHUSER_MOVABLE|__GFP_ZERO|__GFP_COMP"),
    (0x141cca, "GFP_HIGHUSER_MOVABLE|__GFP_WRITE|__GFP_COMP"),
    (0x148c40, "GFP_NOFS|__GFP_NOFAIL|__GFP_COMP|__GFP_HARDWALL"),
    (0x42800, "GFP_NOWAIT|__GFP_COMP"),
    (0x153cca, "GFP_HIGHUSER_MOVABLE|__GFP_WRITE|__GFP_NOWARN|__GFP_NORETRY|__GFP_COMP"),
    (0x52c50, "GFP_NOFS|__GFP_RECLAIMABLE|__GFP_NOWARN|__GFP_NORETRY|__GFP_COMP"),
    (0x140cca, "GFP_HIGHUSER_MOVABLE|__GFP_COMP"),
    (0x52810, "GFP_NOWAIT|__GFP_RECLAIMABLE|__GFP_NORETRY|__GFP_COMP"),
    (0x440dc0, "GFP_KERNEL_ACCOUNT|__GFP_ZERO|__GFP_COMP"),
    (0x52830, "GFP_ATOMIC|__GFP_RECLAIMABLE|__GFP_NOWARN|__GFP_NORETRY|__GFP_COMP"),
    (0x2800, "GFP_NOWAIT"),
    (0x148c48, "GFP_NOFS|__GFP_MOVABLE|__GFP_NOFAIL|__GFP_COMP|__GFP_HARDWALL"),
    (0xd2050, "__GFP_RECLAIMABLE|__GFP_IO|__GFP_NOWARN|__GFP_NORETRY|__GFP_COMP|__GFP_NOMEMALLOC"),
    (0x252800, "GFP_NOWAIT|__GFP_NORETRY|__GFP_COMP|__GFP_THISNODE"),
    (0x52cd0, "GFP_KERNEL|__GFP_RECLAIMABLE|__GFP_NOWARN|__GFP_NORETRY|__GFP_COMP"),
    (0x152c50, "GFP_NOFS|__GFP_RECLAIMABLE|__GFP_NOWARN|__GFP_NORETRY|__GFP_COMP|__GFP_HARDWALL"),
    (0xd2800, "GFP_NOWAIT|__GFP_NORETRY|__GFP_COMP|__GFP_NOMEMALLOC"),
    (0x52c40, "GFP_NOFS|__GFP_NOWARN|__GFP_NORETRY|__GFP_COMP"),
    (0x52cc0, "GFP_KERNEL|__GFP_NOWARN|__GFP_NORETRY|__GFP_COMP"),
    (0x40c40, "GFP_NOFS|__GFP_COMP"),
];

#[test]
fn display_matches_trace_header() {
    for (value, text) in TRACE_HEADER {
        let gfp = Gfp::from_bits(value);
        assert_eq!(gfp.to_string(), text, "{value:#x}");
        assert_eq!(Gfp::parse(text), Ok(gfp), "{text}");
        assert_eq!(Gfp::parse(&std::format!("{value:#x}")), Ok(gfp));
    }
}

#[test]
fn display_special_cases() {
    let cases: [(u32, &str); 10] = [
        (0, "none"),
        (0x400cc0, "GFP_KERNEL_ACCOUNT"),
        (0xcc0, "GFP_KERNEL"),
        (0xc00, "GFP_NOIO"),
        (0x400, "__GFP_DIRECT_RECLAIM"),
        (0x1, "GFP_DMA"),
        (0x4 | 0x100, "GFP_DMA32|__GFP_ZERO"),
        (0x1c24ca, "GFP_TRANSHUGE"),
        (0x200, "0x200"),
        (0x1000100 | 0x8000_0000, "__GFP_ZERO|__GFP_NO_OBJ_EXT|0x80000000"),
    ];
    for (value, text) in cases {
        assert_eq!(Gfp::from_bits(value).to_string(), text);
        assert_eq!(Gfp::parse(text), Ok(Gfp::from_bits(value)), "{text}");
    }
    assert_eq!(std::format!("{:?}", Gfp::ATOMIC), "Gfp(GFP_ATOMIC)");
}

#[test]
fn parse_accepts_variants() {
    let ok: [(&str, u32); 9] = [
        ("0x400cc0", 0x400cc0),
        ("0X400CC0", 0x400cc0),
        ("GFP_KERNEL|__GFP_ZERO", 0xdc0),
        (" GFP_KERNEL | __GFP_ZERO ", 0xdc0),
        ("__GFP_DMA|__GFP_DMA32", 0x5),
        ("GFP_KERNEL|GFP_KERNEL", 0xcc0),
        ("GFP_NOFS|0x80", 0xcc0),
        ("  none ", 0),
        ("0x00000000000000001", 1),
    ];
    for (text, value) in ok {
        assert_eq!(Gfp::parse(text), Ok(Gfp::from_bits(value)), "{text:?}");
        assert_eq!(text.parse::<Gfp>(), Ok(Gfp::from_bits(value)));
    }
}

#[test]
fn parse_rejects_with_typed_errors() {
    use GfpParseErrorKind::*;
    let bad: [(&str, GfpParseErrorKind, usize, usize); 12] = [
        ("", Empty, 0, 0),
        ("   ", Empty, 0, 3),
        ("|", EmptyTerm, 0, 0),
        ("GFP_KERNEL|", EmptyTerm, 11, 0),
        ("GFP_KERNEL| |__GFP_ZERO", EmptyTerm, 12, 0),
        ("GFP_KERNAL", UnknownName, 0, 10),
        ("GFP_KERNEL|gfp_kernel", UnknownName, 11, 10),
        ("GFP_KERNEL|none", UnknownName, 11, 4),
        ("0x", BadNumber, 0, 2),
        ("0x+5", BadNumber, 0, 4),
        ("GFP_NOFS| 0xcg", BadNumber, 10, 4),
        ("0x100000000", NumberTooLarge, 0, 11),
    ];
    for (text, kind, offset, len) in bad {
        let err = Gfp::parse(text).expect_err(text);
        assert_eq!(err.kind(), kind, "{text:?}");
        assert_eq!((err.offset(), err.term_len()), (offset, len), "{text:?}");
        assert!(!err.to_string().is_empty());
    }
    // Decimal and unicode are rejected, not misread.
    assert!(Gfp::parse("3264").is_err());
    assert!(Gfp::parse("GFP_KERNEL|é").is_err());
}

fn names_strategy() -> impl Strategy<Value = String> {
    let pieces = prop::sample::select(std::vec![
        "GFP_KERNEL",
        "__GFP_ZERO",
        "GFP_NOWAIT",
        "__GFP_NO_OBJ_EXT",
        "GFP_DMA",
        "|",
        "||",
        " ",
        "0x",
        "0x1f",
        "0xffffffff",
        "0x1ffffffff",
        "none",
        "é",
        "__GFP_",
        "+",
        "\u{0}",
    ]);
    prop::collection::vec(pieces, 0..12).prop_map(|v: Vec<&str>| v.concat())
}

proptest! {
    /// Display then parse gives back the value, for every u32.
    #[test]
    fn display_parse_round_trip(bits in any::<u32>()) {
        let gfp = Gfp::from_bits(bits);
        prop_assert_eq!(Gfp::parse(&gfp.to_string()), Ok(gfp));
    }

    /// Arbitrary text never panics, and whatever parses re-prints to the same value.
    #[test]
    fn parse_never_panics(s in any::<String>()) {
        if let Ok(gfp) = Gfp::parse(&s) {
            prop_assert_eq!(Gfp::parse(&gfp.to_string()), Ok(gfp));
        }
    }

    /// Near-miss text built from real tokens never panics either, and error
    /// spans always lie inside the input.
    #[test]
    fn parse_token_soup(s in names_strategy()) {
        match Gfp::parse(&s) {
            Ok(gfp) => prop_assert_eq!(Gfp::parse(&gfp.to_string()), Ok(gfp)),
            Err(e) => {
                prop_assert!(e.offset() + e.term_len() <= s.len());
                prop_assert!(s.get(e.offset()..e.offset() + e.term_len()).is_some());
            }
        }
    }

    /// gfp_zone and the conversions answer every u32 without panicking, and
    /// the slow path never sets a bit outside the ones Linux can produce.
    #[test]
    fn conversions_total(bits in any::<u32>(), order in 0u32..=10) {
        let gfp = Gfp::from_bits(bits);
        let _ = gfp_zone(gfp);
        let _ = gfp_migratetype(gfp);
        let slow = gfp_to_alloc_flags(gfp, order);
        prop_assert_eq!(slow.bits() & !0xaf4, 0);
        prop_assert_eq!(slow.watermark(), Watermark::Min);
        prop_assert_eq!(fast_path_alloc_flags(gfp, false).bits() & !0x881, 0);
    }
}
