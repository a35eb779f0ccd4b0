//! userfaultfd for the region, written by hand from the kernel's uAPI
//! header `include/uapi/linux/userfaultfd.h` and the man pages
//! `userfaultfd(2)` and `ioctl_userfaultfd(2)`: the system call, the
//! `UFFDIO_*` ioctls the region uses, and the `struct uffd_msg` events it
//! reads. Hand-written so that a build needs neither kernel headers nor
//! libclang (the bindgen of a `-sys` crate).
//!
//! Owns the userfaultfd descriptor ([`Uffd`]: closed on drop, which also
//! unregisters every range registered with it), the uAPI layouts and the
//! ioctl request numbers. It must not touch the registered memory itself —
//! no mapping, unmapping or reading of it: placing pages there
//! (`UFFDIO_COPY`, `UFFDIO_ZEROPAGE`) is an `unsafe fn` whose caller
//! (`sys`, which owns the mapping) vouches for the destination.
#![allow(unsafe_code)]
// The uAPI structs keep the header's names, so that they can be grepped.
#![allow(non_camel_case_types)]

use std::ffi::c_void;
use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

// ---------------------------------------------------------------------------
// The uAPI, as include/uapi/linux/userfaultfd.h declares it.

/// `UFFD_API`: the API version `UFFDIO_API` asks for (there is one).
const UFFD_API: u64 = 0xAA;
/// `UFFD_USER_MODE_ONLY` (Linux 5.11), a flag of the system call itself.
const UFFD_USER_MODE_ONLY: libc::c_int = 1;
/// `UFFDIO`: the type byte of the descriptor's ioctls.
const UFFDIO: u32 = 0xAA;
/// `USERFAULTFD_IOC`: the type byte of `/dev/userfaultfd`'s ioctl.
const USERFAULTFD_IOC: u32 = 0xAA;

// `_UFFDIO_*`: the ioctls' command numbers, which are also their bits in
// `uffdio_api.ioctls` and `uffdio_register.ioctls`.
const _UFFDIO_REGISTER: u32 = 0x00;
const _UFFDIO_UNREGISTER: u32 = 0x01;
const _UFFDIO_WAKE: u32 = 0x02;
const _UFFDIO_COPY: u32 = 0x03;
const _UFFDIO_ZEROPAGE: u32 = 0x04;
const _UFFDIO_WRITEPROTECT: u32 = 0x06;
const _UFFDIO_POISON: u32 = 0x08;
const _UFFDIO_API: u32 = 0x3F;

/// `UFFD_EVENT_PAGEFAULT`: `uffd_msg.event` of a page fault.
const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
/// `UFFD_PAGEFAULT_FLAG_WRITE`: the fault is a write.
const UFFD_PAGEFAULT_FLAG_WRITE: u64 = 1 << 0;
/// `UFFD_PAGEFAULT_FLAG_WP`: the fault is a write to a write-protected page.
const UFFD_PAGEFAULT_FLAG_WP: u64 = 1 << 1;
/// `UFFD_FEATURE_PAGEFAULT_FLAG_WP`: write-protect faults (Linux 5.7).
const UFFD_FEATURE_PAGEFAULT_FLAG_WP: u64 = 1 << 0;
/// `UFFD_FEATURE_SIGBUS`: a fault raises `SIGBUS` in the faulting thread
/// instead of waiting for the handler (Linux 4.14).
const UFFD_FEATURE_SIGBUS: u64 = 1 << 7;
/// `UFFD_FEATURE_POISON`: `UFFDIO_POISON` (Linux 6.6).
const UFFD_FEATURE_POISON: u64 = 1 << 14;
/// `UFFDIO_REGISTER_MODE_MISSING`: report faults on missing pages.
const UFFDIO_REGISTER_MODE_MISSING: u64 = 1 << 0;
/// `UFFDIO_REGISTER_MODE_WP`: report writes to write-protected pages.
const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
/// `UFFDIO_COPY_MODE_DONTWAKE`: leave the faulting threads asleep.
const UFFDIO_COPY_MODE_DONTWAKE: u64 = 1 << 0;
/// `UFFDIO_COPY_MODE_WP`: map the copied pages write-protected.
const UFFDIO_COPY_MODE_WP: u64 = 1 << 1;
/// `UFFDIO_ZEROPAGE_MODE_DONTWAKE`: leave the faulting threads asleep.
const UFFDIO_ZEROPAGE_MODE_DONTWAKE: u64 = 1 << 0;
/// `UFFDIO_WRITEPROTECT_MODE_WP`: set write protection (clear it without).
const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1 << 0;
/// `UFFDIO_WRITEPROTECT_MODE_DONTWAKE`: leave the writers asleep.
const UFFDIO_WRITEPROTECT_MODE_DONTWAKE: u64 = 1 << 1;

