//! The nbdkit plugin: the `nbdkit` crate's `Server` callbacks over one
//! device shared by every connection, and `plugin_init`, which registers
//! them with nbdkit's preferred block size added.
//!
//! Owns the plugin's global state (parameters while nbdkit configures, then
//! the device, the control socket and the reclaim thread) and the only `unsafe` of the crate:
//! the `block_size` callback, which the `nbdkit` crate (0.3) does not bind
//! although nbdkit has had it since 1.30. The NBD protocol itself is
//! nbdkit's; this module only answers its callbacks.

use crate::control::ControlSocket;
use crate::ops::{self, BlockState};
use crate::params::{Params, MAGIC_KEY};
use crate::reclaim::Reclaimer;
use mmkit_zram::{OpenHandle, Zram, ZramError};
use nbdkit::{CacheFlags, Error, ExtentHandle, ExtentType, Flags, FuaFlags, Result, Server, ThreadModel};
use std::os::raw::{c_int, c_void};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

/// What `key=value` arguments set, until `get_ready` builds the device.
static PARAMS: Mutex<Option<Params>> = Mutex::new(None);
/// The one device every connection shares (multi-conn is safe: there is
/// no per-connection cache).
static DEVICE: OnceLock<Arc<Zram>> = OnceLock::new();
/// The control socket between `get_ready` (bound, so it exists once nbdkit
/// reports itself ready) and `after_fork` (served: threads must start after
/// nbdkit's fork into the background).
static CONTROL: Mutex<Option<ControlSocket>> = Mutex::new(None);
/// The thread that gives trimmed memory back to the OS (started in
/// `after_fork`, as threads must be; never stopped before exit).
static RECLAIMER: OnceLock<Reclaimer> = OnceLock::new();
/// The control socket's path and its device and inode, removed at unload
/// if the path still names it.
static CONTROL_PATH: OnceLock<(PathBuf, u64, u64)> = OnceLock::new();
/// Files of a private directory to remove at unload (`cleanup=`).
static CLEANUP: OnceLock<Vec<PathBuf>> = OnceLock::new();
/// The `--help` text, built once.
static HELP: OnceLock<String> = OnceLock::new();

/// The largest request nbdkit 1.32 accepts (its `MAX_REQUEST_SIZE` is
/// 64 MiB; half keeps clients well inside it).
const MAXIMUM_REQUEST: u32 = 32 << 20;

fn device() -> Result<&'static Zram> {
    DEVICE.get().map(|d| &**d).ok_or_else(|| Error::new(libc::EIO, "the device is not ready"))
}

fn zram_error(e: ZramError) -> Error {
    Error::new(ops::errno(&e), e.to_string())
}

/// One client connection: it holds the device open (Linux's `zram_open`),
/// so a `reset` through the control socket is refused until nbdkit closes
/// it, and its I/O goes through that handle (the device has no other way
/// in); all other state is the shared device's.
struct Connection {
    open: OpenHandle<'static>,
}

