//! Rule 2 of "Safe at the edges": every bare-PFN call refuses an owned
//! block. [`mmkit::PFN_CALLS`] is the one list of the page allocator's
//! public calls that take a `Pfn`; this test
//! - reads `crates/mmkit/src` and fails when a public fn taking a `Pfn` is
//!   not on the list (or a listed one is gone), so a new call cannot skip
//!   the rule;
//! - applies every call the list says changes state, through the dispatch
//!   table below (a listed call without an entry fails), to the first and
//!   the last page of a block of every owned kind, and asserts the refusal
//!   the list promises and that nothing changed: the pages' flags, counts,
//!   private words and owner, the free page count; then the owner's own
//!   free succeeds and the map's invariants hold.

use mmkit::Blocks;
use mmkit::Cpus;
use mmkit::{
    Backing, Contig, Gfp, HugePages, MemoryMapBuilder, MigrateType, OnOwnedBlock, PageAllocator, Pfn, Report, PFN_CALLS,
};
use mmkit_edges::{with_owned, OwnedBlock, OwnedKind};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `Type::method` of every `pub fn` in `text` (one file) whose parameters
/// name `Pfn`, outside inline test modules.
fn pfn_calls_in(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut impl_type: Option<String> = None;
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        // An inline test module (`mod tests {` after `#[cfg(test)]` or
        // `#[cfg(all(test, ...))]`) is skipped to its closing brace.
        if (line.starts_with("#[cfg(test)]") || line.starts_with("#[cfg(all(test"))
            && lines.get(i + 1).is_some_and(|l| l.starts_with("mod ") && l.trim_end().ends_with('{'))
        {
            let mut depth = 0i32;
            i += 1;
            while i < lines.len() {
                depth += lines[i].matches('{').count() as i32 - lines[i].matches('}').count() as i32;
                i += 1;
                if depth <= 0 {
                    break;
                }
            }
            continue;
        }
        if line.starts_with("impl") {
            impl_type = Some(impl_type_of(line));
        } else if !line.starts_with(' ') && !line.starts_with('}') && !line.trim().is_empty() {
            // A top-level item other than an impl: free functions count as
            // the crate's.
            if !line.starts_with("#") && !line.starts_with("//") {
                impl_type = None;
            }
        }
        let trimmed = line.trim_start();
        let is_pub_fn = trimmed.starts_with("pub fn ") || trimmed.starts_with("pub unsafe fn ");
        if is_pub_fn && !trimmed.starts_with("//") {
            let mut signature = String::from(trimmed);
            let mut j = i;
            while !(signature.contains('{') || signature.trim_end().ends_with(';')) && j + 1 < lines.len() {
                j += 1;
                signature.push(' ');
                signature.push_str(lines[j].trim());
            }
            if params_name_pfn(&signature) {
                let name = signature.split("fn ").nth(1).unwrap_or("");
                let name: String = name.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                let owner = impl_type.clone().unwrap_or_else(|| "crate".to_string());
                found.push(format!("{owner}::{name}"));
            }
        }
        i += 1;
    }
    found
}

/// The type an `impl` line is for: `impl<'a> Contig<'a> {` is `Contig`,
/// `impl PageSource for &PageAllocator {` is `PageAllocator`.
fn impl_type_of(line: &str) -> String {
    let mut rest = line.trim_start_matches("impl").trim_start();
    if rest.starts_with('<') {
        let mut depth = 0;
        for (at, c) in rest.char_indices() {
            match c {
                '<' => depth += 1,
                '>' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                rest = &rest[at + 1..];
                break;
            }
        }
    }
    let rest = rest.rsplit(" for ").next().unwrap_or(rest).trim().trim_start_matches('&');
    let path: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
    path.rsplit("::").next().unwrap_or("").to_string()
}

/// Whether the parameter list of `signature` names the type `Pfn`.
fn params_name_pfn(signature: &str) -> bool {
    let Some(open) = signature.find('(') else { return false };
    let mut depth = 0;
    let mut close = signature.len();
    for (at, c) in signature[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    close = open + at;
                    break;
                }
            }
            _ => {}
        }
    }
    signature[open..close].split(|c: char| !(c.is_alphanumeric() || c == '_')).any(|word| word == "Pfn")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every public call of `crates/mmkit/src` that takes a `Pfn`.
