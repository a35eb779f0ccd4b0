//! Guards the layer order of `crates/mmkit/src`: every `crate::` path in a
//! file names something of its own layer or of a layer below, only
//! `page_alloc` gives `PageAllocator` inherent methods (the layers above it
//! are views that borrow the allocator, `Contig` and `Report`), `unsafe`
//! appears only in the OS layer `sys` and the memory layer's `rawmem` (and
//! in the declarations of unsafe trait impls: the `x86_64` adapter's, and
//! the descriptor's `Zeroable` in `mem/page.rs`), and
//! the target predicate that picks the OS layer's implementation is
//! written in `sys/mod.rs` alone.
//!
//! Layers, bottom up (`docs/architecture.md`):
//! `types` → `sys` → `mem` → `zone` → `pcp` → `page_alloc` → `contig` →
//! `memmap` and `report` → `frames` (the `x86_64` adapter). Names the crate root re-exports count as the
//! layer they come from; items defined in `lib.rs` itself are shared types.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Folder (or root file) → rank. Equal ranks may import each other.
const LAYERS: &[(&str, u32)] = &[
    ("types", 0),
    ("sys", 1),
    ("mem", 2),
    ("zone", 3),
    ("pcp", 4),
    ("page_alloc", 5),
    ("contig", 6),
    ("memmap", 7),
    ("report", 7),
    ("frames", 8),
];

/// Items `lib.rs` defines itself (shared types, rank 0).
const ROOT_ITEMS: &[&str] = &["Pfn", "MAX_NUMNODES", "MAX_NR_CPUS"];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `path` relative to the crate's `src`.
fn shown(path: &Path) -> String {
    path.strip_prefix(src_dir()).unwrap_or(path).display().to_string()
}

fn rank_of_module(name: &str) -> Option<u32> {
    LAYERS.iter().find(|(layer, _)| *layer == name).map(|&(_, rank)| rank)
}

/// The code of a file up to its unit tests (a `#[cfg(test)]` or
/// `#[cfg(all(test, ...))]` module may use anything, as the crate's
/// integration tests do).
fn non_test_code(text: &str) -> String {
    let code = code_of(text);
    // The first `#[cfg(test)]` or `#[cfg(all(test, ...))]` line that a
    // `mod` follows (the latter also gates test hooks inside functions).
    let mut first = None;
    let mut at = 0;
    for line in code.split_inclusive('\n') {
        let next = &code[at + line.len()..];
        let gate = line.starts_with("#[cfg(test)]") || line.starts_with("#[cfg(all(test, ");
        if gate && next.starts_with("mod ") {
            first = Some(at);
            break;
        }
        at += line.len();
    }
    match first {
        Some(at) => code[..at].to_string(),
        None => code,
    }
}

/// The code of a file without comments (line comments and doc comments;
/// the crate uses no block comments) and without string literals' contents.
fn code_of(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let mut in_str = false;
        let mut prev = ' ';
        let mut kept = String::new();
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if !in_str && c == '/' && chars.get(i + 1) == Some(&'/') {
                break;
            }
            if c == '"' && prev != '\\' {
                in_str = !in_str;
            }
            if !in_str {
                kept.push(c);
            }
            prev = c;
            i += 1;
        }
        out.push_str(&kept);
        out.push('\n');
    }
    out
}

/// First path segments named after `crate::`, including each member of a
/// `crate::{a, b::c}` group.
fn crate_paths(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            let mut depth = 1;
            let mut end = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = i;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let mut depth = 0;
            let mut start = 0;
            let inner = &group[..end];
            for (i, c) in inner.char_indices().chain(std::iter::once((inner.len(), ','))) {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        let item = inner[start..i].trim();
                        let first: String = item.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                        if !first.is_empty() {
                            found.push(first);
                        }
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            rest = &group[end..];
        } else {
            let first: String = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            found.push(first);
            rest = after;
        }
    }
    found
}

