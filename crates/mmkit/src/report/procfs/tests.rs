//! Tests for the `procfs` renderers: byte-for-byte comparisons with text captured
//! from a real kernel, parse/render round trips, parser robustness and
//! hand-computed fragmentation indices.

use super::*;
use alloc::vec;
use proptest::prelude::*;

/// `/proc/buddyinfo` captured on a 6.18 x86-64 guest in the same instant as
/// [`PAGETYPEINFO_FIXTURE`] (buddyinfo read before and after was identical).
const BUDDYINFO_FIXTURE: &str = concat!(
    "Node 0, zone      DMA      0      0      0      0      0      0      0      0      1      1      3 \n",
    "Node 0, zone    DMA32      2      2      4      2      5      4      3      3      4      2    752 \n",
    "Node 0, zone   Normal   8644   5362   2738   1561    728    260     81     40     16      4     14 \n",
);

/// `/proc/pagetypeinfo` from the same snapshot (kernel without CMA, without page_owner).
const PAGETYPEINFO_FIXTURE: &str = concat!(
    "Page block order: 9\n",
    "Pages per block:  512\n",
    "\n",
    "Free pages count per migrate type at order       0      1      2      3      4      5      6      7      8      9     10 \n",
    "Node    0, zone      DMA, type    Unmovable      0      0      0      0      0      0      0      0      1      0      0 \n",
    "Node    0, zone      DMA, type      Movable      0      0      0      0      0      0      0      0      0      1      3 \n",
    "Node    0, zone      DMA, type  Reclaimable      0      0      0      0      0      0      0      0      0      0      0 \n",
    "Node    0, zone      DMA, type   HighAtomic      0      0      0      0      0      0      0      0      0      0      0 \n",
    "Node    0, zone      DMA, type      Isolate      0      0      0      0      0      0      0      0      0      0      0 \n",
    "Node    0, zone    DMA32, type    Unmovable      0      0      0      0      0      0      0      0      0      0      0 \n",
    "Node    0, zone    DMA32, type      Movable      2      2      4      2      5      4      3      3      4      2    752 \n",
    "Node    0, zone    DMA32, type  Reclaimable      0      0      0      0      0      0      0      0      0      0      0 \n",
    "Node    0, zone    DMA32, type   HighAtomic      0      0      0      0      0      0      0      0      0      0      0 \n",
    "Node    0, zone    DMA32, type      Isolate      0      0      0      0      0      0      0      0      0      0      0 \n",
    "Node    0, zone   Normal, type    Unmovable    117    171     54     12     14     20      3      8      7      0      0 \n",
    "Node    0, zone   Normal, type      Movable   8526   5191   2684   1549    713    239     77     32      8      4     14 \n",
    "Node    0, zone   Normal, type  Reclaimable      1      0      0      0      1      1      1      0      1      0      0 \n",
    "Node    0, zone   Normal, type   HighAtomic      0      0      0      0      0      0      0      0      0      0      0 \n",
    "Node    0, zone   Normal, type      Isolate      0      0      0      0      0      0      0      0      0      0      0 \n",
    "\n",
    "Number of blocks type     Unmovable      Movable  Reclaimable   HighAtomic      Isolate \n",
    "Node 0, zone      DMA            1            7            0            0            0 \n",
    "Node 0, zone    DMA32            0         1528            0            0            0 \n",
    "Node 0, zone   Normal           40          647           17            0            0 \n",
);

/// `/proc/buddyinfo`, then debugfs `extfrag/unusable_index` and
/// `extfrag/extfrag_index`, read back to back on the same guest
/// (buddyinfo was unchanged when read again afterwards).
const EXTFRAG_BUDDYINFO: &str = concat!(
    "Node 0, zone      DMA      0      0      0      0      0      0      0      0      1      1      3 \n",
    "Node 0, zone    DMA32      2      2      4      2      5      4      3      3      4      2    752 \n",
    "Node 0, zone   Normal   8940   5533   2828   1502    640    225     76     40     16      3     14 \n",
);
const UNUSABLE_FIXTURE: &str = concat!(
    "Node 0, zone      DMA 0.000 0.000 0.000 0.000 0.000 0.000 0.000 0.000 0.000 0.066 0.200 \n",
    "Node 0, zone    DMA32 0.000 0.000 0.000 0.000 0.000 0.000 0.000 0.000 0.001 0.002 0.003 \n",
    "Node 0, zone   Normal 0.000 0.098 0.220 0.345 0.477 0.590 0.669 0.723 0.779 0.825 0.841 \n",
);
const EXTFRAG_FIXTURE: &str = concat!(
    "Node 0, zone      DMA -1.000 -1.000 -1.000 -1.000 -1.000 -1.000 -1.000 -1.000 -1.000 -1.000 -1.000 \n",
    "Node 0, zone    DMA32 -1.000 -1.000 -1.000 -1.000 -1.000 -1.000 -1.000 -1.000 -1.000 -1.000 -1.000 \n",
    "Node 0, zone   Normal -1.000 -1.000 -1.000 -1.000 -1.000 -1.000 -1.000 -1.000 -1.000 -1.000 -1.000 \n",
);

