//! A private kernel zram device for comparisons: hot-added through
//! `/sys/class/zram-control`, driven with `O_DIRECT` `pwrite`/`pread`, then
//! reset and hot-removed when dropped. Never `/dev/zram0`, never a device
//! this process did not add.
//!
//! Owns only the device's life and its sysfs; what to write and what to
//! compare belong to the test or benchmark.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};

/// A 4 KiB buffer aligned for `O_DIRECT`.
#[repr(C, align(4096))]
pub struct AlignedPage([u8; 4096]);

impl AlignedPage {
    /// A zeroed page on the heap.
    pub fn new() -> Box<Self> {
        Box::new(Self([0; 4096]))
    }
    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
    /// The bytes, to fill.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

/// A hot-added kernel zram device.
pub struct KernelZram {
    /// N of `/dev/zramN`.
    pub id: u32,
    /// Closed before the reset (the kernel refuses to reset an open device).
    file: Option<File>,
}

fn sys(path: &str, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("{path}: {e}"))
}

/// `O_DIRECT` on Linux x86-64 and aarch64 (no libc dependency for one
/// constant).
fn o_direct() -> i32 {
    if cfg!(target_arch = "aarch64") {
        0o200000
    } else {
        0o40000
    }
}

impl KernelZram {
    /// Hot-adds a device of `bytes` compressing with `algorithm`; the error
    /// says why there is none (no zram module, not root, algorithm not
    /// built in).
    pub fn add(algorithm: &str, bytes: u64) -> Result<Self, String> {
        // Reading hot_add creates a device: read it once, here only.
        let id: u32 = std::fs::read_to_string("/sys/class/zram-control/hot_add")
            .map_err(|e| format!("/sys/class/zram-control/hot_add: {e}"))?
            .trim()
            .parse()
            .map_err(|e| format!("hot_add answered {e}"))?;
        let remove = |why: String| {
            let _ = sys(&format!("/sys/block/zram{id}/reset"), "1");
            let _ = sys("/sys/class/zram-control/hot_remove", &id.to_string());
            why
        };
        if id == 0 {
            return Err("hot_add returned zram0, which is never used".into());
        }
        sys(&format!("/sys/block/zram{id}/comp_algorithm"), algorithm).map_err(remove)?;
        sys(&format!("/sys/block/zram{id}/disksize"), &bytes.to_string()).map_err(remove)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(o_direct())
            .open(format!("/dev/zram{id}"))
            .map_err(|e| remove(format!("/dev/zram{id}: {e}")))?;
        Ok(Self { id, file: Some(file) })
    }

    fn file(&self) -> io::Result<&File> {
        self.file.as_ref().ok_or_else(|| io::Error::other("kernel zram closed"))
    }

    /// Writes page `index` (`page` must be 4 KiB-aligned, see
    /// [`AlignedPage`]).
    pub fn write_page(&self, index: u64, page: &[u8]) -> io::Result<()> {
        self.file()?.write_all_at(page, index * 4096)
    }

    /// Reads page `index` into an aligned buffer.
    pub fn read_page(&self, index: u64, page: &mut [u8]) -> io::Result<()> {
        self.file()?.read_exact_at(page, index * 4096)
    }

    /// The device's `mm_stat` columns.
    pub fn mm_stat(&self) -> Option<Vec<u64>> {
        let text = std::fs::read_to_string(format!("/sys/block/zram{}/mm_stat", self.id)).ok()?;
        Some(text.split_whitespace().filter_map(|c| c.parse().ok()).collect())
    }
}

impl Drop for KernelZram {
    fn drop(&mut self) {
        drop(self.file.take());
        let _ = sys(&format!("/sys/block/zram{}/reset", self.id), "1");
        let _ = sys("/sys/class/zram-control/hot_remove", &self.id.to_string());
    }
}

/// Up to `max` 4 KiB pages of real files: the system's shared libraries
/// and programs, in name order (this program's own file when none can be
/// read), so two runs see the same bytes.
pub fn real_pages(max: usize) -> Vec<Vec<u8>> {
    real_pages_from(0, 1, max)
}

/// Up to `max` pages of the same sequence as [`real_pages`], from page
/// `skip` on, every `stride`-th: a sample disjoint from `real_pages(skip)`
/// (to train a dictionary on pages other than those it is measured on).
pub fn real_pages_from(skip: usize, stride: usize, max: usize) -> Vec<Vec<u8>> {
    let stride = stride.max(1);
    let mut files: Vec<std::path::PathBuf> = Vec::new();
    for dir in ["/usr/lib/x86_64-linux-gnu", "/usr/lib", "/usr/bin"] {
        if let Ok(entries) = std::fs::read_dir(dir) {
            let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).filter(|p| p.is_file()).collect();
            paths.sort();
            files.extend(paths);
        }
    }
    files.extend(std::env::current_exe());
    let mut pages = Vec::new();
    let mut index = 0usize;
    for file in files {
        if pages.len() >= max {
            break;
        }
        let Ok(meta) = std::fs::metadata(&file) else { continue };
        let whole = (meta.len() / 4096) as usize;
        if index + whole <= skip {
            // Not read: a file wholly before the sample is only counted.
            index += whole;
            continue;
        }
        let Ok(data) = std::fs::read(&file) else { continue };
        for page in data.chunks_exact(4096) {
            if index >= skip && (index - skip) % stride == 0 {
                pages.push(page.to_vec());
                if pages.len() >= max {
                    return pages;
                }
            }
            index += 1;
        }
    }
    pages
}
