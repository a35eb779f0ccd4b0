//! End-to-end tests that no command overwrites a file it was given to
//! read: `convert`, `zram train-dict` and `replay --plot` (and `--cache`)
//! refuse an output that is an input by any route (the same path, `./`,
//! `..`, absolute against relative, a symbolic link, a hard link), before
//! any work, naming both paths, with a non-zero exit and the input's bytes
//! unchanged. Also: `--plot` into a missing directory fails before the
//! replay, the text report's event counts add up when events were
//! dropped, and `train-dict` shows progress on a terminal only. Every file
//! lives in a `tempfile` directory.

use std::path::Path;
use std::process::{Command, Output};

fn mmkit_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mmkit")).current_dir(dir).args(args).output().expect("the mmkit binary runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A `perf script` text of 3 allocations, their frees, and one free of an
/// order mmkit does not have (dropped by the replay).
fn perf_trace() -> String {
    let mut t = String::from("# perf script output\n");
    for (i, rest) in [
        "mm_page_alloc: page=0x1 pfn=0x200000 order=0 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE",
        "mm_page_alloc: page=0x1 pfn=0x200001 order=0 migratetype=1 gfp_flags=GFP_HIGHUSER_MOVABLE",
        "mm_page_alloc: page=0x1 pfn=0x200004 order=2 migratetype=0 gfp_flags=GFP_KERNEL",
        "mm_page_free: page=0x1 pfn=0x200000 order=0",
        "mm_page_free: page=0x1 pfn=0x400000 order=11",
    ]
    .iter()
    .enumerate()
    {
        t.push_str(&format!("  tar  2536 [000] 100.{:06}: kmem:{rest}\n", i + 1));
    }
    t
}

/// 64 pages of text that compresses but is not same-filled: training data.
fn training_data() -> Vec<u8> {
    let mut data = Vec::new();
    let mut i = 0u64;
    while data.len() < 64 * 4096 {
        data.extend_from_slice(format!("line {i}: key=value{} flag={}\n", i * 7 % 13, i % 3 == 0).as_bytes());
        i += 1;
    }
    data.truncate(64 * 4096);
    data
}

/// Runs `args` in `dir` and checks the refusal: non-zero exit, a message
/// naming `out` and `input` as given, `file`'s bytes as before, and no
/// new file in `dir` (no temporary left either).
fn assert_refused(dir: &Path, args: &[&str], out: &str, input: &str, file: &Path) {
    let before = std::fs::read(file).unwrap();
    let entries_before = std::fs::read_dir(dir).unwrap().count();
    let run = mmkit_in(dir, args);
    let err = stderr(&run);
    assert!(!run.status.success(), "{args:?} succeeded; stdout: {}", stdout(&run));
    assert_eq!(run.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(&format!("output {out} ")), "{args:?} does not name the output {out}: {err}");
    assert!(err.contains(&format!("input {input}")), "{args:?} does not name the input {input}: {err}");
    assert_eq!(std::fs::read(file).unwrap(), before, "{args:?} changed the input");
    assert_eq!(std::fs::read_dir(dir).unwrap().count(), entries_before, "{args:?} left a file");
}

#[test]
fn convert_refuses_an_output_that_is_its_input_by_any_route() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let trace = dir.join("t.txt");
    std::fs::write(&trace, perf_trace()).unwrap();
    std::fs::create_dir(dir.join("sub")).unwrap();
    std::os::unix::fs::symlink("t.txt", dir.join("link")).unwrap();
    std::fs::hard_link(&trace, dir.join("hard")).unwrap();
    let abs = trace.to_str().unwrap();
    for out in ["t.txt", "./t.txt", "sub/../t.txt", abs, "link", "hard"] {
        assert_refused(dir, &["convert", "t.txt", out], out, "t.txt", &trace);
    }
    assert_refused(dir, &["convert", abs, "t.txt"], "t.txt", abs, &trace);
    assert_refused(dir, &["convert", "link", "hard"], "hard", "link", &trace);
    // The default output beside the trace, when it is the trace itself.
    std::os::unix::fs::symlink("t.txt", dir.join("t.txt.mmkt")).unwrap();
    assert_refused(dir, &["convert", "t.txt"], "t.txt.mmkt", "t.txt", &trace);
    std::fs::remove_file(dir.join("t.txt.mmkt")).unwrap();
    // Another file is written, and says what it dropped.
    let ok = mmkit_in(dir, &["convert", "t.txt", "t.mmkt"]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    assert!(stdout(&ok).contains("1 events of an order above 10 dropped"), "{}", stdout(&ok));
    assert!(std::fs::metadata(dir.join("t.mmkt")).unwrap().len() > 0);
    assert_eq!(std::fs::read(&trace).unwrap(), perf_trace().as_bytes());
}