/// `struct uffdio_api`: the handshake every descriptor needs first.
#[repr(C)]
struct uffdio_api {
    api: u64,
    features: u64,
    ioctls: u64,
}

/// `struct uffdio_range`.
#[repr(C)]
struct uffdio_range {
    start: u64,
    len: u64,
}

/// `struct uffdio_register`; the kernel answers in `ioctls`.
#[repr(C)]
struct uffdio_register {
    range: uffdio_range,
    mode: u64,
    ioctls: u64,
}

/// `struct uffdio_copy`; the kernel answers in `copy` (bytes copied).
#[repr(C)]
struct uffdio_copy {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}

/// `struct uffdio_zeropage`; the kernel answers in `zeropage` (bytes
/// mapped).
#[repr(C)]
struct uffdio_zeropage {
    range: uffdio_range,
    mode: u64,
    zeropage: i64,
}

/// `struct uffdio_writeprotect`.
#[repr(C)]
struct uffdio_writeprotect {
    range: uffdio_range,
    mode: u64,
}

/// `struct uffdio_poison`; the kernel answers in `updated` (bytes
/// poisoned).
#[repr(C)]
struct uffdio_poison {
    range: uffdio_range,
    mode: u64,
    updated: i64,
}

/// `struct uffd_msg`, what `read` returns: 32 bytes each. The header
/// declares it `packed`; every field already sits at its natural
/// alignment, so `repr(C)` gives the same offsets and size (asserted in
/// the tests), only a larger alignment, which a buffer of them may have.
#[allow(dead_code)] // the reserved fields: the kernel's to fill
#[repr(C)]
#[derive(Clone, Copy)]
struct uffd_msg {
    event: u8,
    reserved1: u8,
    reserved2: u16,
    reserved3: u32,
    arg: uffd_msg_arg,
}

/// The union `arg` of `struct uffd_msg`: only the page-fault arm is read
/// (the region enables no other event); `reserved` gives the union the
/// header's 24 bytes, the size of its largest arms.
#[allow(dead_code)]
#[repr(C)]
#[derive(Clone, Copy)]
union uffd_msg_arg {
    pagefault: uffd_msg_pagefault,
    reserved: [u64; 3],
}

/// `arg.pagefault` of `struct uffd_msg`; `ptid` is `feat.ptid`, set only
/// with `UFFD_FEATURE_THREAD_ID`.
#[allow(dead_code)]
#[repr(C)]
#[derive(Clone, Copy)]
struct uffd_msg_pagefault {
    flags: u64,
    address: u64,
    ptid: u32,
}

// ---------------------------------------------------------------------------
// Ioctl request numbers: `_IOC(dir, type, nr, size)` of
// include/uapi/asm-generic/ioctl.h — nr in bits 0..8, type in 8..16, the
// argument's size (14 bits) from bit 16, the direction (2 bits: WRITE 1,
// READ 2) above it. mips, powerpc and sparc have their own asm/ioctl.h: a
// 13-bit size and a 3-bit direction (NONE 1, READ 2, WRITE 4).