/// Name re-exported by `lib.rs` → rank of the layer it comes from.
fn root_exports(lib: &str) -> HashMap<String, u32> {
    let code = code_of(lib);
    let mut map: HashMap<String, u32> = ROOT_ITEMS.iter().map(|n| (n.to_string(), 0)).collect();
    for stmt in code.split(';') {
        let stmt = stmt.trim();
        let Some(path) = stmt.strip_prefix("pub use ") else { continue };
        let layer: String = path.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        let Some(rank) = rank_of_module(&layer) else { continue };
        let names: Vec<&str> = match path.find('{') {
            Some(open) => path[open + 1..path.rfind('}').unwrap()].split(',').collect(),
            None => vec![path.rsplit("::").next().unwrap()],
        };
        for name in names {
            let name = name.trim().rsplit("::").next().unwrap().trim();
            if !name.is_empty() {
                map.insert(name.to_string(), rank);
            }
        }
    }
    map
}

/// Each source file with its layer name (`lib.rs` is the root, `None`).
fn files_by_layer() -> Vec<(PathBuf, Option<String>)> {
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let rel = path.strip_prefix(&src).unwrap();
            let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
            let layer = if rel == Path::new("lib.rs") { None } else { Some(first.trim_end_matches(".rs").to_string()) };
            (path, layer)
        })
        .collect()
}

#[test]
fn every_file_belongs_to_a_layer() {
    for (path, layer) in files_by_layer() {
        if let Some(layer) = layer {
            assert!(rank_of_module(&layer).is_some(), "{} is in no layer: add it to a layer folder", shown(&path));
        }
    }
}

#[test]
fn imports_only_run_downward() {
    let lib = fs::read_to_string(src_dir().join("lib.rs")).unwrap();
    let exports = root_exports(&lib);
    let mut upward = Vec::new();
    for (path, layer) in files_by_layer() {
        let Some(layer) = layer else { continue };
        let Some(own) = rank_of_module(&layer) else { continue };
        let code = non_test_code(&fs::read_to_string(&path).unwrap());
        for name in crate_paths(&code) {
            let rank = rank_of_module(&name).or_else(|| exports.get(&name).copied());
            match rank {
                Some(rank) if rank <= own => {}
                Some(rank) => upward.push(format!("{}: crate::{name} (rank {rank} above {own})", shown(&path))),
                None => upward.push(format!("{}: crate::{name} is not a known layer or re-export", shown(&path))),
            }
        }
    }
    assert!(upward.is_empty(), "imports that run upward or are unknown:\n{}", upward.join("\n"));
}

/// Lines of `code` (comments already stripped) that open an inherent impl
/// of the type named `ty`: `impl Ty {`, `impl<..> Ty {`, `impl path::Ty`
/// followed by `where` or generic arguments. Trait impls (`impl T for Ty`)
/// do not count: they add no method only the type's own layer may add.
fn inherent_impl_lines(code: &str, ty: &str) -> Vec<usize> {
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let mut lines = Vec::new();
    let mut at = 0;
    while let Some(pos) = code[at..].find("impl") {
        let start = at + pos;
        at = start + "impl".len();
        let word_before = code[..start].chars().next_back().is_some_and(is_word);
        let mut rest = &code[at..];
        if word_before || rest.starts_with(is_word) {
            continue;
        }
        rest = rest.trim_start();
        if rest.starts_with('<') {
            let mut depth = 0;
            let mut end = None;
            let mut prev = ' ';
            for (i, c) in rest.char_indices() {
                match c {
                    '<' => depth += 1,
                    // `->` in a bound like `F: Fn() -> u8` closes nothing.
                    '>' if prev != '-' => {
                        depth -= 1;
                        if depth == 0 {
                            end = Some(i + 1);
                            break;
                        }
                    }
                    _ => {}
                }
                prev = c;
            }
            let Some(end) = end else { continue };
            rest = rest[end..].trim_start();
        }
        let path: String = rest.chars().take_while(|&c| is_word(c) || c == ':').collect();
        let after = rest[path.len()..].trim_start();
        let opens_block = after.starts_with('{') || after.starts_with('<') || after.starts_with("where");
        if path.rsplit("::").next() == Some(ty) && opens_block {
            lines.push(code[..start].matches('\n').count() + 1);
        }
    }
    lines
}