fn scanned_pfn_calls() -> BTreeSet<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../mmkit/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut calls = BTreeSet::new();
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        // Test-only files (`tests.rs` of a module, loom models).
        if name == "tests.rs" || name.starts_with("loom") {
            continue;
        }
        calls.extend(pfn_calls_in(&std::fs::read_to_string(&path).unwrap()));
    }
    calls
}

#[test]
fn the_scanner_sees_public_methods_that_take_a_pfn() {
    let text = "impl<'a> Contig<'a> {\n    pub fn free_range(&self, pfn: Pfn,\n        n: u64) -> u64 {\n    }\n    \
                pub fn size(&self) -> Pfn {\n    }\n    pub(crate) fn hidden(&self, pfn: Pfn) {}\n    \
                // pub fn commented(&self, pfn: Pfn) {}\n}\nimpl PageSource for &PageAllocator {\n    \
                pub fn bulk(&self, pfns: &[Pfn]) {}\n    pub fn opt(&self, p: Option<crate::Pfn>) {}\n    \
                pub fn pfns(&self, x: Pfns) {}\n}\n#[cfg(test)]\nmod tests {\n    pub fn in_test(pfn: Pfn) {}\n}\n\
                impl PageAllocator {\n    pub fn after(&self, pfn: Pfn) {}\n}\n";
    assert_eq!(
        pfn_calls_in(text),
        ["Contig::free_range", "PageAllocator::bulk", "PageAllocator::opt", "PageAllocator::after"]
    );
    assert_eq!(impl_type_of("impl<F: Fn(Pfn)> CopyMigrator<F> {"), "CopyMigrator");
    assert_eq!(impl_type_of("impl crate::PageAllocator {"), "PageAllocator");
}

#[test]
fn the_list_names_every_public_call_that_takes_a_pfn() {
    let scanned = scanned_pfn_calls();
    let listed: BTreeSet<String> = PFN_CALLS.iter().map(|c| c.name.to_string()).collect();
    assert_eq!(listed.len(), PFN_CALLS.len(), "a call is listed twice");
    let missing: Vec<_> = scanned.difference(&listed).collect();
    let gone: Vec<_> = listed.difference(&scanned).collect();
    assert!(
        missing.is_empty() && gone.is_empty(),
        "public calls taking a Pfn not in mmkit::PFN_CALLS (add them, with what they do to an owned block): \
         {missing:?}; listed but not found in the source: {gone:?}"
    );
}

/// What a call did: `Err` with its error's `Debug` text, or `Ok`.
type Outcome = Result<(), String>;

fn outcome<T, E: std::fmt::Debug>(result: Result<T, E>) -> Outcome {
    result.map(drop).map_err(|e| format!("{e:?}"))
}

/// What a dispatched call is given: the map, a CMA area of it, the owned
/// block, and the page of it to name.
struct Target<'m> {
    mm: &'m PageAllocator,
    block: OwnedBlock,
    pfn: Pfn,
}