/// Whether this architecture has its own `_IOC` layout.
const OWN_IOC_LAYOUT: bool = cfg!(any(
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "mips32r6",
    target_arch = "mips64r6",
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "sparc",
    target_arch = "sparc64"
));
const IOC_SIZEBITS: u32 = if OWN_IOC_LAYOUT { 13 } else { 14 };
const IOC_NONE: u32 = if OWN_IOC_LAYOUT { 1 } else { 0 };
const IOC_WRITE: u32 = if OWN_IOC_LAYOUT { 4 } else { 1 };
const IOC_READ: u32 = 2;

/// `_IOC(dir, ty, nr, size)`.
const fn ioc(dir: u32, ty: u32, nr: u32, size: usize) -> u32 {
    assert!(size < 1 << IOC_SIZEBITS, "an ioctl argument too large to encode");
    (dir << (16 + IOC_SIZEBITS)) | ((size as u32) << 16) | (ty << 8) | nr
}

/// An ioctl request number of the descriptor, tied to the struct it
/// passes: the struct's size is part of the number, so the pair cannot
/// drift apart.
struct Request<T> {
    code: u32,
    arg: PhantomData<fn(&mut T)>,
}

impl<T> Request<T> {
    /// `_IOWR(UFFDIO, nr, T)`: the kernel reads and writes the struct.
    const fn iowr(nr: u32) -> Self {
        Self { code: ioc(IOC_READ | IOC_WRITE, UFFDIO, nr, size_of::<T>()), arg: PhantomData }
    }

    /// `_IOR(UFFDIO, nr, T)`. The header notes that `UFFDIO_UNREGISTER`
    /// and `UFFDIO_WAKE` should have been `_IOW` (the kernel only reads
    /// their range), but the numbers are fixed as declared.
    const fn ior(nr: u32) -> Self {
        Self { code: ioc(IOC_READ, UFFDIO, nr, size_of::<T>()), arg: PhantomData }
    }
}

/// `UFFDIO_API`, 0xc018aa3f on the asm-generic layout.
const UFFDIO_API: Request<uffdio_api> = Request::iowr(_UFFDIO_API);
/// `UFFDIO_REGISTER`, 0xc020aa00.
const UFFDIO_REGISTER: Request<uffdio_register> = Request::iowr(_UFFDIO_REGISTER);
/// `UFFDIO_UNREGISTER`, 0x8010aa01. Not called: closing the descriptor
/// unregisters its ranges; declared for the tests beside its siblings.
#[cfg(test)]
const UFFDIO_UNREGISTER: Request<uffdio_range> = Request::ior(_UFFDIO_UNREGISTER);
/// `UFFDIO_WAKE`, 0x8010aa02.
const UFFDIO_WAKE: Request<uffdio_range> = Request::ior(_UFFDIO_WAKE);
/// `UFFDIO_COPY`, 0xc028aa03.
const UFFDIO_COPY: Request<uffdio_copy> = Request::iowr(_UFFDIO_COPY);
/// `UFFDIO_ZEROPAGE`, 0xc020aa04.
const UFFDIO_ZEROPAGE: Request<uffdio_zeropage> = Request::iowr(_UFFDIO_ZEROPAGE);
/// `UFFDIO_WRITEPROTECT`, 0xc018aa06.
const UFFDIO_WRITEPROTECT: Request<uffdio_writeprotect> = Request::iowr(_UFFDIO_WRITEPROTECT);
/// `UFFDIO_POISON`, 0xc020aa08.
const UFFDIO_POISON: Request<uffdio_poison> = Request::iowr(_UFFDIO_POISON);
/// `USERFAULTFD_IOC_NEW` = `_IO(USERFAULTFD_IOC, 0x00)`, 0xaa00: a new
/// descriptor from `/dev/userfaultfd`. Declared `_IO` but it takes the
/// system call's flags as its integer argument (`userfaultfd_dev_ioctl`
/// in fs/userfaultfd.c).
const USERFAULTFD_IOC_NEW: u32 = ioc(IOC_NONE, USERFAULTFD_IOC, 0x00, 0);