#[test]
fn only_page_alloc_adds_methods_to_the_allocator() {
    let mut outside = Vec::new();
    for (path, layer) in files_by_layer() {
        if layer.as_deref() == Some("page_alloc") {
            continue;
        }
        let code = code_of(&fs::read_to_string(&path).unwrap());
        for line in inherent_impl_lines(&code, "PageAllocator") {
            outside.push(format!("{}:{line}", shown(&path)));
        }
    }
    assert!(
        outside.is_empty(),
        "inherent `impl PageAllocator` outside src/page_alloc/ (a layer above page_alloc is a view that borrows \
         the allocator, as `Contig` and `Report` are):\n{}",
        outside.join("\n")
    );
}

#[test]
fn the_impl_checker_sees_inherent_impls_only() {
    let found = |text: &str| inherent_impl_lines(&code_of(text), "PageAllocator");
    assert_eq!(found("impl PageAllocator {\n}\n"), [1]);
    assert_eq!(found("\nimpl<'a> PageAllocator {}"), [2]);
    assert_eq!(found("impl<F: Fn() -> u8>\n    crate::PageAllocator\nwhere F: Copy {}"), [1]);
    assert_eq!(found("impl page_alloc::PageAllocator{}"), [1]);
    assert!(found("impl PageSource for &PageAllocator {}").is_empty());
    assert!(found("impl<'a> From<&'a PageAllocator> for Contig<'a> {}").is_empty());
    assert!(found("// impl PageAllocator {\n/// impl PageAllocator {}").is_empty());
    assert!(found("impl PageAllocatorExt {}\nfn simpl(PageAllocator) {}").is_empty());
    assert!(found("let s = \"impl PageAllocator {\";").is_empty());
}

#[test]
fn unsafe_lives_only_in_sys_and_rawmem() {
    for (path, _) in files_by_layer() {
        // `frames.rs` implements the `x86_64` crate's unsafe traits: a
        // promise about the frames, with no unsafe operation behind it.
        let in_sys = path.strip_prefix(src_dir().join("sys")).is_ok();
        if in_sys || path.ends_with("mem/rawmem.rs") || path.ends_with("src/frames.rs") {
            continue;
        }
        let mut code = code_of(&fs::read_to_string(&path).unwrap());
        // The descriptor's layout promises `rawmem`'s `Zeroable` beside
        // the layout: a declaration, no unsafe operation.
        if path.ends_with("mem/page.rs") {
            code = code.replace("unsafe impl crate::mem::rawmem::Zeroable for PageDesc {}", "");
        }
        let uses_unsafe = code.split(|c: char| !(c.is_alphanumeric() || c == '_')).any(|word| word == "unsafe");
        // `deny(unsafe_code)` attributes name the lint, not the keyword.
        let only_lint = code.lines().filter(|l| l.contains("unsafe")).all(|l| l.contains("unsafe_code"));
        assert!(!uses_unsafe || only_lint, "{} uses unsafe outside sys/ and mem/rawmem.rs", shown(&path));
    }
}

#[test]
fn the_checker_sees_groups_and_plain_paths() {
    let code = code_of("use crate::{zone::{Zone, ZoneState}, Pfn};\nlet x = crate::pcp::f(); // crate::report\n");
    assert_eq!(crate_paths(&code), ["zone", "Pfn", "pcp"]);
    let exports = root_exports("pub use page_alloc::{PageAllocator, X};\npub use types::gfp::Gfp;\n");
    assert_eq!(exports.get("PageAllocator"), Some(&5));
    assert_eq!(exports.get("Gfp"), Some(&0));
}

/// The target predicate of the OS layer (`target_os`, `target_arch`) is
/// written in `sys/` only: every other file asks `sys` at run time or
/// holds a type that exists on every target.
#[test]
fn the_target_is_named_only_in_sys() {
    let mut outside = Vec::new();
    for (path, _) in files_by_layer() {
        if path.strip_prefix(src_dir().join("sys")).is_ok() {
            continue;
        }
        let code = code_of(&fs::read_to_string(&path).unwrap());
        for (n, line) in code.lines().enumerate() {
            if line.contains("target_os") || line.contains("target_arch") {
                outside.push(format!("{}:{}", shown(&path), n + 1));
            }
        }
    }
    assert!(outside.is_empty(), "a target predicate outside src/sys/ (ask `sys` instead):\n{}", outside.join("\n"));
}