fn static_name(name: &str) -> &'static str {
    ["DMA", "DMA32", "Normal", "Movable", "HighMem", "Device"]
        .into_iter()
        .find(|known| *known == name)
        .expect("zone name used by the fixtures")
}

fn zone(node: usize, name: &'static str, per_order: Vec<u64>) -> ZoneFreeInfo {
    ZoneFreeInfo {
        node,
        zone_name: name,
        free_blocks_per_order: per_order,
        free_blocks_per_type: Vec::new(),
        pageblocks_per_type: Vec::new(),
    }
}

fn zones_from_buddyinfo(text: &str) -> Vec<ZoneFreeInfo> {
    parse_buddyinfo(text)
        .unwrap()
        .into_iter()
        .map(|(node, name, counts)| zone(node, static_name(&name), counts))
        .collect()
}

fn number(token: &str) -> u64 {
    token.trim_start_matches('>').parse().unwrap()
}

/// Test-only reader for the free-count and block-count sections of one node's
/// pagetypeinfo: returns the geometry, migratetype names and zones.
fn parse_pagetypeinfo(text: &str) -> (PageblockGeometry, Vec<String>, Vec<ZoneFreeInfo>) {
    let mut lines = text.lines();
    let order_line = lines.next().unwrap();
    let pageblock_order = number(order_line.strip_prefix("Page block order: ").unwrap()) as u32;
    lines.next().unwrap(); // Pages per block
    assert_eq!(lines.next(), Some(""));
    assert!(lines.next().unwrap().starts_with("Free pages count"));
    let mut zones: Vec<ZoneFreeInfo> = Vec::new();
    for line in lines.by_ref().take_while(|l| !l.is_empty()) {
        let mut parts = line.splitn(3, ',');
        let node = number(parts.next().unwrap().trim_start_matches("Node").trim()) as usize;
        let name = static_name(parts.next().unwrap().trim().trim_start_matches("zone").trim());
        let mut rest = parts.next().unwrap().split_ascii_whitespace().skip(2);
        let counts: Vec<u64> = rest.by_ref().map(number).collect();
        match zones.last_mut() {
            Some(z) if z.node == node && z.zone_name == name => z.free_blocks_per_type.push(counts),
            _ => zones.push(ZoneFreeInfo {
                node,
                zone_name: name,
                free_blocks_per_order: Vec::new(),
                free_blocks_per_type: vec![counts],
                pageblocks_per_type: Vec::new(),
            }),
        }
    }
    let header = lines.next().unwrap();
    let names: Vec<String> =
        header.strip_prefix("Number of blocks type ").unwrap().split_ascii_whitespace().map(String::from).collect();
    for (z, line) in zones.iter_mut().zip(lines) {
        z.pageblocks_per_type = line.split_ascii_whitespace().skip(4).map(number).collect();
        // The per-order totals are the per-type sums.
        let nr_orders = z.free_blocks_per_type[0].len();
        z.free_blocks_per_order =
            (0..nr_orders).map(|o| z.free_blocks_per_type.iter().map(|row| row[o]).sum()).collect();
    }
    (PageblockGeometry { pageblock_order }, names, zones)
}

#[test]
fn buddyinfo_reproduces_linux_fixture() {
    let zones = zones_from_buddyinfo(BUDDYINFO_FIXTURE);
    assert_eq!(zones.len(), 3);
    assert_eq!(zones[2].free_blocks_per_order[0], 8644);
    assert_eq!(buddyinfo(&zones), BUDDYINFO_FIXTURE);
}

#[test]
fn pagetypeinfo_reproduces_linux_fixture() {
    let (geometry, names, zones) = parse_pagetypeinfo(PAGETYPEINFO_FIXTURE);
    assert_eq!(geometry.pageblock_order, 9);
    assert_eq!(zones.len(), 3);
    assert_eq!(zones[2].pageblocks_per_type, vec![40, 647, 17, 0, 0]);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_eq!(pagetypeinfo(&geometry, &names, &zones), PAGETYPEINFO_FIXTURE);
    // Both fixtures come from one snapshot: per-type sums are the buddyinfo rows.
    assert_eq!(buddyinfo(&zones), BUDDYINFO_FIXTURE);
}

#[test]
fn extfrag_files_reproduce_linux_fixture() {
    let zones = zones_from_buddyinfo(EXTFRAG_BUDDYINFO);
    assert_eq!(unusable_index_text(&zones), UNUSABLE_FIXTURE);
    assert_eq!(extfrag_index_text(&zones), EXTFRAG_FIXTURE);
}