// ---------------------------------------------------------------------------
// The safe surface.

/// Features a new [`Uffd`] must have (`uffdio_api.features`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FeatureFlags(u64);

impl FeatureFlags {
    /// `UFFD_FEATURE_PAGEFAULT_FLAG_WP`: write-protect faults on anonymous
    /// memory (Linux 5.7).
    pub(crate) const PAGEFAULT_FLAG_WP: Self = Self(UFFD_FEATURE_PAGEFAULT_FLAG_WP);
    /// `UFFD_FEATURE_POISON`: `UFFDIO_POISON`, which makes a page raise
    /// `SIGBUS` on every touch (Linux 6.6).
    pub(crate) const POISON: Self = Self(UFFD_FEATURE_POISON);
    /// `UFFD_FEATURE_SIGBUS`: faults in registered ranges raise `SIGBUS`
    /// in the faulting thread; none is queued for the handler.
    pub(crate) const SIGBUS: Self = Self(UFFD_FEATURE_SIGBUS);
}

/// Which faults a registered range reports (`uffdio_register.mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RegisterMode(u64);

impl RegisterMode {
    /// `UFFDIO_REGISTER_MODE_MISSING`: touches of missing pages.
    pub(crate) const MISSING: Self = Self(UFFDIO_REGISTER_MODE_MISSING);
    /// `UFFDIO_REGISTER_MODE_WP`: writes to write-protected pages.
    pub(crate) const WRITE_PROTECT: Self = Self(UFFDIO_REGISTER_MODE_WP);
}

/// The ioctls the kernel offers on a registered range
/// (`uffdio_register.ioctls`: bit `_UFFDIO_x` for `UFFDIO_x`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IoctlFlags(u64);

impl IoctlFlags {
    /// `UFFDIO_COPY`.
    pub(crate) const COPY: Self = Self(1 << _UFFDIO_COPY);
    /// `UFFDIO_WRITEPROTECT`: offered only where the range is registered
    /// with [`RegisterMode::WRITE_PROTECT`] and the kernel can protect it.
    pub(crate) const WRITE_PROTECT: Self = Self(1 << _UFFDIO_WRITEPROTECT);
    /// `UFFDIO_POISON`.
    pub(crate) const POISON: Self = Self(1 << _UFFDIO_POISON);

    /// Whether every ioctl of `other` is offered.
    pub(crate) fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

macro_rules! bit_or {
    ($($flags:ty),*) => {$(
        impl core::ops::BitOr for $flags {
            type Output = Self;
            fn bitor(self, rhs: Self) -> Self {
                Self(self.0 | rhs.0)
            }
        }
    )*};
}
bit_or!(FeatureFlags, RegisterMode, IoctlFlags);

/// How a new [`Uffd`] is made: the system call's flags and the features
/// `UFFDIO_API` must grant.
#[derive(Clone, Copy, Debug)]
pub(crate) struct UffdBuilder {
    close_on_exec: bool,
    non_blocking: bool,
    user_mode_only: bool,
    features: u64,
    optional: u64,
}

impl UffdBuilder {
    /// No `O_CLOEXEC`, blocking reads, user-mode faults only, no required
    /// features.
    pub(crate) fn new() -> Self {
        Self { close_on_exec: false, non_blocking: false, user_mode_only: true, features: 0, optional: 0 }
    }

    /// `O_CLOEXEC`: the descriptor does not survive `execve`.
    pub(crate) fn close_on_exec(mut self, on: bool) -> Self {
        self.close_on_exec = on;
        self
    }

