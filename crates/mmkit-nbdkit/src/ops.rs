//! What each NBD request does to the device, apart from nbdkit's types:
//! zero with and without permission to punch holes, trim, block status
//! from the slot table, and the errno each device error is sent as.
//!
//! Owns these mappings only; the fuzz target `nbd_requests` drives them
//! against a model. Reads, writes and flushes go straight to the
//! device's own calls; the nbdkit glue (`glue`) calls these and turns
//! their results into nbdkit's.

use mmkit_zram::{ExtentKind, OpenHandle, Zram, ZramError};

/// What block status reports for a run of bytes (NBD's `base:allocation`
/// states).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockState {
    /// Stored data.
    Data,
    /// Stored, reads as zeroes (a same-filled zero page).
    Zero,
    /// Nothing stored: a hole that reads as zeroes.
    HoleZero,
}

/// One run of bytes of a [`BlockState`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// First byte.
    pub offset: u64,
    /// Bytes in the run.
    pub length: u64,
    /// What they hold.
    pub state: BlockState,
}

/// The errno an NBD client sees for a device error: `mem_limit` is
/// `ENOSPC` (NBD has `NBD_ENOSPC`, and `qemu-img`/`nbdcopy` say "No space
/// left on device"), data that no longer decompresses or a failed backing
/// file is `EIO`, anything the request itself got wrong is `EINVAL`.
///
/// A device that is not initialised (reset, `disksize` not yet written) is
/// `EIO`: the kernel's zram has no capacity then and fails the I/O; `EBUSY`
/// (a reset of an open device) is what nbdkit sends as `EINVAL`, NBD
/// having no busy error.
pub fn errno(error: &ZramError) -> i32 {
    match error {
        ZramError::OutOfRange { .. } | ZramError::Invalid(_) | ZramError::Compress(_) => libc::EINVAL,
        ZramError::NoSpace | ZramError::BackingFull { .. } => libc::ENOSPC,
        ZramError::Pool(_) => libc::ENOMEM,
        ZramError::Busy(_) => libc::EBUSY,
        ZramError::Corrupt { .. }
        | ZramError::Backing(_)
        | ZramError::NoBackingDev
        | ZramError::WritebackLimit { .. }
        | ZramError::NotInitialised => libc::EIO,
    }
}

/// Zeroes, written through the device so each whole page becomes a
/// same-filled zero page (no allocation, no compression).
static ZEROES: [u8; 64 << 10] = [0; 64 << 10];

/// `NBD_CMD_WRITE_ZEROES`: with `may_trim` (the client did not set
/// `NO_HOLE`) whole pages are freed and become holes, as zram's own
/// write-zeroes does; without it every page stays allocated as a zero page,
/// so block status reports zeroes, not a hole. Either way nothing is
/// compressed, which is why fast zero is always honoured.
///
/// # Errors
/// The device's: [`ZramError::OutOfRange`], and [`ZramError::NoSpace`] /
/// [`ZramError::Corrupt`] from the read-modify-write of a partial page.
pub fn zero(zram: &OpenHandle<'_>, offset: u64, len: u64, may_trim: bool) -> Result<(), ZramError> {
    let in_range = offset.checked_add(len).is_some_and(|end| end <= zram.zram().disksize());
    // The device's write-zeroes also answers an uninitialised device and a
    // range past the end before touching anything (and counts the latter
    // in `invalid_io`). A reset between this check and the writes below
    // fails them with `NotInitialised`.
    if may_trim || !in_range || len == 0 {
        return zram.write_zeroes(offset, len);
    }
    let mut at = offset;
    let end = offset + len;
    while at < end {
        let n = (end - at).min(ZEROES.len() as u64);
        zram.write(at, &ZEROES[..n as usize])?;
        at += n;
    }
    Ok(())
}

/// `NBD_CMD_TRIM`: frees the whole pages in the range; the bytes of
/// partial pages at its ends are kept (NBD leaves trimmed contents
/// unspecified, and zram's discard keeps partial pages for the same reason:
/// a discard is there to save memory).
///
/// # Errors
/// [`ZramError::OutOfRange`].
pub fn trim(zram: &OpenHandle<'_>, offset: u64, len: u64) -> Result<(), ZramError> {
    zram.discard(offset, len)
}