type Call = fn(&Target<'_>) -> Outcome;

/// The table: every call that changes state, applied to `t.pfn` as a
/// caller holding a bare PFN would (a free names the block's order).
fn dispatch(name: &str) -> Option<Call> {
    let call: Call = match name {
        "PageAllocator::free_pages" => |t| outcome(t.mm.free_pages(t.pfn, t.block.order)),
        "PageAllocator::free_frozen_pages" => |t| outcome(t.mm.free_frozen_pages(t.pfn, t.block.order)),
        "PageAllocator::put_page" => |t| outcome(t.mm.put_page(t.pfn)),
        "PageAllocator::get_page" => |t| outcome(t.mm.get_page(t.pfn)),
        "PageAllocator::free_pages_bulk" => |t| outcome(t.mm.free_pages_bulk(&[t.pfn])),
        "PageAllocator::release_pages" => |t| outcome(t.mm.release_pages(&[t.pfn])),
        "CpuHandle::free_pages" => |t| outcome(Cpus::new(t.mm).cpu(0).unwrap().free_pages(t.pfn, t.block.order)),
        "CpuHandle::free_frozen_pages" => {
            |t| outcome(Cpus::new(t.mm).cpu(0).unwrap().free_frozen_pages(t.pfn, t.block.order))
        }
        "CpuHandle::put_page" => |t| outcome(Cpus::new(t.mm).cpu(0).unwrap().put_page(t.pfn)),
        "CpuHandle::free_pages_bulk" => |t| outcome(Cpus::new(t.mm).cpu(0).unwrap().free_pages_bulk(&[t.pfn])),
        "CpuHandle::release_pages" => |t| outcome(Cpus::new(t.mm).cpu(0).unwrap().release_pages(&[t.pfn])),
        "PinnedCpu::free_pages" => |t| outcome(Cpus::new(t.mm).pin_cpu(1).unwrap().free_pages(t.pfn, t.block.order)),
        "PinnedCpu::free_frozen_pages" => {
            |t| outcome(Cpus::new(t.mm).pin_cpu(1).unwrap().free_frozen_pages(t.pfn, t.block.order))
        }
        "PinnedCpu::put_page" => |t| outcome(Cpus::new(t.mm).pin_cpu(1).unwrap().put_page(t.pfn)),
        "PinnedCpu::free_pages_bulk" => |t| outcome(Cpus::new(t.mm).pin_cpu(1).unwrap().free_pages_bulk(&[t.pfn])),
        "PinnedCpu::hand_over" => |t| outcome(Cpus::new(t.mm).pin_cpu(1).unwrap().hand_over(t.pfn)),
        "LockedZone::free_pages" => |t| {
            let mut cpu = Cpus::new(t.mm).pin_cpu(1).unwrap();
            let gfp = zone_gfp(t.mm, t.pfn);
            let result = cpu.burst(gfp, |zone| zone.free_pages(t.pfn, t.block.order)).unwrap();
            outcome(result)
        },
        "LockedZone::hand_over" => |t| {
            let mut cpu = Cpus::new(t.mm).pin_cpu(1).unwrap();
            let gfp = zone_gfp(t.mm, t.pfn);
            outcome(cpu.burst(gfp, |zone| zone.hand_over(t.pfn)).unwrap())
        },
        "Contig::free_contig_range" => |t| outcome(Contig::new(t.mm).free_contig_range(t.pfn, 1)),
        "Contig::free_contig_frozen_range" => |t| outcome(Contig::new(t.mm).free_contig_frozen_range(t.pfn, 1)),
        "PageAllocator::set_page_flags" => |t| outcome(t.mm.set_page_flags(t.pfn, mmkit::PageFlags::LRU)),
        "PageAllocator::clear_page_flags" => |t| outcome(t.mm.clear_page_flags(t.pfn, mmkit::PageFlags::LRU)),
        "PageAllocator::set_page_private" => |t| outcome(t.mm.set_page_private(t.pfn, 0xdead_beef)),
        "PageAllocator::alloc_pages_at" => |t| outcome(t.mm.alloc_pages_at(t.pfn, 0, Gfp::KERNEL)),
        "Contig::alloc_contig_range" => |t| {
            outcome(Contig::new(t.mm).alloc_contig_range(t.pfn, Pfn(t.pfn.0 + 1), MigrateType::Movable, Gfp::KERNEL))
        },
        "Contig::alloc_contig_frozen_range" => |t| {
            outcome(Contig::new(t.mm).alloc_contig_frozen_range(
                t.pfn,
                Pfn(t.pfn.0 + 1),
                MigrateType::Movable,
                Gfp::KERNEL,
            ))
        },
        "Contig::alloc_contig_block" => |t| {
            let key = Blocks::new(t.mm).new_owner_key().unwrap();
            let contig = Contig::new(t.mm);
            let got = contig.alloc_contig_block(&key, t.pfn, Pfn(t.pfn.0 + 1), MigrateType::Movable, Gfp::KERNEL);
            let out = match got {
                Ok(range) => {
                    let _ = contig.free_contig_block(range);
                    Ok(())
                }
                Err(e) => Err(format!("{e:?}")),
            };
            Blocks::new(t.mm).release_owner_key(key);
            out
        },
        "Contig::cma_release" => |t| {
            let contig = Contig::new(t.mm);
            let id = contig.cma_area("edges").unwrap();
            outcome(contig.cma_release(id, t.pfn, 1))
        },
        _ => return None,
    };
    Some(call)
}

/// Zone bits that make a locked zone of the zone holding `pfn`.
fn zone_gfp(mm: &PageAllocator, pfn: Pfn) -> Gfp {
    // The map is 64 MiB: DMA below 16 MiB, DMA32 above.
    let _ = mm;
    if pfn.0 < 4096 {
        Gfp::KERNEL | Gfp::DMA
    } else {
        Gfp::KERNEL | Gfp::DMA32
    }
}

/// What a bare-PFN call must not change: per page of the block, its flags,
/// count, private word and owner; the map's free pages.
fn snapshot(mm: &PageAllocator, block: OwnedBlock) -> (Vec<String>, u64) {
    let pages = (block.pfn.0..block.pfn.0 + block.nr_pages)
        .map(Pfn)
        .map(|p| {
            format!(
                "{p}: {:?} {:?} {:?} {:?}",
                mm.page_flags(p),
                mm.page_count(p),
                mm.page_private(p),
                Blocks::new(mm).page_owner(p)
            )
        })
        .collect();
    Cpus::new(mm).drain_all_pages();
    (pages, Report::new(mm).nr_free_pages() + Report::new(mm).nr_pcp_pages())
}

fn map() -> Arc<PageAllocator> {
    Arc::new(
        MemoryMapBuilder::with_memory(64 << 20)
            .backing(Backing::RealMemory(HugePages::None))
            .nr_cpus(2)
            // A CMA area away from where the owned blocks are made.
            .cma("edges", 8192..9216)
            .build()
            .unwrap(),
    )
}

#[test]
fn every_state_changing_pfn_call_refuses_every_owned_kind_and_changes_nothing() {
    let mut checked = 0;
    for call in PFN_CALLS {
        let (expect_owned, may_succeed) = match call.on_owned {
            OnOwnedBlock::RefusedAsOwned => (true, false),
            OnOwnedBlock::RefusedAsNotFree => (false, false),
            OnOwnedBlock::LeftAlone => (false, true),
            OnOwnedBlock::ReadsOnly | OnOwnedBlock::Output | OnOwnedBlock::Exempt(_) => continue,
        };
        let apply = dispatch(call.name)
            .unwrap_or_else(|| panic!("{} changes state but has no entry in this test's dispatch table", call.name));
        for kind in OwnedKind::ALL {
            let mm = map();
            let before = Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages();
            with_owned(&mm, kind, |block| {
                let last = Pfn(block.pfn.0 + block.nr_pages - 1);
                for pfn in [block.pfn, last] {
                    // A page a handle owns must say so; another page of
                    // the block (inside a block, not its head) is refused
                    // as such.
                    let owned_page = Blocks::new(&mm).page_owner(pfn).is_some();
                    let was = snapshot(&mm, block);
                    let got = apply(&Target { mm: &mm, block, pfn });
                    let is = snapshot(&mm, block);
                    let what = format!("{} on {kind:?} (pfn {pfn}, block {block:?})", call.name);
                    match &got {
                        Ok(()) if may_succeed => {}
                        Ok(()) => panic!("{what}: accepted"),
                        Err(e) if expect_owned && owned_page => {
                            assert!(e.contains("Owned"), "{what}: refused as {e}, not Owned")
                        }
                        Err(_) => {}
                    }
                    assert_eq!(was, is, "{what}: refused ({got:?}) but changed the block");
                }
            });
            Cpus::new(&mm).drain_all_pages();
            assert_eq!(
                Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages(),
                before,
                "{} on {kind:?}: pages lost",
                call.name
            );
            Report::new(&mm).check_invariants().unwrap_or_else(|e| panic!("{} on {kind:?}: {e:?}", call.name));
            checked += 1;
        }
    }
    assert!(checked >= 20 * OwnedKind::ALL.len(), "only {checked} call-kind pairs checked");
}

#[test]
fn a_poisoned_owned_block_stays_its_owners() {
    // `memory_failure` is exempt (hardware reports a frame whoever holds
    // it): the owner sees the poison and its free takes the page offline.
    for kind in OwnedKind::ALL {
        let mm = map();
        with_owned(&mm, kind, |block| {
            mm.memory_failure(block.pfn).unwrap();
            assert!(Blocks::new(&mm).page_owner(block.pfn).is_some(), "{kind:?}: still owned");
        });
        Report::new(&mm).check_invariants().unwrap_or_else(|e| panic!("{kind:?}: {e:?}"));
    }
}