    /// `O_NONBLOCK`: [`Uffd::read_events`] returns no events instead of
    /// waiting for one.
    pub(crate) fn non_blocking(mut self, on: bool) -> Self {
        self.non_blocking = on;
        self
    }

    /// `UFFD_USER_MODE_ONLY`: only faults from user mode are reported (a
    /// fault the kernel itself takes on the range, copying to or from it
    /// for a system call, fails instead; userfaultfd(2)), which needs no
    /// privilege. Kernels before 5.11 do not know the flag; there the
    /// descriptor is made without it.
    pub(crate) fn user_mode_only(mut self, on: bool) -> Self {
        self.user_mode_only = on;
        self
    }

    /// Features `UFFDIO_API` must grant; [`create`](Self::create) fails
    /// (`EINVAL`) on a kernel without them.
    pub(crate) fn require_features(mut self, features: FeatureFlags) -> Self {
        self.features |= features.0;
        self
    }

    /// Features asked for where the kernel has them: the handshake is
    /// tried with them first, then (on a new descriptor, since a
    /// descriptor takes one handshake) without.
    pub(crate) fn optional_features(mut self, features: FeatureFlags) -> Self {
        self.optional |= features.0;
        self
    }

    /// A new descriptor, after the `UFFDIO_API` handshake, with the
    /// required features and whichever optional ones the kernel grants
    /// ([`Uffd::has_feature`]).
    pub(crate) fn create(self) -> io::Result<Uffd> {
        if self.optional != 0 {
            if let Ok(uffd) = self.create_with(self.features | self.optional) {
                return Ok(uffd);
            }
        }
        self.create_with(self.features)
    }

    /// A new descriptor, after the `UFFDIO_API` handshake asking for
    /// `features`.
    ///
    /// Tries the `userfaultfd` system call first; where the system call is
    /// refused (`EPERM`: `vm.unprivileged_userfaultfd`, a seccomp filter)
    /// or absent (`ENOSYS`), `/dev/userfaultfd` (Linux 6.1, access by file
    /// permission; Documentation/admin-guide/mm/userfaultfd.rst) — and if
    /// that fails too, the system call's error is the one returned.
    fn create_with(self, features: u64) -> io::Result<Uffd> {
        let mut flags = 0;
        if self.close_on_exec {
            flags |= libc::O_CLOEXEC;
        }
        if self.non_blocking {
            flags |= libc::O_NONBLOCK;
        }
        let wanted = if self.user_mode_only { flags | UFFD_USER_MODE_ONLY } else { flags };
        let fd = match userfaultfd_syscall(wanted) {
            // Before Linux 5.11 an unknown flag is EINVAL: ask again without
            // it (such a kernel reports kernel-mode faults to anyone).
            Err(e) if self.user_mode_only && e.raw_os_error() == Some(libc::EINVAL) => userfaultfd_syscall(flags),
            other => other,
        };
        let fd = match fd {
            Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::ENOSYS)) => {
                userfaultfd_device(wanted).map_err(|_| e)
            }
            other => other,
        }?;
        let mut uffd = Uffd { fd, features: 0 };
        let mut api = uffdio_api { api: UFFD_API, features, ioctls: 0 };
        // SAFETY: `UFFDIO_API` only reads and writes `api`; it touches no
        // other memory.
        unsafe { uffd.ioctl(UFFDIO_API, &mut api) }?;
        uffd.features = features;
        Ok(uffd)
    }
}

/// `userfaultfd(flags)`, the system call (no libc wrapper exists).
fn userfaultfd_syscall(flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: the system call takes one integer and reads no memory; it
    // returns a new descriptor or -1 with `errno` set.
    let ret = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::c_long::from(flags)) };
    owned_fd(ret.try_into().unwrap_or(-1))
}