/// Block status of `[offset, offset + len)` from the slot table: never
/// written or freed pages are holes, zero pages are zeroes, the rest data.
/// With `req_one` only the run holding `offset` is returned.
///
/// # Errors
/// [`ZramError::OutOfRange`].
pub fn extents(zram: &Zram, offset: u64, len: u64, req_one: bool) -> Result<Vec<Run>, ZramError> {
    let mut runs: Vec<Run> = zram
        .extents(offset, len)?
        .into_iter()
        .map(|e| Run {
            offset: e.offset,
            length: e.length,
            state: match e.kind {
                ExtentKind::Hole => BlockState::HoleZero,
                ExtentKind::Zero => BlockState::Zero,
                ExtentKind::Data => BlockState::Data,
            },
        })
        .collect();
    if req_one {
        runs.truncate(1);
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mmkit_zram::{ZramConfig, PAGE_SIZE};

    const PAGE: u64 = PAGE_SIZE as u64;

    fn device(pages: u64) -> Zram {
        Zram::with_own_memory(ZramConfig { disksize: pages * PAGE, ..ZramConfig::default() }).unwrap()
    }

    fn data_page(seed: u8) -> Vec<u8> {
        (0..PAGE_SIZE).map(|i| (i as u8).wrapping_mul(seed) ^ (i / 7) as u8).collect()
    }

    fn states(zram: &Zram) -> Vec<(u64, u64, BlockState)> {
        extents(zram, 0, zram.disksize(), false).unwrap().into_iter().map(|r| (r.offset, r.length, r.state)).collect()
    }

    #[test]
    fn zero_punches_holes_only_when_allowed() {
        let zram = device(8);
        for i in 0..8 {
            zram.open().unwrap().write(i * PAGE, &data_page(i as u8 + 1)).unwrap();
        }
        zero(&zram.open().unwrap(), PAGE, 2 * PAGE, true).unwrap();
        zero(&zram.open().unwrap(), 4 * PAGE, 2 * PAGE, false).unwrap();
        assert_eq!(
            states(&zram),
            vec![
                (0, PAGE, BlockState::Data),
                (PAGE, 2 * PAGE, BlockState::HoleZero),
                (3 * PAGE, PAGE, BlockState::Data),
                (4 * PAGE, 2 * PAGE, BlockState::Zero),
                (6 * PAGE, 2 * PAGE, BlockState::Data),
            ]
        );
        let mut back = vec![1u8; 5 * PAGE_SIZE];
        zram.open().unwrap().read(PAGE, &mut back).unwrap();
        assert!(back[..2 * PAGE_SIZE].iter().all(|&b| b == 0));
        assert_eq!(back[2 * PAGE_SIZE..3 * PAGE_SIZE], data_page(4)[..]);
        assert!(back[3 * PAGE_SIZE..].iter().all(|&b| b == 0));
    }

    #[test]
    fn zero_of_partial_pages_zeroes_exactly_the_bytes_asked() {
        let zram = device(4);
        for i in 0..4 {
            zram.open().unwrap().write(i * PAGE, &data_page(i as u8 + 3)).unwrap();
        }
        for may_trim in [true, false] {
            zero(&zram.open().unwrap(), 100, 3 * PAGE - 200, may_trim).unwrap();
            let mut back = vec![0u8; 3 * PAGE_SIZE];
            zram.open().unwrap().read(0, &mut back).unwrap();
            assert_eq!(back[..100], data_page(3)[..100]);
            assert!(back[100..3 * PAGE_SIZE - 100].iter().all(|&b| b == 0));
            assert_eq!(back[3 * PAGE_SIZE - 100..], data_page(5)[PAGE_SIZE - 100..]);
        }
        // More than one buffer of zeroes, without holes.
        let zram = device(40);
        zero(&zram.open().unwrap(), 0, 40 * PAGE, false).unwrap();
        assert_eq!(states(&zram), vec![(0, 40 * PAGE, BlockState::Zero)]);
    }

    #[test]
    fn trim_frees_whole_pages_and_keeps_partial_ones() {
        let zram = device(4);
        for i in 0..4 {
            zram.open().unwrap().write(i * PAGE, &data_page(i as u8 + 1)).unwrap();
        }
        trim(&zram.open().unwrap(), PAGE / 2, 2 * PAGE).unwrap();
        assert_eq!(
            states(&zram),
            vec![
                (0, PAGE, BlockState::Data),
                (PAGE, PAGE, BlockState::HoleZero),
                (2 * PAGE, 2 * PAGE, BlockState::Data)
            ]
        );
        let mut back = vec![0u8; PAGE_SIZE];
        zram.open().unwrap().read(0, &mut back).unwrap();
        assert_eq!(back, data_page(1));
        zram.open().unwrap().read(2 * PAGE, &mut back).unwrap();
        assert_eq!(back, data_page(3));
    }

    #[test]
    fn block_status_of_a_fresh_device_is_one_hole_and_req_one_cuts_to_one_run() {
        let zram = device(16);
        assert_eq!(states(&zram), vec![(0, 16 * PAGE, BlockState::HoleZero)]);
        zram.open().unwrap().write(5 * PAGE + 10, b"x").unwrap();
        let runs = extents(&zram, 3 * PAGE + 1, 10 * PAGE, false).unwrap();
        assert_eq!(runs.len(), 3);
        assert_eq!((runs[0].offset, runs[0].length), (3 * PAGE + 1, 2 * PAGE - 1));
        assert_eq!(runs[1], Run { offset: 5 * PAGE, length: PAGE, state: BlockState::Data });
        assert_eq!(extents(&zram, 3 * PAGE, 10 * PAGE, true).unwrap().len(), 1);
    }

    #[test]
    fn requests_past_the_end_are_typed_errors_sent_as_einval() {
        let zram = device(4);
        for result in [
            zero(&zram.open().unwrap(), 3 * PAGE, 2 * PAGE, true),
            zero(&zram.open().unwrap(), 3 * PAGE, 2 * PAGE, false),
            zero(&zram.open().unwrap(), u64::MAX - 1, 8, false),
            trim(&zram.open().unwrap(), 4 * PAGE, 1),
            extents(&zram, 0, 5 * PAGE, false).map(|_| ()),
        ] {
            let err = result.unwrap_err();
            assert!(matches!(err, ZramError::OutOfRange { .. }), "{err:?}");
            assert_eq!(errno(&err), libc::EINVAL);
        }
        assert_eq!(states(&zram), vec![(0, 4 * PAGE, BlockState::HoleZero)], "nothing was written");
        assert_eq!(errno(&ZramError::NoSpace), libc::ENOSPC);
        assert_eq!(errno(&ZramError::Corrupt { index: 0 }), libc::EIO);
        assert_eq!(errno(&ZramError::NotInitialised), libc::EIO);
    }
}
