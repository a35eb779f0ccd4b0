//! The import graph of every crate of the workspace has no cycle: in each
//! module, the files (or folders) beside each other import one another in
//! one direction only. `crates/mmkit/tests/layers.rs` adds the page
//! allocator's own order of layers on top.
//!
//! What counts as an import: a `crate::` or `super::` path in a file's
//! code (comments, string literals and unit-test modules left out). An
//! import from a file to one of its ancestors or descendants (a child
//! using its parent's items, a `mod.rs` re-exporting a child's) is the
//! module tree itself, not an edge. Every other import is lifted to the
//! two siblings under the modules' lowest common ancestor, and those
//! siblings must form a graph without cycles: so `a/x.rs` using
//! `crate::b::y` and `b/z.rs` using `crate::a` is the cycle `a → b → a`.
//!
//! Run: `cargo test -p mmkit-testkit --test workspace_layers`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `members` of the workspace's `Cargo.toml`.
fn members(root: &Path) -> Vec<String> {
    let manifest = fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let start = manifest.find("members").expect("a workspace manifest");
    let list = &manifest[start..];
    let list = &list[list.find('[').unwrap() + 1..list.find(']').unwrap()];
    list.split(',').map(|m| m.trim().trim_matches('"').to_string()).filter(|m| !m.is_empty()).collect()
}

/// The code of a file without comments, string literals' contents and
/// unit-test modules (`#[cfg(test)]` or `#[cfg(all(test, …))]` followed by
/// `mod`).
fn code_of(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        let gate = trimmed.starts_with("#[cfg(test)]") || trimmed.starts_with("#[cfg(all(test, ");
        if gate && lines.peek().is_some_and(|next| next.trim_start().starts_with("mod ")) {
            break;
        }
        let mut in_str = false;
        let mut prev = ' ';
        let chars: Vec<char> = line.chars().collect();
        for (i, &c) in chars.iter().enumerate() {
            if !in_str && c == '/' && chars.get(i + 1) == Some(&'/') {
                break;
            }
            if c == '"' && prev != '\\' {
                in_str = !in_str;
            }
            if !in_str {
                out.push(c);
            }
            prev = c;
        }
        out.push('\n');
    }
    out
}

/// A file's module path (`["bench", "harness"]` for `src/bench/harness.rs`;
/// empty for the crate root), or `None` for a file only tests include.
fn module_of(src: &Path, file: &Path) -> Option<Vec<String>> {
    let rel = file.strip_prefix(src).ok()?;
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop()?;
    if last == "tests.rs" || parts.iter().any(|p| p == "tests") {
        return None;
    }
    match last.as_str() {
        "lib.rs" | "main.rs" | "mod.rs" => {}
        name => parts.push(name.trim_end_matches(".rs").to_string()),
    }
    Some(parts)
}

/// The module paths a file's code names through `crate::` or `super::`,
/// each group member (`crate::{a, b::c}`) apart.
fn imports(code: &str, own: &[String]) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let word = |s: &str| -> String { s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect() };
    for (at, _) in code.match_indices("crate::").chain(code.match_indices("super::")) {
        if code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        // The module the path starts from.
        let mut base: Vec<String> = Vec::new();
        let mut rest = &code[at..];
        if rest.starts_with("crate::") {
            rest = &rest["crate::".len()..];
        } else {
            // `super` is the module above the file's (a `mod.rs` file's
            // module is its folder).
            base = own.to_vec();
            while let Some(after) = rest.strip_prefix("super::") {
                base.pop();
                rest = after;
            }
        }
        let mut paths = Vec::new();
        collect_paths(rest, &base, &word, &mut paths);
        found.extend(paths);
    }
    found
}

/// Appends the paths `rest` names below `base` (a `{…}` group expanded).
fn collect_paths(rest: &str, base: &[String], word: &dyn Fn(&str) -> String, out: &mut Vec<Vec<String>>) {
    let mut path = base.to_vec();
    let mut rest = rest;
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' | ',' if depth == 1 => {
                        let item = group[start..i].trim();
                        if !item.is_empty() {
                            collect_paths(item, &path, word, out);
                        }
                        start = i + 1;
                        if c == '}' {
                            break;
                        }
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            return;
        }
        let name = word(rest);
        if name.is_empty() || name == "self" {
            break;
        }
        path.push(name.clone());
        rest = &rest[name.len()..];
        match rest.strip_prefix("::") {
            Some(after) => rest = after,
            None => break,
        }
    }
    out.push(path);
}

/// One crate's files, each with its module path and code.
fn crate_files(dir: &Path) -> Vec<(Vec<String>, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = fs::read_dir(dir) else { return };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let src = dir.join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    files.sort();
    files
        .into_iter()
        .filter_map(|file| {
            let module = module_of(&src, &file)?;
            Some((module, code_of(&fs::read_to_string(&file).unwrap())))
        })
        .collect()
}