/// A descriptor from `/dev/userfaultfd` (`USERFAULTFD_IOC_NEW`).
fn userfaultfd_device(flags: libc::c_int) -> io::Result<OwnedFd> {
    let dev = std::fs::OpenOptions::new().read(true).write(true).open("/dev/userfaultfd")?;
    // SAFETY: `USERFAULTFD_IOC_NEW` takes the flags as a plain integer, not
    // a pointer, so no memory of ours is read or written; it returns a new
    // descriptor or -1 with `errno` set.
    let ret = unsafe { libc::ioctl(dev.as_raw_fd(), USERFAULTFD_IOC_NEW as libc::Ioctl, flags) };
    owned_fd(ret)
}

/// Owns `fd`, a system call's return: a new descriptor, or -1 with `errno`.
fn owned_fd(fd: RawFd) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned `fd` as a new descriptor; nothing
    // else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A userfaultfd descriptor, closed on drop (which unregisters its ranges
/// and wakes any thread still waiting on one of their faults).
#[derive(Debug)]
pub(crate) struct Uffd {
    fd: OwnedFd,
    /// The features the handshake granted.
    features: u64,
}

impl AsFd for Uffd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// `struct uffdio_range` of an address and a length.
fn range(start: *mut c_void, len: usize) -> uffdio_range {
    uffdio_range { start: start as usize as u64, len: len as u64 }
}

impl Uffd {
    /// Whether the handshake granted every feature of `features`.
    pub(crate) fn has_feature(&self, features: FeatureFlags) -> bool {
        self.features & features.0 == features.0
    }