#[test]
fn buddyinfo_wide_values_and_long_names_are_not_truncated() {
    let zones = [zone(12, "HighMem", vec![1234567, 0]), zone(3, "Normal", vec![u64::MAX])];
    let text = buddyinfo(&zones);
    assert_eq!(text, "Node 12, zone  HighMem 1234567      0 \nNode 3, zone   Normal 18446744073709551615 \n");
    let parsed = parse_buddyinfo(&text).unwrap();
    assert_eq!(parsed[0], (12, String::from("HighMem"), vec![1234567, 0]));
    assert_eq!(parsed[1], (3, String::from("Normal"), vec![u64::MAX]));
    assert_eq!(buddyinfo(&[]), "");
}

#[test]
fn pagetypeinfo_two_nodes_cap_and_padding() {
    let node0 = ZoneFreeInfo {
        node: 0,
        zone_name: "Normal",
        free_blocks_per_order: vec![1, 100_002, 99_999],
        free_blocks_per_type: vec![vec![1, 100_000, 99_999], vec![0, 2, 0]],
        pageblocks_per_type: vec![5, 1_234_567_890_123],
    };
    let node1 = ZoneFreeInfo {
        node: 1,
        zone_name: "Movable",
        free_blocks_per_order: vec![7, 0, 0],
        free_blocks_per_type: vec![vec![7]],
        pageblocks_per_type: Vec::new(),
    };
    let text = pagetypeinfo(&PageblockGeometry { pageblock_order: 10 }, &["Unmovable", "Movable"], &[node0, node1]);
    let expected = concat!(
        "Page block order: 10\n",
        "Pages per block:  1024\n",
        "\n",
        "Free pages count per migrate type at order       0      1      2 \n",
        "Node    0, zone   Normal, type    Unmovable      1 >100000  99999 \n",
        "Node    0, zone   Normal, type      Movable      0      2      0 \n",
        "\n",
        "Number of blocks type     Unmovable      Movable \n",
        "Node 0, zone   Normal            5 1234567890123 \n",
        "Page block order: 10\n",
        "Pages per block:  1024\n",
        "\n",
        "Free pages count per migrate type at order       0      1      2 \n",
        "Node    1, zone  Movable, type    Unmovable      7      0      0 \n",
        "Node    1, zone  Movable, type      Movable      0      0      0 \n",
        "\n",
        "Number of blocks type     Unmovable      Movable \n",
        "Node 1, zone  Movable            0            0 \n",
    );
    assert_eq!(text, expected);
    assert_eq!(pagetypeinfo(&PageblockGeometry { pageblock_order: 9 }, &["A"], &[]), "");
}

#[test]
fn vmstat_lines_in_order() {
    let counters = [("nr_free_pages", 12345), ("pgalloc_dma", 0), ("nr_unstable", 0)];
    assert_eq!(vmstat(&counters), "nr_free_pages 12345\npgalloc_dma 0\nnr_unstable 0\n");
    assert_eq!(vmstat(&[]), "");
}

#[test]
fn parse_errors_name_line_and_reason() {
    let cases: [(&str, usize, &str); 9] = [
        ("Nod 0, zone DMA 1", 1, ERR_NODE_KEYWORD),
        ("Node 0 zone DMA 1", 1, ERR_NODE_ID),
        ("Node -1, zone DMA 1", 1, ERR_NODE_ID),
        ("Node 0, area DMA 1", 1, ERR_ZONE_KEYWORD),
        ("Node 0, zone", 1, ERR_ZONE_NAME),
        ("\nNode 0, zone DMA", 2, ERR_NO_COUNTS),
        ("Node 0, zone DMA 1 x2", 1, ERR_NOT_DECIMAL),
        ("Node 0, zone DMA 1 +2", 1, ERR_NOT_DECIMAL),
        ("Node 0, zone DMA 1\nNode 0, zone N 18446744073709551616", 2, ERR_TOO_LARGE),
    ];
    for (text, line, reason) in cases {
        assert_eq!(parse_buddyinfo(text), Err(ProcParseError { line, reason }), "{text:?}");
    }
    let err = ProcParseError { line: 4, reason: ERR_NO_COUNTS };
    assert_eq!(alloc::format!("{err}"), "line 4: zone has no free-block counts");
    assert_eq!(parse_buddyinfo(""), Ok(Vec::new()));
    assert_eq!(parse_buddyinfo("\n  \r\n"), Ok(Vec::new()));
}

