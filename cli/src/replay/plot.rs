//! `--plot PREFIX`: two PNGs of a replay with the `plotters` bitmap backend.
//!
//! - `PREFIX-free-by-order.png`: free pages in blocks of each order over
//!   the replay (one line per order, log scale, from the samples).
//! - `PREFIX-pageblocks.png`: the end state, one cell per pageblock in
//!   address order (left to right, top to bottom), coloured by migratetype,
//!   grey when no replayed page is live in it, with a black dot when it is
//!   mixed (holds live pages of another mobility than its type).
//!
//! Owns drawing only: it reads the report, the allocator and the engine and
//! must not change them. Text needs a TrueType font, looked up once at run
//! time in the system's font directories (no fontconfig or freetype: the
//! glyphs are drawn with `ab_glyph`); without one the same pictures are
//! drawn without captions, labels and legends.

use super::engine::{Engine, NR_ORDERS};
use super::metrics::pageblock_type;
use super::report::Report;
use super::ReplayArgs;
use mmkit::{MigrateType, PageAllocator};
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Colour of each migratetype, in `MigrateType` order.
const TYPE_COLOURS: [RGBColor; 6] = [
    RGBColor(214, 39, 40),   // Unmovable: red
    RGBColor(44, 160, 44),   // Movable: green
    RGBColor(31, 119, 180),  // Reclaimable: blue
    RGBColor(255, 127, 14),  // HighAtomic: orange
    RGBColor(148, 103, 189), // CMA: purple
    RGBColor(40, 40, 40),    // Isolate: near black
];
/// A pageblock without live pages.
const FREE_GREY: RGBColor = RGBColor(200, 200, 200);

/// Writes both PNGs; returns their paths' error text on failure.
///
/// # Errors
/// A file cannot be written or a drawing call fails.
pub fn write_all(prefix: &Path, report: &Report, mm: &PageAllocator, engine: &Engine<'_>) -> Result<(), String> {
    let text = fonts_work();
    free_by_order(&with_suffix(prefix, FREE_BY_ORDER), report, text)?;
    pageblocks(&with_suffix(prefix, PAGEBLOCKS), report, mm, engine, text)?;
    Ok(())
}

/// Suffixes of the files `--plot PREFIX` writes: two for a replay, one
/// more with `--compare` (drawn by `compare`).
pub const FREE_BY_ORDER: &str = "-free-by-order.png";
/// See [`FREE_BY_ORDER`].
pub const PAGEBLOCKS: &str = "-pageblocks.png";
/// See [`FREE_BY_ORDER`].
pub const COMPARE: &str = "-compare.png";