    /// Issues `request` with `arg`.
    ///
    /// # Safety
    /// What the request does beyond `arg` must be sound: for `UFFDIO_COPY`
    /// and `UFFDIO_ZEROPAGE`, that the destination may receive pages (see
    /// [`copy`](Self::copy)). The other requests here write no memory.
    unsafe fn ioctl<T>(&self, request: Request<T>, arg: &mut T) -> io::Result<()> {
        // SAFETY: `arg` is a live, exclusive `T`, the struct whose size
        // `request` encodes, so the kernel reads and writes only inside it;
        // the request's effect on other memory is the caller's contract.
        let ret = unsafe { libc::ioctl(self.fd.as_raw_fd(), request.code as libc::Ioctl, std::ptr::from_mut(arg)) };
        if ret < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Registers `len` bytes at `start` (page-aligned, inside one or more
    /// anonymous mappings) for the faults of `mode`, and returns the ioctls
    /// the kernel offers on the range.
    pub(crate) fn register_with_mode(
        &self,
        start: *mut c_void,
        len: usize,
        mode: RegisterMode,
    ) -> io::Result<IoctlFlags> {
        let mut register = uffdio_register { range: range(start, len), mode: mode.0, ioctls: 0 };
        // SAFETY: registering writes no memory: threads that fault in the
        // range wait for this descriptor's owner (or its close).
        unsafe { self.ioctl(UFFDIO_REGISTER, &mut register) }?;
        Ok(IoctlFlags(register.ioctls))
    }

    /// Wakes the threads waiting on faults in `len` bytes at `start`
    /// (`UFFDIO_WAKE`).
    pub(crate) fn wake(&self, start: *mut c_void, len: usize) -> io::Result<()> {
        let mut range = range(start, len);
        // SAFETY: waking writes no memory.
        unsafe { self.ioctl(UFFDIO_WAKE, &mut range) }
    }

    /// Write-protects `len` bytes at `start` (`UFFDIO_WRITEPROTECT` with
    /// `UFFDIO_WRITEPROTECT_MODE_WP`): a write there is a write-protect
    /// fault, and the writer waits.
    pub(crate) fn write_protect(&self, start: *mut c_void, len: usize) -> io::Result<()> {
        let mut wp = uffdio_writeprotect { range: range(start, len), mode: UFFDIO_WRITEPROTECT_MODE_WP };
        // SAFETY: write protection writes no memory; it only makes writers
        // wait.
        unsafe { self.ioctl(UFFDIO_WRITEPROTECT, &mut wp) }
    }

    /// Lifts the write protection of `len` bytes at `start`, waking the
    /// waiting writers when `wake`.
    pub(crate) fn remove_write_protection(&self, start: *mut c_void, len: usize, wake: bool) -> io::Result<()> {
        let mode = if wake { 0 } else { UFFDIO_WRITEPROTECT_MODE_DONTWAKE };
        let mut wp = uffdio_writeprotect { range: range(start, len), mode };
        // SAFETY: lifting userfaultfd's write protection writes no memory;
        // the mapping's own protection still applies.
        unsafe { self.ioctl(UFFDIO_WRITEPROTECT, &mut wp) }
    }

    /// Places a copy of `src` (a whole number of pages) at `dst`
    /// (`UFFDIO_COPY`), write-protected when `write_protect`
    /// (`UFFDIO_COPY_MODE_WP`), waking the faulting threads when `wake`.
    /// Returns the bytes copied, which may be fewer than asked for: the
    /// kernel stops at the first page it cannot place (present, or the
    /// address space changing) and reports the pages before it with
    /// `EAGAIN` (`userfaultfd_copy` in fs/userfaultfd.c), which is
    /// `Ok(copied)` here, not an error. `EEXIST` (as an error) when the
    /// first page of the destination is present: the kernel never
    /// replaces one.
    ///
    /// # Safety
    /// `dst .. dst + src.len()` lies in a range registered with this
    /// descriptor, in memory whose contents no Rust reference assumes
    /// (pages that appear there must be a valid state of it).
    pub(crate) unsafe fn copy(
        &self,
        dst: *mut c_void,
        src: &[u8],
        wake: bool,
        write_protect: bool,
    ) -> io::Result<usize> {
        let mut mode = if wake { 0 } else { UFFDIO_COPY_MODE_DONTWAKE };
        if write_protect {
            mode |= UFFDIO_COPY_MODE_WP;
        }
        let mut copy = uffdio_copy {
            dst: dst as usize as u64,
            src: src.as_ptr() as usize as u64,
            len: src.len() as u64,
            mode,
            copy: 0,
        };
        // SAFETY: the source is the live slice `src`, which the kernel only
        // reads; the destination is the caller's contract.
        match unsafe { self.ioctl(UFFDIO_COPY, &mut copy) } {
            Ok(()) => Ok(copy.copy.max(0) as usize),
            // A partial copy: those pages are in place.
            Err(_) if copy.copy > 0 => Ok(copy.copy as usize),
            Err(e) => Err(e),
        }
    }

    /// Maps the zero page over `len` bytes at `start` (`UFFDIO_ZEROPAGE`),
    /// waking the faulting threads when `wake`. Returns the bytes mapped;
    /// `EEXIST` (as an error) when a page there is present.
    ///
    /// # Safety
    /// As [`copy`](Self::copy), for `start .. start + len`.
    pub(crate) unsafe fn zeropage(&self, start: *mut c_void, len: usize, wake: bool) -> io::Result<usize> {
        let mode = if wake { 0 } else { UFFDIO_ZEROPAGE_MODE_DONTWAKE };
        let mut zero = uffdio_zeropage { range: range(start, len), mode, zeropage: 0 };
        // SAFETY: the destination is the caller's contract; the kernel
        // writes nothing else but `zero`.
        unsafe { self.ioctl(UFFDIO_ZEROPAGE, &mut zero) }?;
        Ok(zero.zeropage.max(0) as usize)
    }

    /// Poisons `len` bytes at `start` (`UFFDIO_POISON`, Linux 6.6): a
    /// touch there raises `SIGBUS` (as a memory error would) until the
    /// pages are dropped (`MADV_DONTNEED`). Wakes the faulting threads,
    /// which then take the signal. Returns the bytes poisoned; `EEXIST`
    /// (as an error) when a page there is present.
    ///
    /// # Safety
    /// As [`copy`](Self::copy), for `start .. start + len`; and no Rust
    /// code that cannot handle the signal may touch the range.
    pub(crate) unsafe fn poison(&self, start: *mut c_void, len: usize) -> io::Result<usize> {
        let mut poison = uffdio_poison { range: range(start, len), mode: 0, updated: 0 };
        // SAFETY: the destination is the caller's contract; the kernel
        // writes nothing else but `poison`.
        unsafe { self.ioctl(UFFDIO_POISON, &mut poison) }?;
        Ok(poison.updated.max(0) as usize)
    }

    /// Reads the pending events into `buf` and returns them. On a
    /// non-blocking descriptor with nothing pending (`EAGAIN`) there are
    /// none; a blocking one waits for the first.
    pub(crate) fn read_events<'a>(&self, buf: &'a mut EventBuffer) -> io::Result<impl Iterator<Item = Event> + 'a> {
        const MSG: usize = size_of::<uffd_msg>();
        let msgs = &mut buf.0[..];
        // SAFETY: the kernel writes at most `msgs.len() * MSG` bytes into
        // `msgs`, a live exclusive buffer of plain integers (any bytes are
        // a valid `uffd_msg`), and only whole messages.
        let ret = unsafe { libc::read(self.fd.as_raw_fd(), msgs.as_mut_ptr().cast(), msgs.len() * MSG) };
        let count = match usize::try_from(ret) {
            Err(_) => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::WouldBlock {
                    return Err(e);
                }
                0
            }
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) if n % MSG != 0 => {
                return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a partial uffd_msg ({n} bytes)")))
            }
            Ok(n) => n / MSG,
        };
        Ok(msgs[..count].iter().map(Event::from_msg))
    }
}