impl Server for Connection {
    fn name() -> &'static str {
        "mmkit-zram"
    }

    fn longname() -> Option<&'static str> {
        Some("mmkit zram: compressed RAM (zsmalloc, lz4/zstd) as an NBD export")
    }

    fn version() -> Option<&'static str> {
        Some(env!("CARGO_PKG_VERSION"))
    }

    fn description() -> Option<&'static str> {
        Some("Serves a zram device of mmkit: 4 KiB pages kept compressed in RAM, holes and zero pages reported through block status.")
    }

    fn config_help() -> Option<&'static str> {
        Some(HELP.get_or_init(Params::help))
    }

    fn magic_config_key() -> Option<&'static str> {
        Some(MAGIC_KEY)
    }

    fn config(key: &str, value: &str) -> Result<()> {
        let mut params = PARAMS.lock().unwrap_or_else(|p| p.into_inner());
        params.get_or_insert_with(Params::default).set(key, value).map_err(|e| Error::new(libc::EINVAL, e))
    }

    fn thread_model() -> Result<ThreadModel> {
        Ok(ThreadModel::Parallel)
    }

    fn dump_plugin() {
        println!("mmkit_zram_algorithms=lz4,lz4_flex,zstd");
        println!("mmkit_zram_page_size={}", mmkit_zram::PAGE_SIZE);
    }

    fn get_ready() -> Result<()> {
        let params = PARAMS.lock().unwrap_or_else(|p| p.into_inner()).take().unwrap_or_default();
        let _ = CLEANUP.set(params.cleanup.clone());
        let zram = Zram::with_own_memory(params.config).map_err(zram_error)?;
        if let Some(path) = params.control {
            let socket = ControlSocket::bind(&path)
                .map_err(|e| Error::new(libc::EINVAL, format!("control socket {}: {e}", path.display())))?;
            if let Ok(meta) = path.symlink_metadata() {
                use std::os::unix::fs::MetadataExt;
                let _ = CONTROL_PATH.set((path, meta.dev(), meta.ino()));
            }
            *CONTROL.lock().unwrap_or_else(|p| p.into_inner()) = Some(socket);
        }
        DEVICE.set(Arc::new(zram)).map_err(|_| Error::new(libc::EINVAL, "get_ready ran twice"))
    }

    fn after_fork() -> Result<()> {
        let zram = DEVICE.get().cloned().ok_or_else(|| Error::new(libc::EIO, "the device is not ready"))?;
        if let Some(socket) = CONTROL.lock().unwrap_or_else(|p| p.into_inner()).take() {
            socket.serve(Arc::clone(&zram)).map_err(Error::from)?;
        }
        // Runs for the life of the process, as the control socket's thread.
        let reclaimer = Reclaimer::start(zram).map_err(Error::from)?;
        let _ = RECLAIMER.set(reclaimer);
        Ok(())
    }

    fn unload() {
        // The socket this plugin bound, while its path still names it.
        if let Some((path, dev, ino)) = CONTROL_PATH.get() {
            use std::os::unix::fs::MetadataExt;
            if path.symlink_metadata().is_ok_and(|m| m.dev() == *dev && m.ino() == *ino) {
                let _ = std::fs::remove_file(path);
            }
        }
        // `mmkit zram serve`'s private directory, when it dies without
        // removing it (SIGKILL): nbdkit exits with its parent and unloads.
        if let Some(files) = CLEANUP.get() {
            for file in files {
                let _ = std::fs::remove_file(file);
            }
            if let Some(dir) = files.first().and_then(|f| f.parent()) {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }

    fn open(_readonly: bool) -> Result<Box<dyn Server>> {
        // Dropped in nbdkit's `close` callback, with the connection.
        let open = device()?.open().map_err(zram_error)?;
        Ok(Box::new(Connection { open }))
    }

    fn get_size(&self) -> Result<i64> {
        Ok(device()?.disksize() as i64)
    }

    fn can_write(&self) -> Result<bool> {
        Ok(true)
    }

    fn can_flush(&self) -> Result<bool> {
        Ok(true)
    }

    fn can_trim(&self) -> Result<bool> {
        Ok(true)
    }

    fn can_zero(&self) -> Result<bool> {
        Ok(true)
    }

    fn can_fast_zero(&self) -> Result<bool> {
        Ok(true)
    }

    fn can_fua(&self) -> Result<FuaFlags> {
        // RAM: a write is as durable as it gets once it returns.
        Ok(FuaFlags::Native)
    }

    fn can_multi_conn(&self) -> Result<bool> {
        Ok(true)
    }

    fn can_extents(&self) -> Result<bool> {
        Ok(true)
    }

    fn can_cache(&self) -> Result<CacheFlags> {
        Ok(CacheFlags::Native)
    }

    fn is_rotational(&self) -> Result<bool> {
        Ok(false)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.open.read(offset, buf).map_err(zram_error)
    }

    fn write_at(&self, buf: &[u8], offset: u64, _flags: Flags) -> Result<()> {
        self.open.write(offset, buf).map_err(zram_error)
    }

    fn flush(&self) -> Result<()> {
        self.open.flush();
        Ok(())
    }

    fn cache(&self, _count: u32, _offset: u64) -> Result<()> {
        // Everything is in RAM already.
        Ok(())
    }

    fn trim(&self, count: u32, offset: u64, _flags: Flags) -> Result<()> {
        ops::trim(&self.open, offset, u64::from(count)).map_err(zram_error)
    }

    fn zero(&self, count: u32, offset: u64, flags: Flags) -> Result<()> {
        ops::zero(&self.open, offset, u64::from(count), flags.contains(Flags::MAY_TRIM)).map_err(zram_error)
    }

    fn extents(&self, count: u32, offset: u64, flags: Flags, handle: &mut ExtentHandle) -> Result<()> {
        let runs =
            ops::extents(device()?, offset, u64::from(count), flags.contains(Flags::REQ_ONE)).map_err(zram_error)?;
        for run in runs {
            let kind = match run.state {
                BlockState::Data => ExtentType::Allocated,
                BlockState::Zero => ExtentType::Zero,
                BlockState::HoleZero => ExtentType::HoleZero,
            };
            handle.add(run.offset, run.length, kind)?;
        }
        Ok(())
    }
}

/// nbdkit's `block_size` callback: any alignment works (partial pages are
/// read-modify-write), 4 KiB is what costs least, at most 32 MiB a request.
extern "C" fn block_size(_handle: *mut c_void, minimum: *mut u32, preferred: *mut u32, maximum: *mut u32) -> c_int {
    // SAFETY: nbdkit calls this with three valid, writable, aligned
    // pointers to its own `uint32_t`s (`plugin_block_size` in
    // server/plugins.c), which nothing else touches during the call.
    unsafe {
        *minimum = 1;
        *preferred = mmkit_zram::PAGE_SIZE as u32;
        *maximum = MAXIMUM_REQUEST;
    }
    0
}

/// nbdkit's `struct nbdkit_plugin` up to `block_size`: the `nbdkit`
/// crate's struct, which ends at `after_fork`, then the fields nbdkit
/// 1.32's header has after it, in its order. nbdkit reads as much of it as
/// `_struct_size` says.
#[repr(C)]
pub struct PluginWithBlockSize {
    base: nbdkit::Plugin,
    list_exports: Option<extern "C" fn()>,
    default_export: Option<extern "C" fn()>,
    export_description: Option<extern "C" fn()>,
    cleanup: Option<extern "C" fn()>,
    block_size: Option<extern "C" fn(*mut c_void, *mut u32, *mut u32, *mut u32) -> c_int>,
}

/// The entry point nbdkit looks up after `dlopen`: the callbacks of
/// [`Connection`], registered through the `nbdkit` crate as its
/// `plugin!` macro does, plus `block_size`.
#[no_mangle]
pub extern "C" fn plugin_init() -> *const PluginWithBlockSize {
    let mut builder = nbdkit::Builder::new();
    for flag in [
        &mut builder.after_fork,
        &mut builder.cache,
        &mut builder.can_cache,
        &mut builder.can_extents,
        &mut builder.can_fast_zero,
        &mut builder.can_flush,
        &mut builder.can_fua,
        &mut builder.can_multi_conn,
        &mut builder.can_trim,
        &mut builder.can_write,
        &mut builder.can_zero,
        &mut builder.config,
        &mut builder.dump_plugin,
        &mut builder.extents,
        &mut builder.flush,
        &mut builder.get_ready,
        &mut builder.is_rotational,
        &mut builder.thread_model,
        &mut builder.trim,
        &mut builder.unload,
        &mut builder.write_at,
        &mut builder.zero,
    ] {
        *flag = true;
    }
    let base = builder.into_ptr::<Connection>();
    // SAFETY: `into_ptr` returns a pointer from `Box::into_raw` of a fully
    // initialised `Plugin` that it never frees; reading a bitwise copy
    // leaves that box leaked and unused, and the copy's pointers (static
    // strings and functions) stay valid for the life of the process.
    let mut base = unsafe { std::ptr::read(base) };
    base._struct_size = std::mem::size_of::<PluginWithBlockSize>() as u64;
    let plugin = PluginWithBlockSize {
        base,
        list_exports: None,
        default_export: None,
        export_description: None,
        cleanup: None,
        block_size: Some(block_size),
    };
    Box::into_raw(Box::new(plugin))
}