#[test]
fn one_order_10_block_is_unfragmented() {
    let mut free = vec![0u64; 11];
    free[10] = 1;
    for order in 0..=10 {
        assert_eq!(unusable_index(&free, order), 0, "order {order}");
        assert_eq!(fragmentation_index(&free, order), -1000, "order {order}");
    }
    let text = extfrag_index_text(&[zone(0, "Normal", free.clone())]);
    assert!(text.starts_with("Node 0, zone   Normal -1.000 -1.000 "));
    let text = unusable_index_text(&[zone(0, "Normal", free)]);
    assert!(text.starts_with("Node 0, zone   Normal 0.000 0.000 "));
}

#[test]
fn hand_computed_indices() {
    // 2 order-0, 1 order-1, 1 order-3 block: 12 free pages.
    let free = [2, 1, 0, 1];
    assert_eq!(unusable_index(&free, 0), 0);
    assert_eq!(unusable_index(&free, 1), 166); // 2 of 12 pages unusable
    assert_eq!(unusable_index(&free, 2), 333); // 4 of 12
    assert_eq!(unusable_index(&free, 3), 333);
    assert_eq!(unusable_index(&free, 4), 1000); // beyond the slice: nothing suitable
    assert_eq!(fragmentation_index(&free, 3), -1000);
    // Eight order-0 pages: 1000 - (1000 + 8000 / 2^order) / 8.
    let free = [8, 0, 0, 0];
    assert_eq!(fragmentation_index(&free, 0), -1000);
    assert_eq!(fragmentation_index(&free, 1), 375);
    assert_eq!(fragmentation_index(&free, 2), 625);
    assert_eq!(fragmentation_index(&free, 3), 750);
    assert_eq!(fragmentation_index(&free, 4), 0); // order beyond the slice
    assert_eq!(
        extfrag_index_text(&[zone(0, "Normal", free.to_vec())]),
        "Node 0, zone   Normal -1.000  0.375  0.625  0.750 \n"
    );
    assert_eq!(
        unusable_index_text(&[zone(0, "Normal", free.to_vec())]),
        "Node 0, zone   Normal 0.000 1.000 1.000 1.000 \n"
    );
    // Empty zone: all free memory (none) unusable; no fragmentation index.
    assert_eq!(unusable_index(&[0, 0], 0), 1000);
    assert_eq!(fragmentation_index(&[0, 0], 1), 0);
    // Linux's formula goes negative for a lone small block; printed as C does.
    assert_eq!(fragmentation_index(&[1, 0], 1), -500);
    assert_eq!(extfrag_index_text(&[zone(0, "DMA", vec![1, 0])]), "Node 0, zone      DMA -1.000  0.-500 \n");
}

const ZONE_NAMES: &[&str] = &["DMA", "DMA32", "Normal", "Movable", "HighMem", "Device"];

fn zones_strategy() -> impl Strategy<Value = Vec<ZoneFreeInfo>> {
    let one = (0usize..4096, prop::sample::select(ZONE_NAMES), prop::collection::vec(any::<u64>(), 1..16))
        .prop_map(|(node, name, counts)| zone(node, name, counts));
    prop::collection::vec(one, 0..8)
}

proptest! {
    #[test]
    fn buddyinfo_round_trips(zones in zones_strategy()) {
        let text = buddyinfo(&zones);
        let parsed = parse_buddyinfo(&text).unwrap();
        let expected: Vec<(usize, String, Vec<u64>)> = zones
            .iter()
            .map(|z| (z.node, String::from(z.zone_name), z.free_blocks_per_order.clone()))
            .collect();
        prop_assert_eq!(parsed, expected);
    }

    #[test]
    fn parse_never_panics_on_garbage(text in any::<String>()) {
        let _ = parse_buddyinfo(&text);
    }

    #[test]
    fn parse_never_panics_on_near_misses(
        text in "(Node|zone|[0-9]{1,22}|,| |\t|\n|DMA|-|x){0,40}"
    ) {
        if let Err(e) = parse_buddyinfo(&text) {
            prop_assert!(e.line >= 1 && e.line <= text.lines().count());
        }
    }

    #[test]
    fn parse_never_panics_on_corrupted_rendering(
        zones in zones_strategy(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let mut bytes = buddyinfo(&zones).into_bytes();
        if !bytes.is_empty() {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        let text = String::from_utf8_lossy(&bytes);
        let _ = parse_buddyinfo(&text);
    }

    #[test]
    fn indices_stay_in_linux_ranges(
        free in prop::collection::vec(0u64..1_000_000, 1..12),
        order in 0u32..14,
    ) {
        let unusable = unusable_index(&free, order);
        prop_assert!(unusable <= 1000);
        let frag = fragmentation_index(&free, order);
        prop_assert!(frag == -1000 || (-500..=1000).contains(&frag), "{}", frag);
        let has_suitable = free.iter().skip(order as usize).any(|&c| c > 0);
        prop_assert_eq!(frag == -1000, has_suitable);
    }
}