/// Room for the events one [`Uffd::read_events`] reads.
pub(crate) struct EventBuffer(Vec<uffd_msg>);

impl EventBuffer {
    /// Room for `n` events (at least one).
    pub(crate) fn new(n: usize) -> Self {
        let empty =
            uffd_msg { event: 0, reserved1: 0, reserved2: 0, reserved3: 0, arg: uffd_msg_arg { reserved: [0; 3] } };
        Self(vec![empty; n.max(1)])
    }
}

/// Why a page fault was reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FaultKind {
    /// A read of a missing page.
    Missing,
    /// A write to a missing page (`UFFD_PAGEFAULT_FLAG_WRITE`).
    MissingWrite,
    /// A write to a write-protected page (`UFFD_PAGEFAULT_FLAG_WP`).
    WriteProtected,
}

/// An event read from a [`Uffd`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// `UFFD_EVENT_PAGEFAULT`.
    Pagefault {
        /// Why.
        kind: FaultKind,
        /// The faulting page's address (page-aligned: the region does not
        /// ask for `UFFD_FEATURE_EXACT_ADDRESS`).
        addr: *mut c_void,
    },
    /// An event the region does not enable (fork, remap, remove, unmap).
    Other,
}

impl Event {
    fn from_msg(msg: &uffd_msg) -> Self {
        if msg.event != UFFD_EVENT_PAGEFAULT {
            return Self::Other;
        }
        // SAFETY: for `UFFD_EVENT_PAGEFAULT` the kernel fills the union's
        // `pagefault` arm, and any bytes are valid for its integers.
        let fault = unsafe { msg.arg.pagefault };
        let kind = if fault.flags & UFFD_PAGEFAULT_FLAG_WP != 0 {
            FaultKind::WriteProtected
        } else if fault.flags & UFFD_PAGEFAULT_FLAG_WRITE != 0 {
            FaultKind::MissingWrite
        } else {
            FaultKind::Missing
        };
        Self::Pagefault { kind, addr: fault.address as usize as *mut c_void }
    }
}

#[cfg(test)]
#[path = "uffd/tests.rs"]
mod tests;