#[test]
fn convert_into_a_missing_directory_fails_before_reading() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("t.txt"), perf_trace()).unwrap();
    let out = mmkit_in(d.path(), &["convert", "t.txt", "missing/dir/t.mmkt"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("missing/dir") && !err.contains("Os {"), "{err}");
}

#[test]
fn train_dict_refuses_an_output_that_is_an_input_by_any_route() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let data = dir.join("data");
    std::fs::write(&data, training_data()).unwrap();
    std::fs::create_dir(dir.join("sub")).unwrap();
    std::os::unix::fs::symlink("data", dir.join("link")).unwrap();
    std::fs::hard_link(&data, dir.join("hard")).unwrap();
    let abs = data.to_str().unwrap();
    for out in ["data", "./data", "sub/../data", abs, "link", "hard"] {
        assert_refused(dir, &["zram", "train-dict", "--out", out, "data"], out, "data", &data);
    }
    // Among several inputs, and through an input that is a link.
    std::fs::write(dir.join("other"), training_data()).unwrap();
    assert_refused(dir, &["zram", "train-dict", "--out", "hard", "other", "link"], "hard", "link", &data);
    // A file under an input directory is an input too.
    let tree = dir.join("tree");
    std::fs::create_dir(&tree).unwrap();
    let inner = tree.join("pages");
    std::fs::write(&inner, training_data()).unwrap();
    assert_refused(dir, &["zram", "train-dict", "--out", "tree/pages", "tree"], "tree/pages", "tree/pages", &inner);
    // A new file is written; the report speaks English; nothing on stderr
    // when it is not a terminal.
    let ok = mmkit_in(dir, &["zram", "train-dict", "--size", "4K", "--out", "d.dict", "data", "other"]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    let text = stdout(&ok);
    assert!(text.contains("every 2nd page") && !text.contains("2th"), "{text}");
    assert_eq!(stderr(&ok), "", "progress only on a terminal");
    assert_eq!(std::fs::read(&data).unwrap(), training_data());
}

#[test]
fn train_dict_into_a_missing_directory_fails_before_training() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("data"), training_data()).unwrap();
    let out = mmkit_in(d.path(), &["zram", "train-dict", "--out", "missing/dir/d.dict", "data"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("missing/dir") && !err.contains("Os {"), "{err}");
}

