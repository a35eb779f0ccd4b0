//! Shared by the fuzz targets: a fixture (maps, pools, devices) kept from
//! one input to the next.
//!
//! Building a real-memory map, a zsmalloc pool (with its deferred-free
//! thread) or a zram device costs far more than the operations an input
//! drives, so a target that built them per input ran a few hundred inputs
//! a second. A target instead brings its fixture back to a known state at
//! the start of each input (every page freed, every device discarded or
//! reset) and checks that it got there, which is itself a test: a leak or
//! a stuck reset shows up as a failed check on the next input.
//!
//! The fixture is rebuilt every [`REBUILD_EVERY`] inputs, so a finding
//! depends on a bounded history, and on every input when
//! `MMKIT_FUZZ_FRESH` is set: run a crashing input that way first, and if
//! it does not crash alone, rerun the last inputs of the log's run with
//! `-runs`.

use std::sync::{Mutex, OnceLock, PoisonError};

/// Inputs a fixture serves before it is built again.
pub const REBUILD_EVERY: u32 = 256;

/// A fixture of type `T`, built on first use and rebuilt now and then.
pub struct Persistent<T> {
    slot: Mutex<Option<(u32, T)>>,
}

impl<T> Persistent<T> {
    /// An empty slot, for a `static`.
    pub const fn new() -> Self {
        Self { slot: Mutex::new(None) }
    }

    /// Runs `f` on the fixture, building it with `make` first when there
    /// is none, it has served [`REBUILD_EVERY`] inputs, or fresh fixtures
    /// were asked for. The old fixture is dropped before the new one is
    /// built, so its teardown runs (and is checked by whatever `Drop`
    /// checks) on every rebuild.
    pub fn with<R>(&self, make: impl FnOnce() -> T, f: impl FnOnce(&mut T) -> R) -> R {
        let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        let stale = match &*slot {
            Some((served, _)) => *served >= REBUILD_EVERY || fresh(),
            None => true,
        };
        if stale {
            *slot = None;
            *slot = Some((0, make()));
        }
        let (served, fixture) = slot.as_mut().expect("built above");
        *served += 1;
        f(fixture)
    }
}

impl<T> Default for Persistent<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether `MMKIT_FUZZ_FRESH` asks for a new fixture on every input.
fn fresh() -> bool {
    static FRESH: OnceLock<bool> = OnceLock::new();
    *FRESH.get_or_init(|| std::env::var_os("MMKIT_FUZZ_FRESH").is_some())
}

/// What the zram targets share: one map for every device of a run, and
/// which attributes change a device's configuration.
pub mod zram {
    use mmkit::{Backing, HugePages, MemoryMapBuilder, PageAllocator};
    use mmkit_zram::Zram;
    use std::os::fd::IntoRawFd;
    use std::path::PathBuf;
    use std::sync::{Arc, OnceLock};

    /// A backing file of `pages` zeroed pages, named `/proc/self/fd/N`: it
    /// is unlinked as soon as it is created and lives while the process
    /// holds its descriptor (to the end), so a run stopped at its time
    /// limit, which runs no destructors, leaves nothing in the temporary
    /// directory. Call it once per process (a `OnceLock`).
    pub fn backing_file(name: &str, pages: usize) -> PathBuf {
        let path = std::env::temp_dir().join(format!("mmkit-fuzz-{name}-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .expect("a backing file in the temporary directory");
        let _ = std::fs::remove_file(&path);
        file.set_len((pages * 4096) as u64).expect("room for the backing file");
        PathBuf::from(format!("/proc/self/fd/{}", file.into_raw_fd()))
    }

    /// A device kept from one input to the next, built again after an
    /// input that changed its configuration.
    #[derive(Default)]
    pub struct DeviceSlot {
        zram: Option<Zram>,
        /// Whether the last input changed the configuration.
        pub reconfigured: bool,
    }

    impl DeviceSlot {
        /// The device, built with `make` first when there is none or the
        /// last input reconfigured it.
        pub fn device(&mut self, make: impl FnOnce() -> Zram) -> &Zram {
            if self.reconfigured || self.zram.is_none() {
                // The old device lets go of its backing file first.
                self.zram = None;
                self.reconfigured = false;
            }
            self.zram.get_or_insert_with(make)
        }
    }

    /// Attributes that change a device's configuration. After a store of
    /// one is taken, a target builds the device again for its next input,
    /// so every input starts from the same configuration.
    pub const RECONFIGURING: &[&str] = &[
        "reset",
        "disksize",
        "comp_algorithm",
        "comp",
        "recomp_algorithm",
        "recomp",
        "backing_dev",
        "max_comp_streams",
        "algorithm_params",
        "mem_limit",
        "writeback_limit",
        "writeback_limit_enable",
    ];

    /// One real-memory map of 4 MiB for every device of the run: a map per
    /// device would cost more than the input's requests.
    pub fn map() -> Arc<PageAllocator> {
        static MM: OnceLock<Arc<PageAllocator>> = OnceLock::new();
        MM.get_or_init(|| {
            Arc::new(
                MemoryMapBuilder::with_memory(4 << 20)
                    .backing(Backing::RealMemory(HugePages::None))
                    .hooks(mmkit::QuietHooks)
                    .build()
                    .expect("a 4 MiB map"),
            )
        })
        .clone()
    }
}