/// The sibling edges of one crate: (parent module, from child, to child).
fn sibling_edges(files: &[(Vec<String>, String)]) -> BTreeSet<(Vec<String>, String, String)> {
    let modules: BTreeSet<&Vec<String>> = files.iter().map(|(m, _)| m).collect();
    let mut edges = BTreeSet::new();
    for (own, code) in files {
        for mut target in imports(code, own) {
            // The deepest module the path names (the rest are items).
            while !target.is_empty() && !modules.contains(&target) {
                target.pop();
            }
            let common = own.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common == own.len() || common == target.len() {
                continue; // an ancestor or a descendant: the module tree
            }
            edges.insert((own[..common].to_vec(), own[common].clone(), target[common].clone()));
        }
    }
    edges
}

/// The cycles among siblings: each a sorted set of members under one parent.
fn cycles(edges: &BTreeSet<(Vec<String>, String, String)>) -> Vec<(Vec<String>, Vec<String>)> {
    let mut by_parent: BTreeMap<&Vec<String>, BTreeMap<&str, Vec<&str>>> = BTreeMap::new();
    for (parent, from, to) in edges {
        by_parent.entry(parent).or_default().entry(from).or_default().push(to);
    }
    let mut found = Vec::new();
    for (parent, graph) in by_parent {
        // Two members are in one cycle when each reaches the other.
        let reach = |from: &str| -> BTreeSet<String> {
            let mut seen = BTreeSet::new();
            let mut stack = vec![from.to_string()];
            while let Some(node) = stack.pop() {
                for next in graph.get(node.as_str()).into_iter().flatten() {
                    if seen.insert(next.to_string()) {
                        stack.push(next.to_string());
                    }
                }
            }
            seen
        };
        let nodes: BTreeSet<&str> = graph.keys().copied().collect();
        let reaches: BTreeMap<&str, BTreeSet<String>> = nodes.iter().map(|&n| (n, reach(n))).collect();
        let mut done = BTreeSet::new();
        for &node in &nodes {
            if done.contains(node) || !reaches[node].contains(node) {
                continue;
            }
            let members: Vec<String> = nodes
                .iter()
                .filter(|&&other| reaches[node].contains(other) && reaches.get(other).is_some_and(|r| r.contains(node)))
                .map(|s| s.to_string())
                .collect();
            done.extend(members.iter().cloned());
            found.push((parent.clone(), members));
        }
    }
    found
}

fn describe(parent: &[String], members: &[String]) -> String {
    let prefix = if parent.is_empty() { String::new() } else { format!("{}::", parent.join("::")) };
    members.iter().map(|m| format!("{prefix}{m}")).collect::<Vec<_>>().join(" ↔ ")
}

#[test]
fn no_crate_has_an_import_cycle() {
    let root = workspace_root();
    let mut found = Vec::new();
    for member in members(&root) {
        let files = crate_files(&root.join(&member));
        assert!(!files.is_empty(), "{member}: no source files found");
        for (parent, cycle) in cycles(&sibling_edges(&files)) {
            found.push(format!("{member}: {}", describe(&parent, &cycle)));
        }
    }
    assert!(found.is_empty(), "files that import each other (a cycle between siblings):\n{}", found.join("\n"));
}

/// The checker on small crates made up here: it must see a cycle through
/// a group import, a `super::` path and a folder, and no cycle where a
/// child only uses its parent.
#[test]
fn the_checker_finds_cycles_and_only_cycles() {
    let file = |module: &[&str], _is_mod: bool, text: &str| {
        (module.iter().map(|s| s.to_string()).collect::<Vec<_>>(), code_of(text))
    };
    let crate_with = |files: Vec<(Vec<String>, String)>| {
        cycles(&sibling_edges(&files)).into_iter().map(|(p, c)| describe(&p, &c)).collect::<Vec<_>>()
    };
    // A parent and its children, children using the parent: no cycle.
    let tree = vec![
        file(&[], true, "mod a; mod b; pub use a::X;"),
        file(&["a"], false, "use crate::{b::Y, Z};"),
        file(&["b"], false, "use super::Z; // crate::a::X\nlet s = \"crate::a\";"),
    ];
    assert!(crate_with(tree).is_empty());
    // A group import one way, a super path the other: a cycle.
    let cycle = vec![
        file(&[], true, "mod a; mod b;"),
        file(&["a"], false, "use crate::{b::{Y, W}, Z};"),
        file(&["b"], false, "fn f() { super::a::X::new(); }"),
    ];
    assert_eq!(crate_with(cycle), ["a ↔ b"]);
    // Across folders: bench/harness.rs and bench/summary.rs, and a folder
    // that imports its sibling's parent.
    let folders = vec![
        file(&["bench"], true, "mod harness; mod summary;"),
        file(&["bench", "harness"], false, "use super::summary::Row;"),
        file(&["bench", "summary"], false, "use crate::bench::harness::Case;"),
        file(&["zram", "serve"], false, "use crate::replay::X;"),
        file(&["replay"], true, ""),
        file(&["replay", "engine"], false, "use crate::zram::Y;"),
        file(&["zram"], true, ""),
    ];
    assert_eq!(crate_with(folders), ["replay ↔ zram", "bench::harness ↔ bench::summary"]);
    // Unit-test modules may use anything.
    let tests = vec![
        file(&["a"], false, "use crate::b::Y;\n#[cfg(test)]\nmod tests {\n    use crate::a::X;\n}"),
        file(&["b"], false, "#[cfg(test)]\nmod tests {\n    use crate::a::X;\n}"),
    ];
    assert!(crate_with(tests).is_empty());
}