#[test]
fn replay_plots_refuse_to_overwrite_the_trace_by_any_route() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    // The trace's own name is a plot's name.
    let trace = dir.join("r-free-by-order.png");
    std::fs::write(&trace, perf_trace()).unwrap();
    let t = "r-free-by-order.png";
    assert_refused(dir, &["replay", t, "--plot", "r"], t, t, &trace);
    assert_refused(dir, &["replay", t, "--plot", "./r"], "./r-free-by-order.png", t, &trace);
    std::fs::create_dir(dir.join("sub")).unwrap();
    assert_refused(dir, &["replay", t, "--plot", "sub/../r"], "sub/../r-free-by-order.png", t, &trace);
    // The second plot, through a symbolic link and a hard link.
    std::os::unix::fs::symlink(t, dir.join("s-pageblocks.png")).unwrap();
    assert_refused(dir, &["replay", t, "--plot", "s"], "s-pageblocks.png", t, &trace);
    std::fs::hard_link(&trace, dir.join("h-free-by-order.png")).unwrap();
    assert_refused(dir, &["replay", t, "--plot", "h"], "h-free-by-order.png", t, &trace);
    // --compare's plot.
    std::fs::hard_link(&trace, dir.join("c-compare.png")).unwrap();
    assert_refused(dir, &["replay", t, "--compare", "--plot", "c"], "c-compare.png", t, &trace);
    // --cache's copy is read too.
    std::fs::write(dir.join("u.txt"), perf_trace()).unwrap();
    let ok = mmkit_in(dir, &["replay", "u.txt", "--cache"]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    let cache = dir.join("u.txt.mmkt");
    std::fs::hard_link(&cache, dir.join("k-pageblocks.png")).unwrap();
    assert_refused(dir, &["replay", "u.txt", "--cache", "--plot", "k"], "k-pageblocks.png", "u.txt.mmkt", &cache);
    // Plots elsewhere are written.
    let ok = mmkit_in(dir, &["replay", t, "--plot", "sub/p"]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    for name in ["sub/p-free-by-order.png", "sub/p-pageblocks.png"] {
        let png = std::fs::read(dir.join(name)).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{name} is a PNG");
    }
    assert_eq!(std::fs::read(&trace).unwrap(), perf_trace().as_bytes());
}

#[test]
fn replay_cache_never_replaces_the_trace() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    let trace = dir.join("v.txt");
    std::fs::write(&trace, perf_trace()).unwrap();
    // The cache's name is another path to the trace: read, not written.
    std::fs::hard_link(&trace, dir.join("v.txt.mmkt")).unwrap();
    let out = mmkit_in(dir, &["replay", "v.txt", "--cache"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("no cache written: the output v.txt.mmkt is the same file as the input v.txt"));
    assert_eq!(std::fs::read(&trace).unwrap(), perf_trace().as_bytes());
}

#[test]
fn plot_into_a_missing_directory_fails_before_the_replay() {
    let d = tempfile::tempdir().unwrap();
    // A trace without events: the replay itself would fail with its own
    // message, so this one shows that the plot's check comes first.
    std::fs::write(d.path().join("empty.txt"), "# perf script output\n").unwrap();
    std::fs::write(d.path().join("t.txt"), perf_trace()).unwrap();
    for trace in ["empty.txt", "t.txt"] {
        for extra in [&[][..], &["--compare"][..]] {
            let mut args = vec!["replay", trace, "--plot", "missing/dir/p"];
            args.extend_from_slice(extra);
            let out = mmkit_in(d.path(), &args);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(err.contains("--plot: missing/dir/p-") && err.contains("directory missing/dir"), "{err}");
            assert!(!err.contains("Os {") && !err.contains("Error("), "a debug dump: {err}");
            assert_eq!(stdout(&out), "");
        }
    }
    assert!(!d.path().join("missing").exists());
}

#[test]
fn text_report_counts_add_up_when_events_are_dropped() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("t.txt"), perf_trace()).unwrap();
    let out = mmkit_in(d.path(), &["replay", "t.txt"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let line = text.lines().find(|l| l.starts_with("trace: ")).unwrap();
    assert!(
        line.starts_with("trace: 5 events (3 allocs, 2 frees): 4 replayed, 1 dropped (1 of an order above 10);"),
        "{line}"
    );
    // Binary copy read with a limit: the rest is named too.
    assert!(mmkit_in(d.path(), &["convert", "t.txt", "t.mmkt"]).status.success());
    let out = mmkit_in(d.path(), &["replay", "t.mmkt", "--limit", "2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let line = text.lines().find(|l| l.starts_with("trace: ")).unwrap();
    assert!(line.starts_with("trace: 5 events (3 allocs, 2 frees): 2 replayed, 3 dropped (3 past --limit);"), "{line}");
    // Nothing dropped: the short form.
    let out = mmkit_in(d.path(), &["replay", "t.txt", "--limit", "3"]);
    let text = stdout(&out);
    let line = text.lines().find(|l| l.starts_with("trace: ")).unwrap();
    assert!(line.starts_with("trace: 3 events replayed (3 allocs, 0 frees);"), "{line}");
}

/// `train-dict` on a large input draws its progress when stderr is a
/// terminal (run under util-linux `script`, which gives it one; skipped
/// without it) and says nothing on stderr otherwise.
#[test]
fn train_dict_progress_only_on_a_terminal() {
    let d = tempfile::tempdir().unwrap();
    // 64 MiB, sparse: large enough for progress, cheap to sample.
    let big = std::fs::File::create(d.path().join("big")).unwrap();
    big.set_len(64 << 20).unwrap();
    std::fs::write(d.path().join("data"), training_data()).unwrap();
    let args = ["zram", "train-dict", "--size", "4K", "--out", "d.dict", "data", "big"];
    let quiet = mmkit_in(d.path(), &args);
    assert!(quiet.status.success(), "{}", stderr(&quiet));
    assert_eq!(stderr(&quiet), "");
    let script = Command::new("script").arg("--version").output();
    if !script.is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: no util-linux script to give mmkit a terminal");
        return;
    }
    std::fs::remove_file(d.path().join("d.dict")).unwrap();
    let command = format!("{} {} >/dev/null", env!("CARGO_BIN_EXE_mmkit"), args.join(" "));
    let tty = Command::new("script")
        .current_dir(d.path())
        .args(["-q", "-e", "-c", &command, "/dev/null"])
        .output()
        .expect("script runs");
    assert!(tty.status.success(), "{}", stderr(&tty));
    let shown = String::from_utf8_lossy(&tty.stdout);
    assert!(shown.contains("sampling") && shown.contains("MiB"), "no progress on a terminal: {shown:?}");
    assert!(d.path().join("d.dict").exists());
}