/// `prefix` with `suffix` appended to its last component.
pub fn with_suffix(prefix: &Path, suffix: &str) -> PathBuf {
    let mut name = prefix.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Checks, before a replay starts, that `--plot`'s files can be written
/// (`crate::paths::check_output`: their directory exists, none is a
/// directory, a block device or a socket) and that none of them is the
/// trace or its `--cache` copy.
///
/// # Errors
/// The message names the output and what it is, or the input.
pub fn check_outputs(args: &ReplayArgs) -> Result<(), String> {
    let Some(prefix) = &args.plot else { return Ok(()) };
    let suffixes: &[&str] = if args.compare { &[COMPARE] } else { &[FREE_BY_ORDER, PAGEBLOCKS] };
    let outputs: Vec<PathBuf> = suffixes.iter().map(|s| with_suffix(prefix, s)).collect();
    for out in &outputs {
        crate::paths::check_output(out).map_err(|e| format!("--plot: {e}"))?;
    }
    let cache = super::cache::cache_path(&args.trace);
    let inputs = [args.trace.as_path(), cache.as_path()];
    let inputs = if args.cache { &inputs[..] } else { &inputs[..1] };
    crate::paths::check_outputs(inputs.iter().copied(), outputs.iter().map(PathBuf::as_path))
}

/// A drawing area on an in-memory RGB picture.
pub(super) type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

/// What a drawing function returns.
pub(super) type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// Draws a `w`×`h` picture in memory with `draw` and writes it to `path`
/// as a PNG through `crate::paths::Output` (a file is renamed into place
/// when complete, so a failed write leaves no half picture under the final
/// name; a FIFO or a device is written through). Errors
/// are this module's own text (plotters' bitmap errors print a debug
/// dump).
///
/// # Errors
/// Drawing failed, or the file could not be written (the message names it).
pub(super) fn render_png(
    path: &Path,
    (w, h): (u32, u32),
    draw: impl FnOnce(&Area<'_>) -> DrawResult,
) -> Result<(), String> {
    let mut rgb = vec![0u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
        draw(&root).map_err(|e| format!("{}: drawing failed: {e}", path.display()))?;
        root.present().map_err(|_| format!("{}: drawing failed", path.display()))?;
    }
    // Encoded in memory (a few hundred KiB), then written at once.
    let mut png_bytes = Vec::new();
    (|| -> Result<(), png::EncodingError> {
        let mut encoder = png::Encoder::new(&mut png_bytes, w, h);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header()?;
        writer.write_image_data(&rgb)?;
        writer.finish()
    })()
    .map_err(|e| format!("{}: encoding failed: {e}", path.display()))?;
    let mut out = crate::paths::Output::create(path)?;
    std::io::Write::write_all(&mut out, &png_bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    out.finish().map(|_| ())
}

/// Whether text can be drawn: a system font was registered as
/// "sans-serif" (looked for on the first call only) and draws.
pub(super) fn fonts_work() -> bool {
    static WORKS: OnceLock<bool> = OnceLock::new();
    *WORKS.get_or_init(|| {
        let dirs: Vec<PathBuf> = FONT_DIRS.iter().map(PathBuf::from).collect();
        if !register_font(&font_candidates(&dirs)) {
            return false;
        }
        let mut buf = vec![0u8; 64 * 32 * 3];
        let root = BitMapBackend::with_buffer(&mut buf, (64, 32)).into_drawing_area();
        root.draw(&Text::new("0", (1, 1), ("sans-serif", 12).into_font())).is_ok()
    })
}

/// Where fonts are looked for: the system's and the local administrator's
/// font directories (where fontconfig looks by default; read here
/// without it).
const FONT_DIRS: [&str; 2] = ["/usr/share/fonts", "/usr/local/share/fonts"];
/// Sans-serif faces taken before any other TrueType file, best first.
const PREFERRED_FONTS: [&str; 4] =
    ["DejaVuSans.ttf", "LiberationSans-Regular.ttf", "FreeSans.ttf", "NotoSans-Regular.ttf"];
/// Directory levels searched below each of `FONT_DIRS` (distributions use
/// two or three: `truetype/dejavu/`).
const FONT_DEPTH: usize = 4;

/// The TrueType files under `dirs`: the preferred faces first, then the
/// others in path order (so the choice is the same on every run).
fn font_candidates(dirs: &[PathBuf]) -> Vec<PathBuf> {
    fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let path = entry.path();
            // A symlinked directory is not followed (no loops); a symlinked
            // file is read like any other.
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                if depth > 0 {
                    walk(&path, depth - 1, out);
                }
            } else if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("ttf")) {
                out.push(path);
            }
        }
    }
    let mut found = Vec::new();
    for dir in dirs {
        walk(dir, FONT_DEPTH, &mut found);
    }
    let rank = |p: &PathBuf| {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        PREFERRED_FONTS.iter().position(|&f| f == name).unwrap_or(PREFERRED_FONTS.len())
    };
    found.sort_by_key(rank); // stable: path order within a rank
    found
}

/// Registers the first of `candidates` that is a font with digits and
/// Latin letters as "sans-serif", and says whether one was.
fn register_font(candidates: &[PathBuf]) -> bool {
    for path in candidates {
        let Ok(bytes) = std::fs::read(path) else { continue };
        if !usable_font(&bytes) {
            continue;
        }
        // plotters keeps the font for the process's life; it is read once.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
            return true;
        }
    }
    false
}

/// Whether `bytes` are a font that has digits and Latin letters (not a
/// symbol or a script-only face).
fn usable_font(bytes: &[u8]) -> bool {
    use ab_glyph::Font;
    ab_glyph::FontRef::try_from_slice(bytes).is_ok_and(|font| "0a".chars().all(|c| font.glyph_id(c).0 != 0))
}

fn free_by_order(path: &Path, report: &Report, text: bool) -> Result<(), String> {
    render_png(path, (900, 480), |root| {
        root.fill(&WHITE)?;
        let samples = &report.samples;
        let last = samples.last().map_or(1, |s| s.event.max(1));
        let top = samples.iter().flat_map(|s| s.free_pages_by_order.iter().copied()).max().unwrap_or(1).max(2);
        let mut builder = ChartBuilder::on(root);
        if text {
            let title = format!("Free pages by order over the replay ({} mode, log scale)", report.mode);
            builder.caption(title, ("sans-serif", 20)).margin(10).x_label_area_size(40).y_label_area_size(60);
        } else {
            builder.margin(10);
        }
        // Free pages of an order can be 0; the log axis starts at 1 page.
        let mut chart = builder.build_cartesian_2d(0u64..last, (1f64..top as f64 * 2.0).log_scale())?;
        if text {
            chart.configure_mesh().x_desc("events replayed").y_desc("free pages in blocks of the order").draw()?;
        }
        for order in 0..NR_ORDERS {
            let colour = order_colour(order);
            let points = samples
                .iter()
                .map(|s| (s.event, (s.free_pages_by_order.get(order).copied().unwrap_or(0) as f64).max(1.0)));
            let drawn = chart.draw_series(LineSeries::new(points, colour.stroke_width(2)))?;
            if text {
                drawn
                    .label(format!("order {order}"))
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(2)));
            }
        }
        if text {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()?;
        }
        Ok(())
    })
}

