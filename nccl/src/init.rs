//! Versions, ids, communicators and their queries.

use std::ffi::{c_char, c_int, c_void};

use streamcomm::bootstrap::UniqueId;
use streamcomm::cuda::CudaComm;
use streamcomm::cuda::nccl::sys::{NCCL_UNIQUE_ID_BYTES, NCCL_VERSION_CODE};
use streamcomm::{Communicator, Error};

use crate::api::{export, ncclComm_t, ncclResult_t, ncclUniqueId};
use crate::comms::{self, Ready, Status};
use crate::config;
use crate::guard::{Level, describe, fail, guard, last_error, say};

/// `ncclSplit`'s color for ranks that join no new communicator.
const SPLIT_NOCOLOR: c_int = -1;

/// `*out = value`, or an error naming the NULL pointer.
///
/// # Safety
/// `out` is NULL or valid for a write of `T`.
pub(crate) unsafe fn put<T>(out: *mut T, value: T, what: &str) -> Result<(), Error> {
    if out.is_null() {
        return Err(Error::invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-NULL, and the caller's contract makes it writable.
    unsafe { out.write(value) };
    Ok(())
}

fn rank_and_size(rank: c_int, nranks: c_int) -> Result<(usize, usize), Error> {
    match (usize::try_from(rank), usize::try_from(nranks)) {
        (Ok(r), Ok(n)) if n > 0 && r < n => Ok((r, n)),
        _ => Err(Error::invalid(format!(
            "rank {rank} of {nranks} ranks: need 0 <= rank < nranks"
        ))),
    }
}

/// The id's bytes: streamcomm's [`UniqueId`], then zeros.
fn to_id(unique: &UniqueId) -> ncclUniqueId {
    let mut id = ncclUniqueId {
        internal: [0; NCCL_UNIQUE_ID_BYTES],
    };
    for (d, s) in id.internal.iter_mut().zip(unique.to_bytes()) {
        *d = s as c_char;
    }
    id
}

fn from_id(id: &ncclUniqueId) -> Result<UniqueId, Error> {
    let bytes: Vec<u8> = id.internal[..UniqueId::BYTES]
        .iter()
        .map(|&c| c as u8)
        .collect();
    UniqueId::from_bytes(&bytes)
}

/// Makes `comm` on `device` and says so under `NCCL_DEBUG=INFO`.
fn make(comm: &Communicator, device: usize) -> Result<Ready, Error> {
    let cuda = CudaComm::on_device(comm, device)?;
    say(
        Level::Info,
        &format!(
            "rank {} of {} on device {device} ({})",
            comm.rank(),
            comm.size(),
            cuda.device_name()
        ),
    );
    Ok(Ready { cuda, device })
}

/// Makes rank `rank` of `size` of `unique`'s communicator on the calling
/// thread's device, now or (`blocking` false) on a thread of its own.
///
/// # Safety
/// `out` is NULL or valid for a write.
unsafe fn init(
    out: *mut ncclComm_t,
    unique: UniqueId,
    rank: usize,
    size: usize,
    blocking: bool,
) -> Result<ncclResult_t, Error> {
    if out.is_null() {
        return Err(Error::invalid("the communicator out-pointer is NULL"));
    }
    let device = crate::device::current()?;
    let work = move || make(&Communicator::init(&unique, rank, size)?, device);
    let (handle, code) = if blocking {
        (comms::insert_ready(work()?), ncclResult_t::ncclSuccess)
    } else {
        let thread = std::thread::Builder::new()
            .name(format!("nccl-init-{rank}"))
            .spawn(work)
            .map_err(|e| Error::os("spawn the thread making a communicator", e))?;
        (comms::insert_pending(thread), ncclResult_t::ncclInProgress)
    };
    // SAFETY: checked non-NULL above; the caller's contract.
    unsafe { out.write(handle) };
    Ok(code)
}

export! {
    /// `ncclGetVersion`: the NCCL version whose API this library covers.
    ncclGetVersion, pncclGetVersion => fn(version: *mut c_int) -> ncclResult_t {
        guard("ncclGetVersion", || {
            // SAFETY: the caller's contract for `version`.
            unsafe { put(version, NCCL_VERSION_CODE, "version") }?;
            Ok(ncclResult_t::ncclSuccess)
        })
    }
}

export! {
    /// `ncclGetUniqueId`: a new id whose bootstrap root this process
    /// serves, on 127.0.0.1 (ranks of one host; see the guide for hosts).
    ncclGetUniqueId, pncclGetUniqueId => fn(uniqueId: *mut ncclUniqueId) -> ncclResult_t {
        guard("ncclGetUniqueId", || {
            let id = to_id(&UniqueId::new()?);
            // SAFETY: the caller's contract for `uniqueId`.
            unsafe { put(uniqueId, id, "uniqueId") }?;
            Ok(ncclResult_t::ncclSuccess)
        })
    }
}

export! {
    /// `ncclCommInitRankConfig`: rank `rank` of `nranks`, blocking or not
    /// as `config` says.
    ncclCommInitRankConfig, pncclCommInitRankConfig => fn(
        comm: *mut ncclComm_t,
        nranks: c_int,
        commId: ncclUniqueId,
        rank: c_int,
        config: *mut c_void,
    ) -> ncclResult_t {
        guard("ncclCommInitRankConfig", || {
            // SAFETY: the caller's contract for `config`.
            let config = unsafe { config::read(config) }?;
            let (rank, size) = rank_and_size(rank, nranks)?;
            // SAFETY: the caller's contract for `comm`.
            unsafe { init(comm, from_id(&commId)?, rank, size, config.blocking) }
        })
    }
}

export! {
    /// `ncclCommInitRank`: rank `rank` of `nranks`, blocking.
    ncclCommInitRank, pncclCommInitRank => fn(
        comm: *mut ncclComm_t,
        nranks: c_int,
        commId: ncclUniqueId,
        rank: c_int,
    ) -> ncclResult_t {
        guard("ncclCommInitRank", || {
            let (rank, size) = rank_and_size(rank, nranks)?;
            // SAFETY: the caller's contract for `comm`.
            unsafe { init(comm, from_id(&commId)?, rank, size, true) }
        })
    }
}

export! {
    /// `ncclCommInitRankScalable`: as `ncclCommInitRankConfig` with the
    /// first of the `nId` ids (every rank passes the same ones).
    ncclCommInitRankScalable, pncclCommInitRankScalable => fn(
        newcomm: *mut ncclComm_t,
        nranks: c_int,
        myrank: c_int,
        nId: c_int,
        commIds: *mut ncclUniqueId,
        config: *mut c_void,
    ) -> ncclResult_t {
        guard("ncclCommInitRankScalable", || {
            if nId < 1 || commIds.is_null() {
                return Err(Error::invalid(format!("{nId} ids at {commIds:p}: need at least one")));
            }
            // SAFETY: the caller's contract for `config`.
            let config = unsafe { config::read(config) }?;
            let (rank, size) = rank_and_size(myrank, nranks)?;
            // SAFETY: non-NULL, and the caller's contract: nId >= 1 ids.
            let first = unsafe { commIds.read() };
            // SAFETY: the caller's contract for `newcomm`.
            unsafe { init(newcomm, from_id(&first)?, rank, size, config.blocking) }
        })
    }
}

export! {
    /// `ncclCommInitAll`: one communicator over `ndev` devices of this
    /// process (`devlist`, or 0..ndev), their ranks as threads.
    ncclCommInitAll, pncclCommInitAll => fn(
        comm: *mut ncclComm_t,
        ndev: c_int,
        devlist: *const c_int,
    ) -> ncclResult_t {
        guard("ncclCommInitAll", || {
            let n = usize::try_from(ndev)
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| Error::invalid(format!("ndev is {ndev}")))?;
            if comm.is_null() {
                return Err(Error::invalid("the communicator array is NULL"));
            }
            let devices: Vec<usize> = if devlist.is_null() {
                (0..n).collect()
            } else {
                // SAFETY: the caller's contract: `ndev` ints at `devlist`.
                let list = unsafe { std::slice::from_raw_parts(devlist, n) };
                list.iter()
                    .map(|&d| usize::try_from(d).map_err(|_| Error::invalid(format!("device {d}"))))
                    .collect::<Result<_, _>>()?
            };
            let unique = UniqueId::new()?;
            let threads: Vec<_> = devices
                .into_iter()
                .enumerate()
                .map(|(rank, dev)| {
                    std::thread::spawn(move || make(&Communicator::init(&unique, rank, n)?, dev))
                })
                .collect();
            // Every thread is joined; the first failure, in rank order, is
            // returned.
            let joined: Vec<Result<Ready, Error>> = threads
                .into_iter()
                .enumerate()
                .map(|(rank, t)| {
                    t.join().unwrap_or_else(|_| {
                        Err(Error::InvalidUsage(format!(
                            "the thread making rank {rank} panicked"
                        )))
                    })
                })
                .collect();
            let made = joined.into_iter().collect::<Result<Vec<_>, _>>()?;
            for (i, r) in made.into_iter().enumerate() {
                // SAFETY: the caller's contract: `ndev` writable handles.
                unsafe { comm.add(i).write(comms::insert_ready(r)) };
            }
            Ok(ncclResult_t::ncclSuccess)
        })
    }
}

export! {
    /// `ncclCommSplit`: the ranks with the same `color` form a new
    /// communicator, ordered by `key` then rank; `NCCL_SPLIT_NOCOLOR`
    /// ranks get NULL. Every rank calls it.
    ncclCommSplit, pncclCommSplit => fn(
        comm: ncclComm_t,
        color: c_int,
        key: c_int,
        newcomm: *mut ncclComm_t,
        config: *mut c_void,
    ) -> ncclResult_t {
        guard("ncclCommSplit", || {
            // SAFETY: the caller's contract for `config`.
            unsafe { config::read(config) }?;
            if newcomm.is_null() {
                return Err(Error::invalid("newcomm is NULL"));
            }
            let parent = comms::get(comm)?;
            let color = match color {
                SPLIT_NOCOLOR => None,
                c => Some(u32::try_from(c).map_err(|_| {
                    Error::invalid(format!("color {c}: non-negative, or NCCL_SPLIT_NOCOLOR"))
                })?),
            };
            let handle = match parent.cuda.communicator().split(color, key)? {
                Some(sub) => comms::insert_ready(make(&sub, parent.device)?),
                None => std::ptr::null_mut(),
            };
            // SAFETY: checked non-NULL; the caller's contract.
            unsafe { newcomm.write(handle) };
            Ok(ncclResult_t::ncclSuccess)
        })
    }
}

export! {
    /// `ncclCommShrink`: a new communicator of the ranks not in
    /// `excludeRanksList` (dead ones among them); every remaining rank
    /// calls it.
    ncclCommShrink, pncclCommShrink => fn(
        comm: ncclComm_t,
        excludeRanksList: *mut c_int,
        excludeRanksCount: c_int,
        newcomm: *mut ncclComm_t,
        config: *mut c_void,
        shrinkFlags: c_int,
    ) -> ncclResult_t {
        guard("ncclCommShrink", || {
            let _ = shrinkFlags;
            // SAFETY: the caller's contract for `config`.
            unsafe { config::read(config) }?;
            if newcomm.is_null() {
                return Err(Error::invalid("newcomm is NULL"));
            }
            let count = usize::try_from(excludeRanksCount)
                .map_err(|_| Error::invalid(format!("excludeRanksCount is {excludeRanksCount}")))?;
            let exclude: Vec<usize> = if count == 0 {
                Vec::new()
            } else if excludeRanksList.is_null() {
                return Err(Error::invalid("excludeRanksList is NULL"));
            } else {
                // SAFETY: the caller's contract: `count` ints.
                unsafe { std::slice::from_raw_parts(excludeRanksList, count) }
                    .iter()
                    .map(|&r| usize::try_from(r).map_err(|_| Error::invalid(format!("rank {r}"))))
                    .collect::<Result<_, _>>()?
            };
            let parent = comms::get(comm)?;
            let sub = parent.cuda.communicator().shrink_excluding(&exclude)?;
            let handle = comms::insert_ready(make(&sub, parent.device)?);
            // SAFETY: checked non-NULL; the caller's contract.
            unsafe { newcomm.write(handle) };
            Ok(ncclResult_t::ncclSuccess)
        })
    }
}

export! {
    /// `ncclCommFinalize`: nothing is left to flush (operations are on
    /// their streams); succeeds for a live communicator.
    ncclCommFinalize, pncclCommFinalize => fn(comm: ncclComm_t) -> ncclResult_t {
        guard("ncclCommFinalize", || {
            comms::status(comm)?;
            Ok(ncclResult_t::ncclSuccess)
        })
    }
}

export! {
    /// `ncclCommDestroy`: frees the communicator (synchronize its streams
    /// first, as NCCL asks).
    ncclCommDestroy, pncclCommDestroy => fn(comm: ncclComm_t) -> ncclResult_t {
        guard("ncclCommDestroy", || {
            comms::remove(comm)?;
            Ok(ncclResult_t::ncclSuccess)
        })
    }
}

export! {
    /// `ncclCommAbort`: frees the communicator here, at once. If it has
    /// failed (a peer died, a wait timed out), its operations still waiting
    /// end now with the error; a healthy communicator is closed as by
    /// `ncclCommDestroy`, so that its peers are not disturbed (cudarc's
    /// `Comm` aborts when it is dropped). Never hangs.
    ncclCommAbort, pncclCommAbort => fn(comm: ncclComm_t) -> ncclResult_t {
        guard("ncclCommAbort", || {
            if let Some(ready) = comms::remove(comm)?
                && ready.cuda.async_error().is_some()
            {
                ready.cuda.communicator().abort();
            }
            Ok(ncclResult_t::ncclSuccess)
        })
    }
}

export! {
    /// `ncclCommGetAsyncError`: `ncclInProgress` while a non-blocking
    /// communicator is being made, then its first failure's code (the
    /// reason in `ncclGetLastError`), or `ncclSuccess`.
    ncclCommGetAsyncError, pncclCommGetAsyncError => fn(
        comm: ncclComm_t,
        asyncError: *mut ncclResult_t,
    ) -> ncclResult_t {
        guard("ncclCommGetAsyncError", || {
            let code = match comms::status(comm)? {
                Status::InProgress => ncclResult_t::ncclInProgress,
                Status::Failed(e) => fail("the communicator's initialization", e),
                Status::Ready(r) => match r.cuda.async_error() {
                    Some(e) => fail("the communicator", e),
                    None => ncclResult_t::ncclSuccess,
                },
            };
            // SAFETY: the caller's contract for `asyncError`.
            unsafe { put(asyncError, code, "asyncError") }?;
            Ok(ncclResult_t::ncclSuccess)
        })
    }
}

/// Writes the entry points that store one property of a live
/// communicator (`ready`, its table entry) in an `int` out-parameter.
macro_rules! comm_queries {
    ($(
        $(#[$doc:meta])*
        $name:ident, $pname:ident($out:ident) => |$ready:ident| $value:expr;
    )*) => {$(
        export! {
            $(#[$doc])*
            $name, $pname => fn(comm: ncclComm_t, $out: *mut c_int) -> ncclResult_t {
                guard(stringify!($name), || {
                    let $ready = comms::get(comm)?;
                    // SAFETY: the caller's contract for the out-parameter.
                    unsafe { put($out, $value as c_int, stringify!($out)) }?;
                    Ok(ncclResult_t::ncclSuccess)
                })
            }
        }
    )*};
}

comm_queries! {
    /// `ncclCommCount`: the number of ranks.
    ncclCommCount, pncclCommCount(count) => |ready| ready.cuda.communicator().size();

    /// `ncclCommCuDevice`: the communicator's CUDA device.
    ncclCommCuDevice, pncclCommCuDevice(device) => |ready| ready.device;

    /// `ncclCommUserRank`: this rank.
    ncclCommUserRank, pncclCommUserRank(rank) => |ready| ready.cuda.communicator().rank();
}

export! {
    /// `ncclGetErrorString`: a static description of `result`.
    ncclGetErrorString, pncclGetErrorString => fn(result: u32) -> *const c_char {
        describe(result)
    }
}

export! {
    /// `ncclGetLastError`: this thread's last failure, with streamcomm's
    /// reason (`""` before any). `comm` is not needed.
    ncclGetLastError, pncclGetLastError => fn(comm: ncclComm_t) -> *const c_char {
        let _ = comm;
        last_error()
    }
}