/// Eleven distinguishable colours, order 0 to 10.
fn order_colour(order: usize) -> RGBColor {
    const COLOURS: [RGBColor; NR_ORDERS] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
        RGBColor(0, 0, 0),
    ];
    COLOURS[order.min(NR_ORDERS - 1)]
}

fn pageblocks(path: &Path, report: &Report, mm: &PageAllocator, engine: &Engine<'_>, text: bool) -> Result<(), String> {
    let pb_order = mm.geometry().pageblock_order;
    let first = ((report.zone_start_pfn - mm.start_pfn().0) >> pb_order) as usize;
    let count = (report.zone_pages >> pb_order).max(1) as usize;
    let cols = ((count as f64 * 2.0).sqrt().ceil() as usize).clamp(1, 1024);
    let rows = count.div_ceil(cols);
    let cell = (1024 / cols).clamp(1, 12) as u32;
    let legend = if text { 70 } else { 0 };
    let (w, h) = (cols as u32 * cell + 20, rows as u32 * cell + 20 + legend);
    render_png(path, (w, h), |root| {
        root.fill(&WHITE)?;
        let composition = engine.pageblock_composition();
        for i in 0..count {
            let block = first + i;
            let live = composition.get(block).copied().unwrap_or([0; 3]);
            let ty = pageblock_type(mm, block);
            let colour = match ty {
                _ if live.iter().all(|&n| n == 0) => FREE_GREY,
                Some(t) => TYPE_COLOURS[t as usize],
                None => WHITE,
            };
            let (x, y) = ((10 + (i % cols) as u32 * cell) as i32, (10 + (i / cols) as u32 * cell) as i32);
            let c = cell as i32;
            root.draw(&Rectangle::new([(x, y), (x + c - 1, y + c - 1)], colour.filled()))?;
            if super::metrics::is_mixed(&live, ty) && c >= 4 {
                let d = (c / 3).max(1);
                let m = c / 2;
                root.draw(&Rectangle::new(
                    [(x + m - d / 2, y + m - d / 2), (x + m + (d - 1) / 2, y + m + (d - 1) / 2)],
                    BLACK.filled(),
                ))?;
            }
        }
        if text {
            let y0 = (rows as u32 * cell + 24) as i32;
            let names = [
                (MigrateType::Unmovable.name(), TYPE_COLOURS[0]),
                (MigrateType::Movable.name(), TYPE_COLOURS[1]),
                (MigrateType::Reclaimable.name(), TYPE_COLOURS[2]),
                (MigrateType::HighAtomic.name(), TYPE_COLOURS[3]),
                ("no live page", FREE_GREY),
            ];
            let mut x = 10;
            for (name, colour) in names {
                root.draw(&Rectangle::new([(x, y0), (x + 12, y0 + 12)], colour.filled()))?;
                root.draw(&Text::new(name.to_string(), (x + 16, y0), ("sans-serif", 14).into_font()))?;
                x += 30 + 8 * name.len() as i32;
            }
            let caption = format!(
                "{} pageblocks of 2 MiB at the end ({} mode); dot = mixed ({}); unusable index (order 9) {:.3}",
                count, report.mode, report.final_state.sample.mixed_pageblocks, report.unusable_index_order9
            );
            root.draw(&Text::new(caption, (10, y0 + 24), ("sans-serif", 14).into_font()))?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn font_candidates_prefer_known_faces_then_path_order() {
        let d = tempfile::tempdir().unwrap();
        for (dir, file) in [
            ("b", "Zed.ttf"),
            ("a/deep", "Other.TTF"),
            ("c", "DejaVuSans.ttf"),
            ("c", "readme.txt"),
            ("a/1/2/3/4/5", "TooDeep.ttf"),
        ] {
            std::fs::create_dir_all(d.path().join(dir)).unwrap();
            std::fs::write(d.path().join(dir).join(file), b"not a font").unwrap();
        }
        let names: Vec<String> = font_candidates(&[d.path().to_path_buf(), d.path().join("missing")])
            .iter()
            .map(|p| p.strip_prefix(d.path()).unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["c/DejaVuSans.ttf", "a/deep/Other.TTF", "b/Zed.ttf"]);
    }

    #[test]
    fn files_that_are_not_fonts_are_not_registered() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("DejaVuSans.ttf");
        std::fs::write(&path, b"not a font").unwrap();
        assert!(!register_font(&[path, d.path().join("missing.ttf")]));
        assert!(!register_font(&[]));
    }

    /// Text is drawn exactly when the system has a usable font; either way
    /// the answer holds (tests pass with and without one).
    #[test]
    fn fonts_work_when_the_system_has_a_usable_font() {
        let dirs: Vec<PathBuf> = FONT_DIRS.iter().map(PathBuf::from).collect();
        let usable = font_candidates(&dirs).iter().any(|p| std::fs::read(p).is_ok_and(|b| usable_font(&b)));
        assert_eq!(fonts_work(), usable);
        assert_eq!(fonts_work(), usable);
    }
}
